package s3

import (
	"encoding/json"
	"testing"
)

func TestFailOnCommand(t *testing.T) {
	b := start(t, Options{})
	b.must(200, "PUT", "/bkt", nil)
	b.must(200, "PUT", "/bkt/o", "data")

	// a counted failure: exactly N requests fail, then the backend heals by itself
	if r := b.adminDo("POST", "/_demo/fail?status=503&count=2"); r.code != 200 {
		t.Fatalf("fail: %d %s", r.code, r.body)
	}
	b.wantError(b.do("GET", "/bkt/o", nil), 503, "ServiceUnavailable")
	if r := b.do("HEAD", "/bkt", nil); r.code != 503 {
		t.Fatalf("HEAD during failure: %d", r.code)
	}
	b.must(200, "GET", "/bkt/o", nil)

	// until healed
	b.adminDo("POST", "/_demo/fail?status=500")
	for i := 0; i < 3; i++ {
		b.wantError(b.do("GET", "/bkt/o", nil), 500, "InternalError")
	}
	var mode failureMode
	if err := json.Unmarshal([]byte(b.adminDo("GET", "/_demo/fail").body), &mode); err != nil ||
		mode.Status != 500 || mode.Count != -1 || mode.Ratio != 1 {
		t.Fatalf("mode: %+v (%v)", mode, err)
	}
	b.adminDo("POST", "/_demo/heal")
	b.must(200, "GET", "/bkt/o", nil)

	// a ratio fails some and serves some
	b.adminDo("POST", "/_demo/fail?status=502&ratio=0.5")
	failed, served := 0, 0
	for i := 0; i < 200; i++ {
		switch b.do("GET", "/bkt/o", nil).code {
		case 502:
			failed++
		case 200:
			served++
		}
	}
	if failed == 0 || served == 0 || failed+served != 200 {
		t.Fatalf("ratio 0.5: %d failed, %d served", failed, served)
	}
	b.adminDo("POST", "/_demo/heal")
}

// The switch lives on the admin listener only: on the storage port (the one a gateway proxies
// to) /_demo/fail is no command, whatever headers come with it.
func TestFailSwitchIsNotOnTheStoragePort(t *testing.T) {
	b := start(t, Options{})
	a := &backend{t: t, url: b.admin}
	for _, q := range []string{"", "?status=200", "?status=abc", "?status=503&count=0",
		"?status=503&ratio=0", "?status=503&ratio=1.5", "?status=503&count=2&ratio=0.5"} {
		a.wantError(a.do("POST", "/_demo/fail"+q, nil), 400, "InvalidArgument")
	}
	a.wantError(a.do("DELETE", "/_demo/fail", nil), 405, "MethodNotAllowed")
	for _, h := range [][]string{nil, {"X-App-Id", "demo-p0"}, {"X-Tenant", "demo-p0"}} {
		r := b.do("POST", "/_demo/fail?status=503", nil, h...)
		if r.code == 200 {
			t.Fatalf("the storage port took a failure command (%v): %s", h, r.body)
		}
	}
	b.must(200, "PUT", "/bkt", nil)
	b.must(200, "GET", "/bkt", nil)
	var mode failureMode
	if err := json.Unmarshal([]byte(a.must(200, "GET", "/_demo/fail", nil).body), &mode); err != nil || mode.Status != 0 {
		t.Fatalf("mode after storage-port attempts: %+v %v", mode, err)
	}
}
