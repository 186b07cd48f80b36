package t

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

func loginStatus(t *testing.T, c *http.Client, url, password string, hdr map[string]string) int {
	t.Helper()
	code, _ := loginAnswer(t, c, url, password, hdr)
	return code
}

// loginAnswer is the status and Retry-After (seconds) of a login of admin.
func loginAnswer(t *testing.T, c *http.Client, url, password string, hdr map[string]string) (int, int) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"username": "admin", "password": password})
	req, _ := http.NewRequest("POST", url+"/api/v1/auth/login", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	resp.Body.Close()
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, ra
}

// The control plane binary serves HTTPS from TOLLGATE_TLS_CERT / TOLLGATE_TLS_KEY (issue 19
// item 10) and refuses a request head over 16 KiB with 431 (item 2).
func TestControlPlaneServesHTTPSFromSettings(t *testing.T) {
	r := testutil.StartRedis(t)
	cert, key, pool := testutil.SelfSignedCert(t)
	cp := harness.StartControlPlane(t, r.URL(), map[string]string{"TOLLGATE_ADMIN_PASSWORD": adminPassword,
		"TOLLGATE_CP_JOBS": "false", "TOLLGATE_TLS_CERT": cert, "TOLLGATE_TLS_KEY": key})
	if !strings.HasPrefix(cp.URL, "https://") {
		t.Fatalf("URL %s", cp.URL)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code := loginStatus(t, c, cp.URL, adminPassword, nil); code != 200 {
		t.Fatalf("login over HTTPS = %d", code)
	}
	plain := "http" + strings.TrimPrefix(cp.URL, "https")
	if resp, err := http.Get(plain + "/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered 200 on the TLS port")
		}
	}
	if code := loginStatus(t, c, cp.URL, adminPassword, map[string]string{"X-Big": strings.Repeat("b", 32<<10)}); code != 431 {
		t.Fatalf("32 KiB header = %d, want 431", code)
	}
	if out := cp.Output(); !strings.Contains(out, "tls=true") || strings.Contains(out, "without TLS") {
		t.Fatalf("start log:\n%s", out)
	}
}

// Through the binary: login failures count per (user, client), the client behind
// TOLLGATE_CP_TRUSTED_PROXIES comes from X-Forwarded-For, other senders' X-Forwarded-For is
// ignored (issue 19 item 4). The clients are loopback source addresses.
func TestControlPlaneLoginPerClientBehindTrustedProxy(t *testing.T) {
	r := testutil.StartRedis(t)
	cp := harness.StartControlPlane(t, r.URL(), map[string]string{"TOLLGATE_ADMIN_PASSWORD": adminPassword,
		"TOLLGATE_CP_JOBS": "false", "TOLLGATE_LOGIN_MAX_USER": "2", "TOLLGATE_CP_TRUSTED_PROXIES": "127.0.0.2"})
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	}
	proxy, direct := from("127.0.0.2"), from("127.0.0.3")
	xff := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
	for i := 0; i < 2; i++ {
		if code := loginStatus(t, proxy, cp.URL, "wrong-password-1", xff("198.51.100.7")); code != 401 {
			t.Fatalf("failure %d = %d", i, code)
		}
	}
	// the client keeps failing until its wait has grown to 4 s (1 s, 2 s, 4 s: a slow bcrypt on
	// a busy host cannot outlast it), then even the right password waits
	harness.Eventually(t, 30*time.Second, "a wait of 4 s for the failing client", func() bool {
		code, ra := loginAnswer(t, proxy, cp.URL, "wrong-password-1", xff("198.51.100.7"))
		return code == 429 && ra >= 4
	})
	if code := loginStatus(t, proxy, cp.URL, adminPassword, xff("198.51.100.7")); code != 429 {
		t.Fatalf("the failing client behind the proxy = %d, want 429", code)
	}
	if code := loginStatus(t, proxy, cp.URL, adminPassword, xff("198.51.100.8")); code != 200 {
		t.Fatalf("another client behind the proxy = %d, want 200", code)
	}
	// an untrusted sender claiming the failing client's address is counted as itself
	if code := loginStatus(t, direct, cp.URL, adminPassword, xff("198.51.100.7")); code != 200 {
		t.Fatalf("direct client with a forged X-Forwarded-For = %d, want 200", code)
	}
}
