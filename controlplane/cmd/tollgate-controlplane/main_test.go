package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/controlplane/internal/admin"
	"tollgate/controlplane/internal/config"
	"tollgate/internal/keys"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

// syncBuffer is a log destination the test reads while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServe runs serve on a listener of addr until the test ends; it returns the address.
func startServe(t *testing.T, addr, cert, key string, h http.Handler) (string, *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(out, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, log, ln, cert, key, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String(), out
}

// rawStatus sends a raw HTTP/1.1 request head and returns the status line.
func rawStatus(t *testing.T, addr, head string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return strings.TrimSpace(line)
}

// Item 2: a request head over 16 KiB (a huge method or header) gets 431 before the API sees
// it, so no audit entry of that size is written.
func TestOversizedRequestHeadIsRefused(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	ctx := context.Background()
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := set.LoadAll(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultAdmin()
	cfg.Password = "admin-password-123"
	a, err := admin.Start(ctx, admin.Options{Config: cfg, Redis: rdb, Scripts: set, Store: store.New(rdb, set),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), BcryptCost: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	addr, _ := startServe(t, "127.0.0.1:0", "", "", a.Handler)
	big := strings.Repeat("A", 32<<10)
	if st := rawStatus(t, addr, big+" /api/v1/apps HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(st, "HTTP/1.1 431") {
		t.Fatalf("32 KiB method: %q, want 431", st)
	}
	if st := rawStatus(t, addr, "GET /api/v1/apps HTTP/1.1\r\nHost: x\r\nX-Big: "+big+"\r\n\r\n"); !strings.HasPrefix(st, "HTTP/1.1 431") {
		t.Fatalf("32 KiB header: %q, want 431", st)
	}
	// a request under the cap is served and audited (which shows the writer ran)
	if st := rawStatus(t, addr, "GET /api/v1/apps HTTP/1.1\r\nHost: x\r\nX-Pad: "+big[:8<<10]+"\r\n\r\n"); !strings.HasPrefix(st, "HTTP/1.1 401") {
		t.Fatalf("8 KiB header: %q, want 401", st)
	}
	var entries []string
	testutil.Eventually(t, 5*time.Second, func() bool {
		entries = entries[:0]
		for _, key := range []string{keys.AdminAudit(), keys.AdminAuditAnonymous()} {
			xs, _ := rdb.XRange(ctx, key, "-", "+").Result()
			for _, x := range xs {
				entries = append(entries, x.Values["e"].(string))
			}
		}
		return strings.Contains(strings.Join(entries, "\n"), `"status":401`)
	}, "the 401's audit entry")
	for _, e := range entries {
		if len(e) > 1024 {
			t.Fatalf("an audit entry of %d bytes: %.200s", len(e), e)
		}
	}
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// Item 10: TOLLGATE_TLS_CERT / TOLLGATE_TLS_KEY serve HTTPS.
func TestTLSFromSettings(t *testing.T) {
	cert, key, pool := testutil.SelfSignedCert(t)
	env := map[string]string{config.EnvTLSCert: cert, config.EnvTLSKey: key}
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil || cfg.TLSCert != cert || cfg.TLSKey != key {
		t.Fatalf("config: %+v %v", cfg, err)
	}
	addr, out := startServe(t, "127.0.0.1:0", cfg.TLSCert, cfg.TLSKey, okHandler)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + addr + "/health")
	if err != nil {
		t.Fatalf("https: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("https answer %d tls=%v", resp.StatusCode, resp.TLS != nil)
	}
	resp, err = http.Get("http://" + addr + "/health")
	if err == nil {
		resp.Body.Close()
	}
	if err == nil && resp.StatusCode == 200 {
		t.Fatal("plain HTTP served on the TLS listener")
	}
	if !strings.Contains(out.String(), "tls=true") {
		t.Fatalf("start log does not say tls: %s", out.String())
	}
	for name, env := range map[string]map[string]string{
		"cert only":   {config.EnvTLSCert: cert},
		"key only":    {config.EnvTLSKey: key},
		"no file":     {config.EnvTLSCert: cert + ".missing", config.EnvTLSKey: key},
		"swapped":     {config.EnvTLSCert: key, config.EnvTLSKey: cert},
		"not matched": {config.EnvTLSCert: cert, config.EnvTLSKey: otherKey(t)},
	} {
		if _, err := config.FromEnv(func(k string) string { return env[k] }); err == nil ||
			!strings.Contains(err.Error(), config.EnvTLSCert) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, config.EnvTLSCert)
		}
	}
}

func otherKey(t *testing.T) string {
	_, key, _ := testutil.SelfSignedCert(t)
	return key
}

// Item 10: listening off loopback without TLS warns at start; loopback or TLS do not.
func TestPlaintextOffLoopbackWarns(t *testing.T) {
	const warning = "off loopback without TLS"
	cert, key, _ := testutil.SelfSignedCert(t)
	for _, c := range []struct {
		addr, cert, key string
		warn            bool
	}{
		{"0.0.0.0:0", "", "", true},
		{"127.0.0.1:0", "", "", false},
		{"127.0.0.2:0", "", "", false},
		{"0.0.0.0:0", cert, key, false},
	} {
		_, out := startServe(t, c.addr, c.cert, c.key, okHandler)
		testutil.Eventually(t, 5*time.Second, func() bool { return strings.Contains(out.String(), "http server listening") },
			"the start log")
		if got := strings.Contains(out.String(), warning); got != c.warn {
			t.Errorf("%s tls=%v: warned=%v, want %v:\n%s", c.addr, c.cert != "", got, c.warn, out.String())
		}
	}
}
