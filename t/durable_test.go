package t

// Redis as a durable config store (docs/durability.md): an acknowledged write survives kill -9,
// a wiped store is noticed and not obeyed, restore brings the config back, WAIT keeps
// acknowledged writes across a failover, export/import round trips, a bad import changes
// nothing. Real redis-server, nginx and control plane.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

const metricsToken = "durable-test-metrics-token-0123456789abcdef"

func cpEnv(extra map[string]string) map[string]string {
	env := map[string]string{"TOLLGATE_ADMIN_PASSWORD": adminPassword, "TOLLGATE_CP_JOBS": "false",
		"TOLLGATE_LIVE_INTERVAL": "500ms", "TOLLGATE_STORE_CHECK": "200ms", "TOLLGATE_METRICS_TOKEN": metricsToken,
		"TOLLGATE_API_RATE": "1000", "TOLLGATE_API_BURST": "1000"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// raw sends a request with the admin token and returns status, headers and body.
func (a *adminAPI) raw(method, path, contentType string, body []byte) (int, http.Header, []byte) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, bytes.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func cpHealth(cp *harness.ControlPlane) (status, reason string) {
	h := cp.Health()
	if h == nil {
		return "", ""
	}
	s, _ := h["status"].(string)
	r, _ := h["reason"].(string)
	return s, r
}

func gwHealth(t *testing.T, g *harness.Gateway) (status, epoch string) {
	t.Helper()
	resp, err := g.Client.Get(g.MetricsURL + "/health")
	if err != nil {
		return "", ""
	}
	defer resp.Body.Close()
	var h struct {
		Status string `json:"status"`
		Epoch  string `json:"config_epoch"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return h.Status, h.Epoch
}

func cpMetric(t *testing.T, cp *harness.ControlPlane, series string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", cp.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, series+" ") {
			var v float64
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, series+" ")), &v)
			return v
		}
	}
	return -1
}

// A config write answered 2xx is in Redis after kill -9 and a restart with the same command
// line (AOF with appendfsync everysec, as make run starts it), and the gateway serves the app.
func TestAcknowledgedConfigWriteSurvivesKill9(t *testing.T) {
	r := testutil.StartRedisArgs(t, "--appendonly", "yes", "--appendfsync", "everysec")
	cp := harness.StartControlPlane(t, r.URL(), cpEnv(map[string]string{"TOLLGATE_SEED_DEMO": "true"}))
	api := loginAdmin(t, cp)
	var out struct {
		Data struct {
			Version int64 `json:"config_version"`
		} `json:"data"`
	}
	code := api.do("POST", "/api/v1/apps", map[string]any{"app_id": "kept-app", "cluster_id": "default",
		"guaranteed_quota": 1000, "burst_quota": 5000, "priority": 1}, &out)
	if code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	r.Crash() // SIGKILL right after the 201, then the same command line
	ctx := context.Background()
	rdb := r.Client()
	harness.Eventually(t, 10*time.Second, "the app in the restarted Redis", func() bool {
		ok, err := rdb.HExists(ctx, "ratelimit:apps", "kept-app").Result()
		return err == nil && ok
	})
	if v, _ := rdb.Get(ctx, "ratelimit:config:version").Int64(); v < out.Data.Version {
		t.Fatalf("config version %d after the restart, the write answered %d", v, out.Data.Version)
	}
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: r.URL(), NodeID: "node-kill9"})
	harness.Eventually(t, 5*time.Second, "the gateway admits kept-app", func() bool {
		res := g.Do("GET", "/bucket/obj", "kept-app", nil, nil)
		return res.Status != 403 && res.Status != 429
	})
}

type flushLoad struct {
	total, unknownApp, other atomic.Int64
}

// load sends GETs for apps until stop is closed, counting refusals because an app is unknown.
func flushLoadRun(g *harness.Gateway, apps []string, stop <-chan struct{}, res *flushLoad, wg *sync.WaitGroup) {
	defer wg.Done()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		req, _ := http.NewRequest("GET", g.URL+"/bucket/obj", nil)
		req.Header.Set("X-App-Id", apps[i%len(apps)])
		resp, err := g.Client.Do(req)
		if err != nil {
			res.other.Add(1)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res.total.Add(1)
		if resp.StatusCode == 403 && bytes.Contains(b, []byte("unknown_app")) {
			res.unknownApp.Add(1)
		}
	}
}

// FLUSHALL under load: no request is refused because its app vanished, for the whole window;
// the gateway and the control plane report the lost store (/health, metrics, the alert), and
// restore from the newest snapshot brings the config and the users back and clears it all.
func TestFlushAllUnderLoadIsNoticedNotObeyedAndRestored(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	cp := harness.StartControlPlane(t, s.redis.URL(), cpEnv(nil))
	ctx := context.Background()
	epoch := ""
	harness.Eventually(t, 10*time.Second, "the store's epoch written and known by the gateway", func() bool {
		epoch, _ = s.rdb.Get(ctx, "ratelimit:config:epoch").Result()
		_, ge := gwHealth(t, g)
		return epoch != "" && ge == epoch
	})
	var m []string
	harness.Eventually(t, 10*time.Second, "a snapshot of the current version (the first admin included)", func() bool {
		v, _ := s.rdb.Get(ctx, "ratelimit:config:version").Result()
		m, _ = filepath.Glob(filepath.Join(cp.BackupDir, "config-*-v"+v+".json"))
		n, _ := s.rdb.HLen(ctx, "ratelimit:admin:users").Result()
		return len(m) > 0 && n == 1
	})
	if fi, err := os.Stat(m[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot %s: mode %v, err %v; want 0600", m[0], fi.Mode().Perm(), err)
	}

	var res flushLoad
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go flushLoadRun(g, []string{"demo-p0", "demo-p1", "demo-p2"}, stop, &res, &wg)
	}
	harness.Eventually(t, 5*time.Second, "load running", func() bool { return res.total.Load() > 50 })
	if err := s.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, "the gateway's /health says config_store_lost", func() bool {
		st, _ := gwHealth(t, g)
		return st == "config_store_lost"
	})
	harness.Eventually(t, 5*time.Second, "the control plane's /health says config_store_lost", func() bool {
		st, reason := cpHealth(cp)
		return st == "config_store_lost" && strings.HasPrefix(reason, "epoch_missing")
	})
	if v := g.Metric("ratelimit_config_store_lost"); v != 1 {
		t.Fatalf("gateway ratelimit_config_store_lost = %v", v)
	}
	if v := cpMetric(t, cp, "tollgate_cp_config_store_lost"); v != 1 {
		t.Fatalf("control plane tollgate_cp_config_store_lost = %v", v)
	}
	alert := func() map[string]any {
		doc, err := s.rdb.HGet(ctx, "ratelimit:admin:alerts", "config_store_lost-config").Result()
		if err != nil {
			return nil
		}
		var a map[string]any
		_ = json.Unmarshal([]byte(doc), &a)
		return a
	}
	harness.Eventually(t, 5*time.Second, "the critical config_store_lost alert raised", func() bool {
		a := alert()
		return a != nil && a["active"] == true && a["severity"] == "critical"
	})
	if n, _ := s.rdb.HLen(ctx, "ratelimit:apps").Result(); n != 0 {
		t.Fatalf("%d apps seeded into the lost store", n)
	}
	time.Sleep(1500 * time.Millisecond) // more load on the lost store (several polls of the gateway)

	dry, stderr, code := cp.Command("restore")
	if code != 3 || !strings.Contains(dry, `"apps[demo-p1].burst_quota"`) {
		t.Fatalf("restore dry run: exit %d\n%s\n%s", code, dry, stderr)
	}
	if n, _ := s.rdb.HLen(ctx, "ratelimit:apps").Result(); n != 0 {
		t.Fatalf("the dry run wrote %d apps", n)
	}
	if out, stderr, code := cp.Command("restore", "-apply"); code != 0 {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, stderr)
	}
	harness.Eventually(t, 5*time.Second, "the control plane's /health ok again", func() bool {
		st, _ := cpHealth(cp)
		return st == "ok"
	})
	harness.Eventually(t, 5*time.Second, "the gateway's /health ok again with the same epoch", func() bool {
		st, ge := gwHealth(t, g)
		return st == "ok" && ge == epoch
	})
	harness.Eventually(t, 5*time.Second, "the alert resolved", func() bool {
		a := alert()
		return a != nil && a["active"] == false
	})
	close(stop)
	wg.Wait()
	if n, _ := s.rdb.HLen(ctx, "ratelimit:apps").Result(); n != 4 {
		t.Fatalf("%d apps after the restore, want the 4 demo apps", n)
	}
	api := loginAdmin(t, cp) // the users came back with the snapshot
	var apps struct {
		Data []struct {
			AppID string `json:"app_id"`
		} `json:"data"`
	}
	if code := api.do("GET", "/api/v1/apps", nil, &apps); code != 200 || len(apps.Data) != 4 {
		t.Fatalf("apps after restore: %d %+v", code, apps)
	}
	t.Logf("%d requests during the test, %d refused as unknown_app, %d transport errors",
		res.total.Load(), res.unknownApp.Load(), res.other.Load())
	if res.unknownApp.Load() != 0 {
		t.Fatalf("%d requests refused as unknown_app while the store was lost", res.unknownApp.Load())
	}
	if g.Metric("ratelimit_config_store_lost_total") != 1 {
		t.Fatalf("ratelimit_config_store_lost_total = %v, want 1 (one loss, logged once)", g.Metric("ratelimit_config_store_lost_total"))
	}
	if n := strings.Count(g.ErrorLog(), "config store lost"); n != 1 {
		t.Fatalf("the gateway logged the loss %d times, want once", n)
	}
	t.Logf("%d lines 'L2 state of … missing' in the error log", strings.Count(g.ErrorLog(), "missing in Redis"))
}

// A replica promoted before it synced (Sentinel): with WAIT on, every config write the control
// plane answered as replicated is on the new master; a write it could not confirm (the replica
// was down) is answered 2xx saying so, and its loss makes the control plane report the store
// lost (version_backwards) instead of carrying on. Master and replica keep an AOF (as production
// should), so the replica comes back with what it acknowledged.
func TestSentinelPromotionLosesNoAcknowledgedWrite(t *testing.T) {
	grp := testutil.StartSentinelGroupArgs(t, "--appendonly", "yes", "--appendfsync", "everysec")
	cp := harness.StartControlPlane(t, grp.URL(), cpEnv(map[string]string{"TOLLGATE_SEED_DEMO": "true",
		"TOLLGATE_CONFIG_WAIT_TIMEOUT": "300ms"}))
	api := loginAdmin(t, cp)
	create := func(id string) string {
		body, _ := json.Marshal(map[string]any{"app_id": id, "cluster_id": "default",
			"guaranteed_quota": 100, "burst_quota": 500, "priority": 2})
		code, hdr, b := api.raw("POST", "/api/v1/apps", "application/json", body)
		if code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", id, code, b)
		}
		return hdr.Get("Tollgate-Replication")
	}
	answers := map[string]string{}
	answers["synced-app"] = create("synced-app")
	if answers["synced-app"] != "1/1" {
		t.Fatalf("synced-app: Tollgate-Replication %q, want 1/1", answers["synced-app"])
	}
	grp.WaitQuorum()
	grp.Replica.Freeze() // the replica hangs (the master still counts it): the next write cannot be confirmed
	answers["unsynced-app"] = create("unsynced-app")
	old := grp.MasterAddr()
	grp.Master.Kill()   // the master dies with a write its replica never got …
	grp.Replica.Crash() // … which comes back from its AOF and is promoted
	grp.WaitNewMaster(old)
	ctx := context.Background()
	nm := grp.Replica.Client()
	for id, answer := range answers {
		ok, err := nm.HExists(ctx, "ratelimit:apps", id).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: answered Tollgate-Replication %q, on the new master: %v", id, answer, ok)
		if !ok && !strings.HasPrefix(answer, "unconfirmed") {
			t.Errorf("%s was answered %q (not unconfirmed) and is lost after the promotion", id, answer)
		}
	}
	if !strings.HasPrefix(answers["unsynced-app"], "unconfirmed 0/1") {
		t.Errorf("unsynced-app: Tollgate-Replication %q, want unconfirmed 0/1", answers["unsynced-app"])
	}
	if ok, _ := nm.HExists(ctx, "ratelimit:apps", "unsynced-app").Result(); !ok {
		harness.Eventually(t, 15*time.Second, "the control plane reports the store lost (version went back)", func() bool {
			st, reason := cpHealth(cp)
			return st == "config_store_lost" && strings.HasPrefix(reason, "version_backwards")
		})
	}
}

func export(t *testing.T, api *adminAPI, query string) []byte {
	t.Helper()
	code, _, b := api.raw("GET", "/api/v1/config/export"+query, "", nil)
	if code != 200 {
		t.Fatalf("export%s: %d %s", query, code, b)
	}
	return b
}

// fullConfig gives a store every kind of config: apps, clusters, connection limits, a rule, a
// breaker.
func fullConfig(t *testing.T, api *adminAPI) {
	t.Helper()
	api.change("POST", "/api/v1/apps", map[string]any{"app_id": "rt-app", "cluster_id": "default",
		"guaranteed_quota": 1500, "burst_quota": 6000, "priority": 3, "c_bw": 2, "max_borrow": 100})
	api.change("PUT", "/api/v1/connections/rt-app", map[string]any{"max_connections": 7, "burst_connections": 9})
	api.change("PUT", "/api/v1/clusters/default/connections", map[string]any{"max_connections": 70, "reserved_ratio": 0.2})
	api.change("POST", "/api/v1/rules", map[string]any{"id": "rt-rule", "scope": "user", "user_key": "header:X-User-Id",
		"match":     map[string]any{"app_ids": []string{"rt-app"}, "methods": []string{"PUT"}},
		"algorithm": "fixed_window", "limit": 2, "window_seconds": 60})
	api.change("PUT", "/api/v1/breakers/rt-backend", map[string]any{"failure_threshold": 3})
	for _, k := range []string{"AKIAROUNDTRIP0001", "minio-rt-key"} {
		if code := api.do("POST", "/api/v1/apps/rt-app/access-keys", map[string]any{"access_key_id": k}, nil); code != 201 {
			t.Fatalf("access key %s: %d", k, code)
		}
	}
	if code := api.do("PUT", "/api/v1/buckets/rt-photos", map[string]any{"app_id": "rt-app"}, nil); code/100 != 2 {
		t.Fatalf("bucket: %d", code)
	}
}

// An export imported into an empty store exports identically (JSON and YAML, with and without
// secrets), through the binary's import and the API's; diff then finds nothing.
func TestConfigExportImportRoundTrip(t *testing.T) {
	ra := testutil.StartRedis(t)
	cpa := harness.StartControlPlane(t, ra.URL(), cpEnv(map[string]string{"TOLLGATE_SEED_DEMO": "true"}))
	a := loginAdmin(t, cpa)
	fullConfig(t, a)
	withSecrets := export(t, a, "?secrets=true")
	plain := export(t, a, "")
	yml := export(t, a, "?format=yaml")
	for _, want := range []string{`"rt-rule"`, `"rt-backend"`, `"max_connections": 7`, `"max_connections": 70`, `"demo-p3"`,
		`"AKIAROUNDTRIP0001"`, `"rt-photos"`} {
		if !bytes.Contains(plain, []byte(want)) {
			t.Fatalf("the export lacks %s:\n%s", want, plain)
		}
	}
	if bytes.Contains(plain, []byte("password_hash")) || bytes.Contains(plain, []byte("jwt_secret")) {
		t.Fatalf("an export without secrets=true holds secrets:\n%s", plain)
	}
	if !bytes.Contains(withSecrets, []byte("password_hash")) || !bytes.Contains(withSecrets, []byte("jwt_secret")) {
		t.Fatalf("the export with secrets=true lacks them")
	}

	// into an empty store through the binary (YAML) ...
	rb := testutil.StartRedis(t)
	cpb := harness.StartControlPlane(t, rb.URL(), cpEnv(nil))
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, yml, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := cpb.Command("diff", file); code != 3 || !strings.Contains(out, "apps[rt-app].burst_quota") {
		t.Fatalf("diff before import: exit %d\n%s\n%s", code, out, stderr)
	}
	if out, stderr, code := cpb.Command("import", "-apply", file); code != 0 {
		t.Fatalf("import: exit %d\n%s\n%s", code, out, stderr)
	}
	b := loginAdmin(t, cpb)
	if got := export(t, b, "?format=yaml"); !bytes.Equal(got, yml) {
		t.Fatalf("YAML export after import differs:\n%s\nwant:\n%s", got, yml)
	}
	if got := export(t, b, ""); !bytes.Equal(got, plain) {
		t.Fatalf("JSON export after import differs:\n%s\nwant:\n%s", got, plain)
	}
	if out, stderr, code := cpb.Command("diff", file); code != 0 || !strings.Contains(out, `"diff": []`) {
		t.Fatalf("diff after import: exit %d\n%s\n%s", code, out, stderr)
	}

	// ... and with secrets through the API (users and the signing secret too)
	rc := testutil.StartRedis(t)
	cpc := harness.StartControlPlane(t, rc.URL(), cpEnv(nil))
	c := loginAdmin(t, cpc)
	code, _, res := c.raw("POST", "/api/v1/config/import", "application/json", withSecrets)
	if code != 200 || !bytes.Contains(res, []byte(`"dry_run":true`)) {
		t.Fatalf("import dry run: %d %s", code, res)
	}
	if got := export(t, c, ""); bytes.Contains(got, []byte("rt-app")) {
		t.Fatal("the dry run wrote")
	}
	if code, _, res := c.raw("POST", "/api/v1/config/import?apply=true", "application/json", withSecrets); code != 200 ||
		!bytes.Contains(res, []byte(`"applied":true`)) {
		t.Fatalf("import: %d %s", code, res)
	}
	if got := export(t, c, "?secrets=true"); !bytes.Equal(got, withSecrets) {
		t.Fatalf("export with secrets after import differs:\n%s\nwant:\n%s", got, withSecrets)
	}
	var audit struct {
		Data []struct {
			Action  string `json:"action"`
			Outcome string `json:"outcome"`
		} `json:"data"`
	}
	c.do("GET", "/api/v1/audit?action=config.*", nil, &audit)
	seen := map[string]bool{}
	for _, e := range audit.Data {
		seen[e.Action+" "+e.Outcome] = true
	}
	if !seen["config.import ok"] || !seen["config.import.dry_run ok"] || !seen["config.export_secrets ok"] {
		t.Fatalf("audit of the import: %+v", audit.Data)
	}
}

// A bad document changes nothing: the answer is a 4xx with a machine-readable code (the
// violations listed), the export and the config version stay what they were.
func TestBadConfigImportChangesNothing(t *testing.T) {
	r := testutil.StartRedis(t)
	cp := harness.StartControlPlane(t, r.URL(), cpEnv(map[string]string{"TOLLGATE_SEED_DEMO": "true"}))
	api := loginAdmin(t, cp)
	fullConfig(t, api)
	before := export(t, api, "?secrets=true")
	ctx := context.Background()
	version := func() string { v, _ := r.Client().Get(ctx, "ratelimit:config:version").Result(); return v }
	v0 := version()
	var doc map[string]any
	if err := json.Unmarshal(before, &doc); err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(d map[string]any)) []byte {
		var d map[string]any
		_ = json.Unmarshal(before, &d)
		f(d)
		b, _ := json.Marshal(d)
		return b
	}
	apps := func(d map[string]any) []any { return d["apps"].([]any) }
	cases := []struct {
		name, code string
		body       []byte
	}{
		{"not a document", "invalid_document", []byte("{{{ nope")},
		{"yaml garbage", "invalid_document", []byte("kind: [unclosed")},
		{"wrong kind", "invalid_document", mutate(func(d map[string]any) { d["kind"] = "other/v9" })},
		{"unknown field", "invalid_document", mutate(func(d map[string]any) { d["surprise"] = 1 })},
		{"over allocation", "config_validation_failed", mutate(func(d map[string]any) {
			// a new app first in the list (written first), then the one that breaks the cluster
			d["apps"] = append([]any{map[string]any{"app_id": "aaa-new", "cluster_id": "default",
				"guaranteed_quota": 10, "burst_quota": 10, "priority": 1, "c_bw": 1, "max_borrow": 0, "enabled": true}},
				apps(d)...)
			apps(d)[1].(map[string]any)["guaranteed_quota"] = 90000
			apps(d)[1].(map[string]any)["burst_quota"] = 90000
		})},
		{"rule of an unknown app", "config_validation_failed", mutate(func(d map[string]any) {
			d["rules"].([]any)[0].(map[string]any)["match"] = map[string]any{"app_ids": []string{"ghost"}}
		})},
		{"app moves cluster", "config_validation_failed", mutate(func(d map[string]any) {
			d["clusters"] = append(d["clusters"].([]any), map[string]any{"id": "other", "capacity": 1000, "reserved_ratio": 0})
			apps(d)[0].(map[string]any)["cluster_id"] = "other"
		})},
		{"no admin left", "config_validation_failed", mutate(func(d map[string]any) {
			d["users"].([]any)[0].(map[string]any)["role"] = "viewer"
		})},
	}
	for _, c := range cases {
		code, _, res := api.raw("POST", "/api/v1/config/import?apply=true", "application/json", c.body)
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(res, &e)
		if code/100 != 4 || e.Error.Code != c.code {
			t.Errorf("%s: %d %s, want a 4xx %s", c.name, code, res, c.code)
		}
		if got := export(t, api, "?secrets=true"); !bytes.Equal(got, before) {
			t.Fatalf("%s changed the config:\n%s", c.name, got)
		}
		if v := version(); v != v0 {
			t.Fatalf("%s moved the config version %s -> %s", c.name, v0, v)
		}
	}
}

// Another store answering (its epoch changed) is lost while the users are still there: config
// writes are refused with 409 config_store_lost, and the admin restores through the API (dry run
// with the diff first), after which writes go through again.
func TestConfigRestoreThroughTheAPI(t *testing.T) {
	r := testutil.StartRedis(t)
	cp := harness.StartControlPlane(t, r.URL(), cpEnv(map[string]string{"TOLLGATE_SEED_DEMO": "true"}))
	api := loginAdmin(t, cp)
	feed := subscribeAlerts(t, api)
	api.change("POST", "/api/v1/apps", map[string]any{"app_id": "keep-me", "cluster_id": "default",
		"guaranteed_quota": 100, "burst_quota": 100, "priority": 2})
	ctx := context.Background()
	rdb := r.Client()
	epoch, _ := rdb.Get(ctx, "ratelimit:config:epoch").Result()
	harness.Eventually(t, 10*time.Second, "a snapshot of the current version", func() bool {
		v, _ := rdb.Get(ctx, "ratelimit:config:version").Result()
		m, _ := filepath.Glob(filepath.Join(cp.BackupDir, "config-*-v"+v+".json"))
		return len(m) > 0
	})
	// another store: a new epoch, and keep-me gone
	if err := rdb.Set(ctx, "ratelimit:config:epoch", "0123456789abcdef0123456789abcdef", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HDel(ctx, "ratelimit:apps", "keep-me").Err(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, "the control plane reports epoch_changed", func() bool {
		st, reason := cpHealth(cp)
		return st == "config_store_lost" && strings.HasPrefix(reason, "epoch_changed")
	})
	harness.Eventually(t, 5*time.Second, "the alert pushed over the WebSocket and listed by the API", func() bool {
		a, pushed := feed.pushed("config_store_lost-config", true)
		listed := activeAlerts(api)["config_store_lost-config"]
		return pushed && a.Severity == "critical" && a.Kind == "config_store_lost" && listed.Active
	})
	body, _ := json.Marshal(map[string]any{"app_id": "new-one", "cluster_id": "default",
		"guaranteed_quota": 10, "burst_quota": 10, "priority": 2})
	if code, _, b := api.raw("POST", "/api/v1/apps", "application/json", body); code != 409 ||
		!bytes.Contains(b, []byte(`"config_store_lost"`)) {
		t.Fatalf("a write into the lost store: %d %s, want 409 config_store_lost", code, b)
	}
	if n, _ := rdb.Exists(ctx, "ratelimit:{default}:l2:new-one").Result(); n != 0 {
		t.Fatal("the refused write left the app's L2 bucket in the lost store")
	}
	key, _ := json.Marshal(map[string]any{"access_key_id": "AKIALOSTSTORE0001"})
	if code, _, b := api.raw("POST", "/api/v1/apps/demo-p1/access-keys", "application/json", key); code != 409 {
		t.Fatalf("an access key into the lost store: %d %s, want 409", code, b)
	}
	if n, _ := rdb.HLen(ctx, "ratelimit:access_keys").Result(); n != 0 {
		t.Fatal("the refused access key is in the lost store")
	}
	code, _, b := api.raw("POST", "/api/v1/config/restore", "", nil)
	if code != 200 || !bytes.Contains(b, []byte(`"apps[keep-me].app_id"`)) || !bytes.Contains(b, []byte(`"dry_run":true`)) {
		t.Fatalf("restore dry run: %d %s", code, b)
	}
	if ok, _ := rdb.HExists(ctx, "ratelimit:apps", "keep-me").Result(); ok {
		t.Fatal("the dry run wrote")
	}
	if code, _, b := api.raw("POST", "/api/v1/config/restore?apply=true", "", nil); code != 200 {
		t.Fatalf("restore: %d %s", code, b)
	}
	if got, _ := rdb.Get(ctx, "ratelimit:config:epoch").Result(); got != epoch {
		t.Fatalf("epoch after the restore %q, want the one the control plane knew %q", got, epoch)
	}
	if ok, _ := rdb.HExists(ctx, "ratelimit:apps", "keep-me").Result(); !ok {
		t.Fatal("keep-me not restored")
	}
	if st, _ := cpHealth(cp); st != "ok" {
		t.Fatalf("/health %s after the restore", st)
	}
	harness.Eventually(t, 5*time.Second, "the alert resolved over the WebSocket", func() bool {
		_, resolved := feed.pushed("config_store_lost-config", false)
		return resolved
	})
	api.change("POST", "/api/v1/apps", map[string]any{"app_id": "new-one", "cluster_id": "default",
		"guaranteed_quota": 10, "burst_quota": 10, "priority": 2})
	var audit struct {
		Data []struct {
			Action string `json:"action"`
		} `json:"data"`
	}
	api.do("GET", "/api/v1/audit?action=config.restore*", nil, &audit)
	if len(audit.Data) != 2 || audit.Data[0].Action != "config.restore" || audit.Data[1].Action != "config.restore.dry_run" {
		t.Fatalf("audit: %+v", audit.Data)
	}
}

// A control plane that starts on a wiped store knows the epoch from its newest snapshot: the
// store is lost from the start, nothing is seeded (even with TOLLGATE_SEED_DEMO=true), no first
// admin is created, and the restore from the command line brings everything back.
func TestControlPlaneStartingOnAWipedStoreSeedsNothing(t *testing.T) {
	r := testutil.StartRedis(t)
	backups := t.TempDir()
	env := cpEnv(map[string]string{"TOLLGATE_SEED_DEMO": "true", "TOLLGATE_CONFIG_BACKUP_DIR": backups})
	cp := harness.StartControlPlane(t, r.URL(), env)
	api := loginAdmin(t, cp)
	api.change("POST", "/api/v1/apps", map[string]any{"app_id": "mine", "cluster_id": "default",
		"guaranteed_quota": 100, "burst_quota": 100, "priority": 2})
	ctx := context.Background()
	rdb := r.Client()
	harness.Eventually(t, 10*time.Second, "a snapshot of the current version", func() bool {
		v, _ := rdb.Get(ctx, "ratelimit:config:version").Result()
		m, _ := filepath.Glob(filepath.Join(backups, "config-*-v"+v+".json"))
		return len(m) > 0
	})
	cp.Stop()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cp2 := harness.StartControlPlane(t, r.URL(), env)
	if st, reason := cpHealth(cp2); st != "config_store_lost" || !strings.HasPrefix(reason, "epoch_missing") {
		t.Fatalf("/health %s %s, want config_store_lost epoch_missing", st, reason)
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
		var keys []string
		for it := rdb.Scan(ctx, 0, "*", 1000).Iterator(); it.Next(ctx); {
			keys = append(keys, it.Val())
		}
		for _, k := range keys {
			if strings.HasPrefix(k, "ratelimit:apps") || strings.HasPrefix(k, "ratelimit:clusters") ||
				strings.HasPrefix(k, "ratelimit:admin:users") || strings.HasPrefix(k, "ratelimit:config:") {
				t.Fatalf("the control plane wrote %s into the wiped store (all keys: %v)", k, keys)
			}
		}
	}
	if out, stderr, code := cp2.Command("restore", "-apply"); code != 0 {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, stderr)
	}
	harness.Eventually(t, 5*time.Second, "/health ok after the restore", func() bool {
		st, _ := cpHealth(cp2)
		return st == "ok"
	})
	api2 := loginAdmin(t, cp2)
	var app struct {
		Data struct {
			AppID string `json:"app_id"`
		} `json:"data"`
	}
	if code := api2.do("GET", "/api/v1/apps/mine", nil, &app); code != 200 || app.Data.AppID != "mine" {
		t.Fatalf("GET mine after the restore: %d %+v", code, app)
	}
}

// An import that fails half-way (Redis refuses the breaker write: the control plane's ACL user
// may only read ratelimit:breakers) is rolled back: the app it had already created is gone
// again, the export is what it was before, the answer is an error, the attempt audited.
func TestFailedImportIsRolledBack(t *testing.T) {
	r := testutil.StartRedisArgs(t, "--user", "cp", "on", ">cp-test-password",
		"~ratelimit:[^b]*", "~ratelimit:b[^r]*", "~connlimit:*", "%R~ratelimit:breakers", "&*", "+@all")
	url := "redis://cp:cp-test-password@" + r.Addr() + "/0"
	cp := harness.StartControlPlane(t, url, cpEnv(map[string]string{"TOLLGATE_SEED_DEMO": "true"}))
	api := loginAdmin(t, cp)
	before := export(t, api, "?secrets=true")
	var d map[string]any
	if err := json.Unmarshal(before, &d); err != nil {
		t.Fatal(err)
	}
	d["apps"] = append(d["apps"].([]any), map[string]any{"app_id": "half-way", "cluster_id": "default",
		"guaranteed_quota": 10, "burst_quota": 10, "priority": 1, "c_bw": 1, "max_borrow": 0, "enabled": true,
		"access_keys": []string{"AKIAHALFWAY000001"}})
	d["breakers"] = []any{map[string]any{"name": "refused", "enabled": true, "per_app": false, "window_ms": 10000,
		"min_requests": 10, "failure_threshold": 5, "failure_ratio": 0.5, "open_timeout_ms": 30000,
		"success_threshold": 3, "half_open_max_inflight": 1, "failure_statuses": []int{500, 502, 503, 504}}}
	doc, _ := json.Marshal(d)
	code, _, res := api.raw("POST", "/api/v1/config/import?apply=true", "application/json", doc)
	if code != 503 || !bytes.Contains(res, []byte(`"apply_failed"`)) || !bytes.Contains(res, []byte(`"rolled_back":true`)) {
		t.Fatalf("import = %d %s, want 503 apply_failed, rolled back", code, res)
	}
	t.Logf("import answered %d %s", code, res)
	if got := export(t, api, "?secrets=true"); !bytes.Equal(got, before) {
		t.Fatalf("the failed import left changes:\n%s\nwant:\n%s", got, before)
	}
	var audit struct {
		Data []struct {
			Action  string `json:"action"`
			Outcome string `json:"outcome"`
		} `json:"data"`
	}
	api.do("GET", "/api/v1/audit?action=config.import", nil, &audit)
	if len(audit.Data) == 0 || audit.Data[0].Outcome != "failed" {
		t.Fatalf("audit: %+v", audit.Data)
	}
}
