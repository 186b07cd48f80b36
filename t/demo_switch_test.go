// The demo backend's failure switch behind a real gateway: it lives on the backend's own
// loopback admin listener, so no request through the gateway reaches it, whatever header names
// the app (issue 19: it used to trust a literal X-App-Id, which a gateway configured with
// another TOLLGATE_APP_HEADER forwards as any header).
package t

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"tollgate/internal/scripts"
	"tollgate/internal/seed"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

func TestDemoFailureSwitchIsUnreachableThroughTheGateway(t *testing.T) {
	r := testutil.StartRedis(t)
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Demo(context.Background(), store.New(r.Client(), set)); err != nil {
		t.Fatal(err)
	}
	_, addr, admin := demoBackend(t, nil)
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: r.URL(), Backend: addr, Workers: 1,
		Env: map[string]string{"TOLLGATE_APP_HEADER": "X-Tenant"}})
	mode := func() int {
		resp, err := http.Get("http://" + admin + "/_demo/fail")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct {
			Status int `json:"status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m.Status
	}
	hdr := map[string]string{"X-Tenant": "demo-p1"}
	if r := g.Do("PUT", "/switch-bkt/obj", "", strings.NewReader("payload"), hdr); r.Status != 200 {
		t.Fatalf("PUT through the gateway: %d %s", r.Status, r.Body)
	}
	for _, path := range []string{"/_demo/fail?status=503", "/_demo/fail?status=503&count=5", "/_demo/heal",
		"/%5Fdemo/fail?status=503", "//_demo/fail?status=503"} {
		for _, h := range []map[string]string{hdr, {"X-Tenant": "demo-p1", "X-App-Id": "demo-p1"}} {
			r := g.Do("POST", path, "", nil, h)
			if r.Status == 200 {
				t.Fatalf("POST %s through the gateway answered 200: %s", path, r.Body)
			}
		}
		if m := mode(); m != 0 {
			t.Fatalf("POST %s through the gateway switched the backend to failing (%d)", path, m)
		}
	}
	if r := g.Do("GET", "/switch-bkt/obj", "", nil, hdr); r.Status != 200 || string(r.Body) != "payload" {
		t.Fatalf("GET after the attempts: %d %q", r.Status, r.Body)
	}
	// the switch itself works, from its own listener
	resp, err := http.Post("http://"+admin+"/_demo/fail?status=503&count=1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if r := g.Do("GET", "/switch-bkt/obj", "", nil, hdr); r.Status != 503 {
		t.Fatalf("GET with the switch on: %d, want the backend's 503", r.Status)
	}
}
