// Integration suites of the gateway: real redis-server, real nginx (2 workers) with tollgate's
// Lua, seeded through the control plane's own store package.
package t

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/scripts"
	"tollgate/internal/seed"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

type stack struct {
	t       *testing.T
	redis   *testutil.Redis
	gwURL   string // the gateways' TOLLGATE_REDIS_URL: the restricted user of gatewayRedis
	rdb     *redis.Client
	store   *store.Store
	scripts *scripts.Set
	gws     []*harness.Gateway
}

type stackOptions struct {
	nodes   int               // gateway nodes (default 1)
	workers int               // nginx workers per node (default 2)
	env     map[string]string // TOLLGATE_* settings of every node
	apps    []store.App       // extra apps in cluster "default"
	// configDict is the size of config_dict (default: nginx/tollgate_http.conf's)
	configDict string
}

// The password of the gateways' Redis user in the suites (a test Redis on loopback).
const gatewayRedisPassword = "gateway-test-password"

// gatewayRedis starts the suites' Redis with the gateways' ACL user of deploy/redis/gateway.acl
// (what `make run` creates) and returns it with the URL the gateways connect with. When the test
// ends, Redis' ACL LOG must be empty: every suite proves the gateway needs nothing more.
func gatewayRedis(t *testing.T) (*testutil.Redis, string) {
	t.Helper()
	acl, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "deploy", "redis", "gateway.acl"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--user", "tollgate-gateway", "on", ">" + gatewayRedisPassword},
		strings.Fields(string(acl))...)
	r := testutil.StartRedisArgs(t, args...)
	t.Cleanup(func() {
		c := r.Client()
		log, err := c.Do(context.Background(), "ACL", "LOG").Slice()
		if err == nil && len(log) > 0 {
			t.Errorf("Redis refused the gateways' user (deploy/redis/gateway.acl) %d times; the latest: %v",
				len(log), log[0])
		}
	})
	return r, "redis://tollgate-gateway:" + gatewayRedisPassword + "@" + r.Addr() + "/0"
}

// seededStack is a stack without gateways: the gateway's Redis with the demo config seeded and
// `apps` put (in the "default" cluster unless they name one).
func seededStack(t *testing.T, apps ...store.App) *stack {
	t.Helper()
	r, gwURL := gatewayRedis(t)
	rdb := r.Client()
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(rdb, set)
	ctx := context.Background()
	if _, err := seed.Demo(ctx, st); err != nil {
		t.Fatalf("seed: %v", err)
	}
	for _, a := range apps {
		if a.ClusterID == "" {
			a.ClusterID = "default"
		}
		if _, err := st.PutApp(ctx, a); err != nil {
			t.Fatalf("put app %s: %v", a.AppID, err)
		}
	}
	return &stack{t: t, redis: r, gwURL: gwURL, rdb: rdb, store: st, scripts: set}
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	s := seededStack(t, o.apps...)
	gwURL := s.gwURL
	if o.nodes == 0 {
		o.nodes = 1
	}
	for i := 0; i < o.nodes; i++ {
		s.gws = append(s.gws, harness.StartGateway(t, harness.GatewayOptions{
			RedisURL: gwURL, NodeID: "node-" + strconv.Itoa(i+1), Env: o.env, Workers: o.workers,
			ConfigDict: o.configDict,
		}))
	}
	return s
}

func (s *stack) gw() *harness.Gateway { return s.gws[0] }

// app builds a test app with the given quotas.
func app(id string, guaranteed, burst int64) store.App {
	return store.App{AppID: id, ClusterID: "default", GuaranteedQuota: guaranteed,
		BurstQuota: burst, Priority: 1, CBw: 1, MaxBorrow: 0, Enabled: true}
}

// l2 reads an app's L2 hash as numbers.
func (s *stack) l2(id string) map[string]float64 {
	s.t.Helper()
	m, err := s.rdb.HGetAll(context.Background(), "ratelimit:{default}:l2:"+id).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return floats(m)
}

func (s *stack) l1(cluster string) map[string]float64 {
	s.t.Helper()
	m, err := s.rdb.HGetAll(context.Background(), "ratelimit:{"+cluster+"}:l1").Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return floats(m)
}

func (s *stack) stats(id string) map[string]float64 {
	s.t.Helper()
	m, err := s.rdb.HGetAll(context.Background(), "ratelimit:{default}:stats:"+id).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return floats(m)
}

func (s *stack) leases(id string) map[string]float64 {
	s.t.Helper()
	m, err := s.rdb.HGetAll(context.Background(), "ratelimit:{default}:leases:"+id).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return floats(m)
}

func floats(m map[string]string) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[k] = f
		}
	}
	return out
}

// scriptCalls is the number of script executions Redis has served (EVAL + EVALSHA).
func (s *stack) scriptCalls() int64 {
	s.t.Helper()
	c := testutil.CommandCalls(s.t, s.rdb)
	return c["evalsha"] + c["eval"]
}

func appsOf(a ...store.App) []store.App { return a }

// readerOrNil keeps a nil *strings.Reader from becoming a non-nil io.Reader.
func readerOrNil(r *strings.Reader) io.Reader {
	if r == nil {
		return nil
	}
	return r
}

func jsonDecode(resp *http.Response, v any) error {
	return json.NewDecoder(resp.Body).Decode(v)
}

// eventually polls cond for up to 10 s; explain (optional) logs the state when it fails.
func eventually(t *testing.T, what string, cond func() bool, explain ...func()) {
	t.Helper()
	ok := false
	defer func() {
		if !ok {
			for _, f := range explain {
				f()
			}
		}
	}()
	harness.Eventually(t, 10*time.Second, what, cond)
	ok = true
}
