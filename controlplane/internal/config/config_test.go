package config

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil {
		t.Fatalf("FromEnv(empty) error: %v", err)
	}
	if c.Addr != "127.0.0.1:9090" || c.RedisURL != "redis://127.0.0.1:6390/0" || c.SeedDemo {
		t.Fatalf("defaults = %+v", c)
	}
	o := c.RedisOptions()
	if o == nil || o.Addr != "127.0.0.1:6390" || o.DB != 0 || !o.ContextTimeoutEnabled {
		t.Fatalf("RedisOptions = %+v", o)
	}
}

func TestOverrides(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		EnvAddr: "0.0.0.0:8080", EnvRedisURL: "redis://:pw@localhost:7000/3", EnvSeedDemo: "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "0.0.0.0:8080" || !c.SeedDemo || c.RedisOptions().DB != 3 || c.RedisOptions().Password != "pw" {
		t.Fatalf("overrides = %+v / %+v", c, c.RedisOptions())
	}
}

func TestPrometheusURL(t *testing.T) {
	c, err := FromEnv(env(map[string]string{EnvPrometheusURL: " http://127.0.0.1:9091/ "}))
	if err != nil || c.Admin.PrometheusURL != "http://127.0.0.1:9091" {
		t.Fatalf("FromEnv = %q, %v", c.Admin.PrometheusURL, err)
	}
	if c, _ := FromEnv(env(nil)); c.Admin.PrometheusURL != "" {
		t.Fatalf("unset = %q, want absent", c.Admin.PrometheusURL)
	}
}

func TestAlertSettings(t *testing.T) {
	c, err := FromEnv(env(nil))
	if a := c.Admin.Alerts; err != nil || a.CleanupStalled != 120*time.Second || a.SpikeWindow != time.Minute ||
		a.SpikeBaseline != 30*time.Minute || a.SpikeMinHistory != 10*time.Minute {
		t.Fatalf("defaults %+v, %v", a, err)
	}
	c, err = FromEnv(env(map[string]string{EnvAlertCleanupStalled: "8s", EnvAlertSpikeWindow: "5s",
		EnvAlertSpikeBaseline: "1m", EnvAlertSpikeMinHistory: "10s"}))
	if a := c.Admin.Alerts; err != nil || a.CleanupStalled != 8*time.Second || a.SpikeWindow != 5*time.Second ||
		a.SpikeBaseline != time.Minute || a.SpikeMinHistory != 10*time.Second {
		t.Fatalf("overrides %+v, %v", a, err)
	}
}

func TestSecuritySettings(t *testing.T) {
	c, err := FromEnv(env(nil))
	if a := c.Admin; err != nil || a.TrustedProxies != nil || a.AnonRate != 1 || a.AnonBurst != 100 ||
		a.AuditAnonMax != 10000 || c.TLSCert != "" {
		t.Fatalf("defaults %+v, %v", a, err)
	}
	c, err = FromEnv(env(map[string]string{EnvTrustedProxy: " 10.0.0.0/8, 192.0.2.7 ,2001:db8::/48, ::1",
		EnvAnonRate: "0.5", EnvAnonBurst: "30", EnvAuditAnonMax: "500"}))
	want := "10.0.0.0/8 192.0.2.7/32 2001:db8::/48 ::1/128"
	if a := c.Admin; err != nil || strings.Join(a.TrustedProxies, " ") != want || a.AnonRate != 0.5 ||
		a.AnonBurst != 30 || a.AuditAnonMax != 500 {
		t.Fatalf("overrides %+v, %v", a, err)
	}
}

func TestInvalidValuesAreAllReported(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"addr without port", map[string]string{EnvAddr: "127.0.0.1"}, []string{EnvAddr}},
		{"port out of range", map[string]string{EnvAddr: "127.0.0.1:70000"}, []string{EnvAddr}},
		{"bad host", map[string]string{EnvAddr: "a b:80"}, []string{EnvAddr}},
		{"bad scheme", map[string]string{EnvRedisURL: "http://x:1"}, []string{EnvRedisURL}},
		{"bad db", map[string]string{EnvRedisURL: "redis://x:1/abc"}, []string{EnvRedisURL}},
		{"bad bool", map[string]string{EnvSeedDemo: "maybe"}, []string{EnvSeedDemo}},
		{"prometheus not http", map[string]string{EnvPrometheusURL: "127.0.0.1:9091"}, []string{EnvPrometheusURL}},
		{"prometheus with query", map[string]string{EnvPrometheusURL: "http://p:9091/?x=1"}, []string{EnvPrometheusURL}},
		{"alert age below 1s", map[string]string{EnvAlertCleanupStalled: "500ms"}, []string{EnvAlertCleanupStalled}},
		{"spike history beyond its baseline", map[string]string{EnvAlertSpikeBaseline: "5m"},
			[]string{EnvAlertSpikeMinHistory}},
		{"proxy not a CIDR", map[string]string{EnvTrustedProxy: "10.0.0.0/8,proxy.example.com"}, []string{EnvTrustedProxy}},
		{"proxy bad mask", map[string]string{EnvTrustedProxy: "10.0.0.0/33"}, []string{EnvTrustedProxy}},
		{"anon rate zero", map[string]string{EnvAnonRate: "0"}, []string{EnvAnonRate}},
		{"anon burst zero", map[string]string{EnvAnonBurst: "0"}, []string{EnvAnonBurst}},
		{"anon audit too small", map[string]string{EnvAuditAnonMax: "10"}, []string{EnvAuditAnonMax}},
		{"tls cert without key", map[string]string{EnvTLSCert: "/nonexistent.pem"}, []string{EnvTLSCert}},
		{"all three", map[string]string{EnvAddr: ":0", EnvRedisURL: "nope://", EnvSeedDemo: "2"},
			[]string{EnvAddr, EnvRedisURL, EnvSeedDemo}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromEnv(env(tc.env))
			if err == nil {
				t.Fatalf("FromEnv(%v): want error", tc.env)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
		})
	}
}

func TestPrintedConfigHasNoPassword(t *testing.T) {
	c, err := FromEnv(env(map[string]string{EnvRedisURL: "redis://user:s3cret@127.0.0.1:6390/0"}))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "config", c)
	if out := buf.String(); strings.Contains(out, "s3cret") || !strings.Contains(out, "127.0.0.1:6390") {
		t.Fatalf("printed config = %q: must show the address, not the password", out)
	}
	_, err = FromEnv(env(map[string]string{EnvRedisURL: "redis://user:s3cret@host:x/0"}))
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v must exist and not contain the password", err)
	}
}
