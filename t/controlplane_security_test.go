package t

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

// selfSignedCert writes a certificate for 127.0.0.1 and its key; it returns the files and a
// pool that trusts the certificate.
func selfSignedCert(t *testing.T) (string, string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tollgate-it"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return cert, keyFile, pool
}

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
	cert, key, pool := selfSignedCert(t)
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
