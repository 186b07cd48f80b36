package s3

import (
	"encoding/json"
	"testing"
)

func TestFailOnCommand(t *testing.T) {
	b := start(t, Options{})
	b.must(200, "PUT", "/bk", nil)
	b.must(200, "PUT", "/bk/o", "data")

	// a counted failure: exactly N requests fail, then the backend heals by itself
	b.must(200, "POST", "/_demo/fail?status=503&count=2", nil)
	b.wantError(b.do("GET", "/bk/o", nil), 503, "ServiceUnavailable")
	b.wantError(b.do("GET", "/_demo/blob?size=1", nil), 503, "ServiceUnavailable")
	b.must(200, "GET", "/bk/o", nil)

	// until healed
	b.must(200, "POST", "/_demo/fail?status=500", nil)
	for i := 0; i < 3; i++ {
		b.wantError(b.do("GET", "/bk/o", nil), 500, "InternalError")
	}
	var mode failureMode
	if err := json.Unmarshal([]byte(b.must(200, "GET", "/_demo/fail", nil).body), &mode); err != nil ||
		mode.Status != 500 || mode.Count != -1 || mode.Ratio != 1 {
		t.Fatalf("mode: %+v (%v)", mode, err)
	}
	b.must(200, "POST", "/_demo/heal", nil)
	b.must(200, "GET", "/bk/o", nil)

	// a ratio fails some and serves some
	b.must(200, "POST", "/_demo/fail?status=502&ratio=0.5", nil)
	failed, served := 0, 0
	for i := 0; i < 200; i++ {
		switch b.do("GET", "/bk/o", nil).code {
		case 502:
			failed++
		case 200:
			served++
		}
	}
	if failed == 0 || served == 0 || failed+served != 200 {
		t.Fatalf("ratio 0.5: %d failed, %d served", failed, served)
	}
	b.must(200, "POST", "/_demo/heal", nil)
}

func TestFailSwitchRefusesBadInputAndTheGateway(t *testing.T) {
	b := start(t, Options{})
	for _, q := range []string{"", "?status=200", "?status=abc", "?status=503&count=0",
		"?status=503&ratio=0", "?status=503&ratio=1.5", "?status=503&count=2&ratio=0.5"} {
		b.wantError(b.do("POST", "/_demo/fail"+q, nil), 400, "InvalidArgument")
	}
	b.wantError(b.do("DELETE", "/_demo/fail", nil), 405, "MethodNotAllowed")
	// proxied by the gateway: refused, and the backend stays healthy
	b.wantError(b.do("POST", "/_demo/fail?status=503", nil, "X-App-Id", "demo-p0"), 403, "AccessDenied")
	b.must(200, "GET", "/", nil)
}
