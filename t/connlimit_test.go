package t

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tollgate/internal/keys"
	"tollgate/internal/scripts"
	"tollgate/internal/seed"
	"tollgate/internal/store"
	"tollgate/t/harness"
)

// connStack is newStack with one gateway of `workers` nginx workers. Its tests fill an app's
// slots from one address: TOLLGATE_CONN_CLIENT_SHARE is 1 (no per-address share) unless env
// sets it.
func connStack(t *testing.T, workers int, env map[string]string) *stack {
	t.Helper()
	env = maps.Clone(env)
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["TOLLGATE_CONN_CLIENT_SHARE"]; !ok {
		env["TOLLGATE_CONN_CLIENT_SHARE"] = "1"
	}
	r, gwURL := gatewayRedis(t)
	rdb := r.Client()
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(rdb, set)
	if _, err := seed.Demo(context.Background(), st); err != nil {
		t.Fatalf("seed: %v", err)
	}
	s := &stack{t: t, redis: r, gwURL: gwURL, rdb: rdb, store: st, scripts: set}
	s.gws = append(s.gws, harness.StartGateway(t, harness.GatewayOptions{
		RedisURL: gwURL, NodeID: "node-1", Workers: workers, Env: env,
	}))
	return s
}

// connState is the limiter's view of one app and its cluster on a node (/_t/conn_state).
type connState struct {
	AppCurrent      int64 `json:"app_current"`
	AppPeak         int64 `json:"app_peak"`
	AppRejected     int64 `json:"app_rejected"`
	AppLeaked       int64 `json:"app_leaked"`
	ClusterCurrent  int64 `json:"cluster_current"`
	ClusterPeak     int64 `json:"cluster_peak"`
	ClusterRejected int64 `json:"cluster_rejected"`
	Max             int64 `json:"max"`
	Burst           int64 `json:"burst"`
	ClusterMax      int64 `json:"cluster_max"`
	Headroom        int64 `json:"headroom"`
}

func connStateOf(g *harness.Gateway, app string) connState {
	var st connState
	g.T("conn_state?app="+app, &st)
	return st
}

// setConnConfig writes a connection-limit hash the way the control plane does and announces it.
func (s *stack) setConnConfig(key string, fields ...any) {
	s.t.Helper()
	// the control plane's way: the write, then a version bump (change log, announcement)
	_, err := s.store.Bump(context.Background(), func(ctx context.Context) error {
		if len(fields) == 0 {
			return s.rdb.Del(ctx, key).Err()
		}
		return s.rdb.HSet(ctx, key, fields...).Err()
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// appLimits sets max/burst of an app in cluster "default" and waits until the node has them.
func (s *stack) appLimits(app string, max, burst int64) {
	s.t.Helper()
	s.setConnConfig(keys.ConnConfig("default", app), "max_connections", max, "burst_connections", burst)
	eventually(s.t, "connection limits of "+app, func() bool {
		st := connStateOf(s.gw(), app)
		return st.Max == max && st.Burst == burst
	})
}

func (s *stack) clusterLimits(max int64, ratio float64) {
	s.t.Helper()
	s.setConnConfig(keys.ConnCluster("default"), "max_connections", max, "reserved_ratio", ratio)
	eventually(s.t, "cluster connection limit", func() bool {
		return connStateOf(s.gw(), "demo-p1").ClusterMax == max
	})
}

// holder sends requests through the gateway to the test backend's /_t/conn_hold, which keeps
// each request until unhold(name).
type holder struct {
	t      *testing.T
	g      *harness.Gateway
	client *http.Client
	wg     sync.WaitGroup
	xff    string // X-Forwarded-For of its requests (none when empty)
}

type holdResult struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func newHolder(t *testing.T, g *harness.Gateway) *holder {
	return &holder{t: t, g: g, client: &http.Client{Timeout: 60 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

func (h *holder) do(app, name string) holdResult {
	req, _ := http.NewRequest("GET", h.g.URL+"/_t/conn_hold?name="+name, nil)
	req.Header.Set("X-App-Id", app)
	if h.xff != "" {
		req.Header.Set("X-Forwarded-For", h.xff)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return holdResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return holdResult{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// start sends n held requests in the background; their results arrive on the channel, which
// is closed after the last one.
func (h *holder) start(app, name string, n int) <-chan holdResult {
	out := make(chan holdResult, n)
	var these sync.WaitGroup
	for i := 0; i < n; i++ {
		h.wg.Add(1)
		these.Add(1)
		go func() {
			defer h.wg.Done()
			defer these.Done()
			out <- h.do(app, name)
		}()
	}
	go func() { these.Wait(); close(out) }()
	return out
}

func (h *holder) unhold(name string) { h.g.T("conn_unhold?name="+name, nil) }

type heldStat struct {
	Now int64 `json:"now"`
	Max int64 `json:"max"`
}

func (h *holder) held(name string) heldStat {
	var st heldStat
	h.g.T("conn_held?name="+name, &st)
	return st
}

func headerInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(h.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q, want a number", name, h.Get(name))
	}
	return v
}

// checkRejection asserts a connection-limit 429: reason, body shape and headers.
func checkRejection(t *testing.T, r holdResult, reason string, limit, current int64) {
	t.Helper()
	if r.err != nil || r.status != 429 {
		t.Fatalf("want 429 %s, got %d %v %s", reason, r.status, r.err, r.body)
	}
	var body rejection
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("429 body is not JSON: %q", r.body)
	}
	if body.Error != "rate_limit_exceeded" || body.Reason != reason || body.RetryAfter == nil ||
		*body.RetryAfter != 1 || body.Remaining == nil || *body.Remaining != 0 || body.Cost == nil {
		t.Fatalf("429 body %s, want rate_limit_exceeded/%s with retry_after 1, remaining 0, cost", r.body, reason)
	}
	if r.header.Get("Retry-After") != "1" || headerInt(t, r.header, "X-Connection-Limit") != limit ||
		headerInt(t, r.header, "X-Connection-Current") != current ||
		headerInt(t, r.header, "X-Connection-Remaining") != 0 {
		t.Fatalf("429 %s headers %v, want Retry-After 1, limit %d, current %d, remaining 0",
			reason, r.header, limit, current)
	}
}

// TOLLGATE_CONN_CLIENT_SHARE (0.5 by default): of an app's 4 slots one client address holds 2;
// its third request is refused client_limit_exceeded while another address takes the other 2.
// The address is X-Forwarded-For's only from TOLLGATE_TRUSTED_PROXIES: without them a client
// that names another address in the header is still counted by its own.
func TestConnClientShareOfTheTrustedClientAddress(t *testing.T) {
	for _, trusted := range []bool{true, false} {
		env := map[string]string{"TOLLGATE_CONN_CLIENT_SHARE": "0.5"}
		if trusted {
			env["TOLLGATE_TRUSTED_PROXIES"] = "127.0.0.0/8, ::1/128"
		}
		s := connStack(t, 2, env)
		g := s.gw()
		s.appLimits("demo-p2", 4, 4)
		a, b := newHolder(t, g), newHolder(t, g)
		a.xff, b.xff = "10.0.0.1", "10.0.0.2"
		resA := a.start("demo-p2", "a", 2)
		eventually(t, "2 requests of 10.0.0.1 held", func() bool { return a.held("a").Now == 2 })
		checkRejection(t, a.do("demo-p2", "none"), "client_limit_exceeded", 2, 2)
		if trusted {
			resB := b.start("demo-p2", "b", 2)
			eventually(t, "2 requests of 10.0.0.2 held", func() bool {
				select {
				case r := <-resB:
					t.Fatalf("a request of 10.0.0.2 answered: %d %v %s", r.status, r.err, r.body)
				default:
				}
				return b.held("b").Now == 2
			})
			b.unhold("b")
			for r := range resB {
				if r.err != nil || r.status != 200 {
					t.Fatalf("held request of 10.0.0.2: %d %v %s", r.status, r.err, r.body)
				}
			}
		} else {
			checkRejection(t, b.do("demo-p2", "none"), "client_limit_exceeded", 2, 2)
		}
		a.unhold("a")
		for r := range resA {
			if r.err != nil || r.status != 200 {
				t.Fatalf("held request of 10.0.0.1: %d %v %s", r.status, r.err, r.body)
			}
		}
		eventually(t, "demo-p2's slots free", func() bool { return connStateOf(g, "demo-p2").AppCurrent == 0 })
	}
}

// Limit 5, 40 concurrent requests held by the backend over 4 workers: exactly 5 admitted, never
// more than 5 at the backend, 35 refused with app_limit_exceeded; the counters, the peak and the
// rejected count are exact, and everything is back to 0 once the requests end. With the full set
// of response headers (TOLLGATE_RESPONSE_HEADERS=full) every admitted answer carries its count.
func TestConnLimitExactAcrossWorkers(t *testing.T) {
	s := connStack(t, 4, map[string]string{"TOLLGATE_RESPONSE_HEADERS": "full"})
	g := s.gw()
	s.appLimits("demo-p1", 5, 5)
	h := newHolder(t, g)
	results := h.start("demo-p1", "x", 40)
	var rejected []holdResult
	for len(rejected) < 35 {
		select {
		case r := <-results:
			rejected = append(rejected, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d answers before the held ones were let go, want 35 rejections", len(rejected))
		}
	}
	for _, r := range rejected {
		checkRejection(t, r, "app_limit_exceeded", 5, 5)
	}
	eventually(t, "5 requests held by the backend", func() bool { return h.held("x").Now == 5 })
	st := connStateOf(g, "demo-p1")
	if st.AppCurrent != 5 || st.ClusterCurrent != 5 || st.AppPeak != 5 || st.AppRejected != 35 {
		t.Fatalf("while held: %+v, want current 5, peak 5, rejected 35", st)
	}
	var spread []string
	var ws []map[string]any
	g.T("conn_workers", &ws)
	for _, w := range ws {
		if w["records"].(float64) > 0 {
			spread = append(spread, fmt.Sprintf("pid %v: %v", w["pid"], w["records"]))
		}
	}
	t.Logf("admitted slots by worker: %v", spread)
	h.unhold("x")
	for i := 0; i < 5; i++ {
		r := <-results
		if r.err != nil || r.status != 200 || headerInt(t, r.header, "X-Connection-Limit") != 5 {
			t.Fatalf("held request: %d %v %v", r.status, r.err, r.header)
		}
		if c := headerInt(t, r.header, "X-Connection-Current"); c < 1 || c > 5 ||
			headerInt(t, r.header, "X-Connection-Remaining") != 5-c {
			t.Fatalf("admitted headers %v", r.header)
		}
	}
	if m := h.held("x").Max; m != 5 {
		t.Fatalf("the backend saw at most %d requests at once, want exactly 5", m)
	}
	eventually(t, "counters back to 0", func() bool {
		st := connStateOf(g, "demo-p1")
		return st.AppCurrent == 0 && st.ClusterCurrent == 0
	})
	if st := connStateOf(g, "demo-p1"); st.AppPeak != 5 || st.AppRejected != 35 {
		t.Fatalf("after: %+v, want peak 5 and rejected 35", st)
	}
}

// Burst beyond max_connections only while the cluster has headroom; the cluster limit refuses
// with cluster_limit_exceeded and the cluster's numbers in the headers.
func TestConnLimitBurstAndClusterLimit(t *testing.T) {
	s := connStack(t, 2, nil)
	g := s.gw()
	s.clusterLimits(10, 0.2) // burst only while the cluster stays within 8
	s.appLimits("demo-p1", 2, 4)
	s.appLimits("demo-p2", 10, 10)
	h := newHolder(t, g)
	wait := func(what string, app, cluster int64) {
		t.Helper()
		eventually(t, what, func() bool {
			st := connStateOf(g, "demo-p1")
			return st.AppCurrent == app && st.ClusterCurrent == cluster
		})
	}
	h.start("demo-p1", "p1a", 2)
	wait("p1 within max", 2, 2)
	h.start("demo-p2", "p2a", 6)
	wait("p2 fills the cluster to 8", 2, 8)
	// p1 would be at 3 > max 2 and the cluster at 9 > 8: no headroom for burst
	checkRejection(t, h.do("demo-p1", "none"), "app_limit_exceeded", 2, 2)
	h.unhold("p2a")
	wait("p2 gone", 2, 2)
	h.start("demo-p1", "p1b", 2)
	wait("p1 bursts to 4 while the cluster has headroom", 4, 4)
	checkRejection(t, h.do("demo-p1", "none"), "app_limit_exceeded", 2, 4)
	h.start("demo-p2", "p2b", 6)
	wait("p2 (within its own max) takes the cluster to 10", 4, 10)
	checkRejection(t, h.do("demo-p2", "none"), "cluster_limit_exceeded", 10, 10)
	st := connStateOf(g, "demo-p1")
	if st.AppPeak != 4 || st.ClusterPeak != 10 || st.AppRejected != 2 || st.ClusterRejected != 3 {
		t.Fatalf("%+v: want app peak 4, cluster peak 10, app rejected 2, cluster rejected 3", st)
	}
	for _, n := range []string{"p1a", "p1b", "p2b"} {
		h.unhold(n)
	}
	h.wg.Wait()
	wait("all released", 0, 0)
}

// A request refused by the token bucket after it took a connection slot gives the slot back:
// with max_connections 1, sequential requests never meet app_limit_exceeded.
func TestConnSlotReleasedWhenTokenBucketRefuses(t *testing.T) {
	s := newStack(t, stackOptions{apps: []store.App{app("tiny", 10, 20)},
		env: map[string]string{"TOLLGATE_RESPONSE_HEADERS": "full"}})
	g := s.gw()
	s.appLimits("tiny", 1, 1)
	exhausted := 0
	for i := 0; i < 40; i++ {
		r := g.Do("DELETE", "/bucket/k", "tiny", nil, nil)
		var body rejection
		if r.Status == 429 {
			r.JSON(t, &body)
			if body.Reason == "app_limit_exceeded" {
				t.Fatalf("request %d: refused app_limit_exceeded with nothing in flight: a slot leaked", i)
			}
			exhausted++
		} else if r.Status != 200 {
			t.Fatalf("request %d: status %d", i, r.Status)
		}
		if r.Header.Get("X-Connection-Limit") != "1" {
			t.Fatalf("request %d (%d): X-Connection-Limit %q, want 1", i, r.Status, r.Header.Get("X-Connection-Limit"))
		}
	}
	if exhausted == 0 {
		t.Fatalf("the token bucket never refused: the test proves nothing")
	}
	// the log phase of the last request may still be running when its response has arrived
	var st connState
	eventually(t, "no slot in flight after the token-bucket refusals", func() bool {
		st = connStateOf(g, "tiny")
		return st.AppCurrent == 0
	})
	if st.AppRejected != 0 {
		t.Fatalf("after %d token-bucket refusals: %+v, want nothing refused", exhausted, st)
	}
}

// Properties 15 and 17 under load: 32 clients, requests held 0-20 ms, some abandoned by the
// client mid-flight; the backend never holds more than the limit, the counters never go
// negative and return to exactly 0, and the peak is exactly the limit. (A counter read under
// load may exceed the limit by the refused requests that are undoing their increment.)
func TestConnCountersBackToZeroAfterLoad(t *testing.T) {
	s := connStack(t, 4, nil)
	g := s.gw()
	s.appLimits("demo-p1", 8, 8)
	stop := make(chan struct{})
	var admitted, refused, aborted atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				// every 7th request is abandoned by its client after 5 ms; the backend does not
				// notice and holds it on (under another name) after the gateway released it
				// (a generous timeout: a "load" request the client gave up on would be held by
				// the backend after its slot was released, which is the abandoned case below)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				name := "load"
				if (i+n)%7 == 0 {
					ctx, cancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
					name = "load-abandoned"
				}
				req, _ := http.NewRequestWithContext(ctx, "GET",
					g.URL+"/_t/conn_hold?name="+name+"&ms="+strconv.Itoa((i*7+n)%21), nil)
				req.Header.Set("X-App-Id", "demo-p1")
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case 200:
						admitted.Add(1)
					case 429:
						refused.Add(1)
					}
				} else {
					aborted.Add(1)
				}
				cancel()
			}
		}(i)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		st := connStateOf(g, "demo-p1")
		if st.AppCurrent < 0 || st.ClusterCurrent < 0 || st.AppPeak > 8 {
			close(stop)
			t.Fatalf("under load: %+v, want counters >= 0 and a peak <= 8", st)
		}
	}
	close(stop)
	wg.Wait()
	eventually(t, "counters back to exactly 0", func() bool {
		st := connStateOf(g, "demo-p1")
		return st.AppCurrent == 0 && st.ClusterCurrent == 0
	})
	st := connStateOf(g, "demo-p1")
	t.Logf("admitted %d, refused %d, abandoned by the client %d; %+v", admitted.Load(),
		refused.Load(), aborted.Load(), st)
	if admitted.Load() == 0 || refused.Load() == 0 || aborted.Load() == 0 {
		t.Fatalf("the load did not exercise admission, refusal and client aborts")
	}
	// releases run in the reverse order of acquire, so the app's own churn never shows the
	// cluster (here: only this app) fuller than the app
	if st.AppPeak != 8 || st.ClusterPeak != 8 || st.AppRejected < refused.Load() {
		t.Fatalf("%+v: want peaks exactly 8 and rejected >= the %d refusals clients saw", st, refused.Load())
	}
	if m := (&holder{g: g}).held("load").Max; m > 8 {
		t.Fatalf("the backend held %d requests at once, limit 8", m)
	}
}

// opStep is one step of /_t/conn_ops.
type opStep struct {
	Op       string         `json:"op"`
	OK       bool           `json:"ok"`
	Reason   string         `json:"reason"`
	Handle   int            `json:"handle"`
	Released bool           `json:"released"`
	Leaked   int64          `json:"leaked"`
	Record   map[string]any `json:"record"`
	State    connState      `json:"state"`
}

func connOps(g *harness.Gateway, app, cluster string, ops []string) []opStep {
	var steps []opStep
	g.T("conn_ops?app="+app+"&cluster="+cluster+"&ops="+strings.Join(ops, ","), &steps)
	return steps
}

// Properties 16 and 19 (and 15): for generated limits and acquire/release sequences, a request
// is refused exactly when its app or cluster is full (burst only with cluster headroom) with
// the right reason, the rejected counter counts every refusal and the peak is the highest count.
func TestProperty16And19LimitsRejectionsAndPeak(t *testing.T) {
	s := connStack(t, 2, nil)
	g := s.gw()
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		app, cluster := "p16-"+strconv.Itoa(n), "c16-"+strconv.Itoa(n)
		max := rapid.Int64Range(1, 6).Draw(rt, "max")
		burst := max + rapid.Int64Range(0, 3).Draw(rt, "extra")
		cmax := rapid.Int64Range(1, 12).Draw(rt, "cluster_max")
		ratio := rapid.SampledFrom([]float64{0, 0.25, 0.5}).Draw(rt, "ratio")
		headroom := int64(math.Floor(float64(cmax) * (1 - ratio)))
		g.T(fmt.Sprintf("conn_limits?app=%s&max=%d&burst=%d", app, max, burst), nil)
		g.T(fmt.Sprintf("conn_limits?cluster=%s&max=%d&ratio=%g", cluster, cmax, ratio), nil)
		var ops []string
		var held []int // handles of admitted requests (the model's in-flight set)
		var cur, peak, rejected int64
		var want []string
		handles := 0
		for i, steps := 0, rapid.IntRange(1, 30).Draw(rt, "steps"); i < steps; i++ {
			if len(held) > 0 && rapid.Bool().Draw(rt, "release") {
				k := rapid.IntRange(0, len(held)-1).Draw(rt, "which")
				ops = append(ops, "r"+strconv.Itoa(held[k]))
				held = append(held[:k], held[k+1:]...)
				cur--
				want = append(want, "released")
				continue
			}
			handles++
			ops = append(ops, "a")
			v := cur + 1
			switch {
			case v > burst, v > max && v > headroom:
				want = append(want, "app_limit_exceeded")
				rejected++
			case v > cmax:
				want = append(want, "cluster_limit_exceeded")
				rejected++
			default:
				want = append(want, "ok")
				held = append(held, handles)
				cur = v
				if cur > peak {
					peak = cur
				}
			}
		}
		steps := connOps(g, app, cluster, ops)
		cur, peak, rejected = 0, 0, 0
		for i, st := range steps {
			got := st.Reason
			if st.Op[0] == 'a' && st.OK {
				got = "ok"
			} else if st.Op[0] == 'r' && st.Released {
				got = "released"
			}
			switch want[i] {
			case "ok":
				cur++
				if cur > peak {
					peak = cur
				}
			case "released":
				cur--
			default:
				rejected++
			}
			c := st.State
			if got != want[i] || c.AppCurrent != cur || c.ClusterCurrent != cur || c.AppPeak != peak ||
				c.ClusterPeak != peak || c.AppRejected != rejected || c.ClusterRejected != rejected {
				rt.Fatalf("limits max %d burst %d cluster %d headroom %d; step %d %s: %q %+v, want %q "+
					"current %d peak %d rejected %d", max, burst, cmax, headroom, i, st.Op, got, c, want[i],
					cur, peak, rejected)
			}
		}
	})
}

// Properties 15, 17 and 20: acquire increases the counter by exactly one, each release (normal
// or forced) decreases it by exactly one, a second release of the same connection is a no-op —
// also when the owner was stalled and the cleanup force-released it first — and the counter
// never goes negative.
func TestProperty20ReleaseIsIdempotent(t *testing.T) {
	// a stall of 10 s keeps the fast path, 60 s makes the owner claim its release, 150 s
	// (over the timeout) lets the cleanup force-release first
	g := handCleanupGateway(t)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		app, cluster := "p20-"+strconv.Itoa(n), "c20-"+strconv.Itoa(n)
		type conn struct{ released, leaked, stale bool }
		var conns []*conn
		var ops []string
		var cur, leaked int64
		var wantCur, wantLeaked []int64
		var wantReleased []bool
		// what a cleanup run does in the model: every stale connection still held leaks
		cleanup := func() {
			for _, c := range conns {
				if c.stale && !c.released && !c.leaked {
					c.leaked = true
					cur--
					leaked++
				}
			}
		}
		for i, steps := 0, rapid.IntRange(1, 25).Draw(rt, "steps"); i < steps; i++ {
			kind := "a"
			if len(conns) > 0 {
				kind = rapid.SampledFrom([]string{"a", "r", "r", "h", "c"}).Draw(rt, "kind")
			}
			released := false
			switch kind {
			case "a":
				conns = append(conns, &conn{})
				ops = append(ops, "a")
				cur++
			case "r":
				k := rapid.IntRange(1, len(conns)).Draw(rt, "handle")
				c := conns[k-1]
				ops = append(ops, "r"+strconv.Itoa(k))
				if !c.released && !c.leaked {
					released = true
					cur--
				}
				c.released = true
			case "h":
				k := rapid.IntRange(1, len(conns)).Draw(rt, "handle")
				age := rapid.SampledFrom([]int{10, 60, 150}).Draw(rt, "stall")
				ops = append(ops, "h"+strconv.Itoa(k)+":"+strconv.Itoa(age))
				c := conns[k-1]
				if !c.released && !c.leaked {
					c.stale = age > 100
				}
			case "c":
				ops = append(ops, "c")
				cleanup()
			}
			wantCur = append(wantCur, cur)
			wantLeaked = append(wantLeaked, leaked)
			wantReleased = append(wantReleased, released)
		}
		ops = append(ops, "c") // and a final cleanup: nothing changes unless stale
		cleanup()
		wantCur = append(wantCur, cur)
		wantLeaked = append(wantLeaked, leaked)
		wantReleased = append(wantReleased, false)
		for k := range conns {
			ops = append(ops, "s"+strconv.Itoa(k+1))
		}
		steps := connOps(g, app, cluster, ops)
		for i := range wantCur {
			st := steps[i]
			if st.State.AppCurrent < 0 || st.State.ClusterCurrent < 0 {
				rt.Fatalf("step %d %s: negative counter %+v", i, st.Op, st.State)
			}
			if st.State.AppCurrent != wantCur[i] || st.State.ClusterCurrent != wantCur[i] ||
				st.State.AppLeaked != wantLeaked[i] || (st.Op[0] == 'r' && st.Released != wantReleased[i]) {
				rt.Fatalf("ops %v; step %d %s: released %v, %+v; want current %d, leaked %d, released %v",
					ops, i, st.Op, st.Released, st.State, wantCur[i], wantLeaked[i], wantReleased[i])
			}
		}
		for k, c := range conns {
			want := "active"
			if c.leaked {
				want = "leaked"
			} else if c.released {
				want = "released"
			}
			rec := steps[len(wantCur)+k].Record
			if rec["status"] != want {
				rt.Fatalf("ops %v: record of connection %d is %v, want status %s", ops, k+1, rec, want)
			}
		}
	})
}

// Property 18: a tracked connection whose last_seen is older than the timeout is force-released
// by the cleanup and counted as leaked; a fresher one is left alone. The record keeps the
// fields of Req 18.1.
func TestProperty18LeakedConnectionsAreForceReleased(t *testing.T) {
	g := handCleanupGateway(t)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		app, cluster := "p18-"+strconv.Itoa(n), "c18-"+strconv.Itoa(n)
		count := rapid.IntRange(1, 6).Draw(rt, "connections")
		ages := make([]int, count)
		ops := []string{}
		var stale int64
		for range ages {
			ops = append(ops, "a")
		}
		for i := range ages {
			ages[i] = rapid.OneOf(rapid.IntRange(0, 95), rapid.IntRange(105, 1000)).Draw(rt, "age")
			if ages[i] > 100 {
				stale++
			}
			ops = append(ops, "l"+strconv.Itoa(i+1)+":"+strconv.Itoa(ages[i]))
		}
		ops = append(ops, "c")
		for i := range ages {
			ops = append(ops, "s"+strconv.Itoa(i+1))
		}
		steps := connOps(g, app, cluster, ops)
		clean := steps[2*count]
		if clean.Leaked != stale || clean.State.AppCurrent != int64(count)-stale ||
			clean.State.ClusterCurrent != int64(count)-stale || clean.State.AppLeaked != stale {
			rt.Fatalf("ages %v: cleanup released %d, state %+v; want %d leaked, %d left",
				ages, clean.Leaked, clean.State, stale, int64(count)-stale)
		}
		for i, age := range ages {
			rec := steps[2*count+1+i].Record
			if age > 100 {
				if rec["status"] != "leaked" {
					rt.Fatalf("age %d: record %v, want leaked", age, rec)
				}
				continue
			}
			seen, _ := rec["last_seen"].(float64)
			if rec["status"] != "active" || rec["app"] != app || rec["cluster"] != cluster ||
				rec["client_ip"] != "127.0.0.1" || rec["created_at"] == nil ||
				math.Abs(float64(time.Now().Unix())-float64(age)-seen) > 5 {
				rt.Fatalf("age %d: record %v, want an active record of %s/%s", age, rec, app, cluster)
			}
		}
	})
}

// A request writes its tracking record (its creation time, its app and cluster as a tag); the
// first heartbeat it outlives adds its last_seen and client IP beside it. A worker that dies
// before that heartbeat leaves bare records: the cleanup force-releases those older than the
// timeout like any other, and they read back with every field but the client IP, which only
// the worker held.
func TestRecordsOfADeadWorkerAreForceReleased(t *testing.T) {
	g := handCleanupGateway(t)
	steps := connOps(g, "compact", "c-compact", []string{"a", "a", "a", "d1:150", "d2:50", "c", "s1", "s2", "s3"})
	for i, st := range steps[3:5] {
		if !st.OK {
			t.Fatalf("step %s: the record of handle %d was refreshed before its worker died", st.Op, i+1)
		}
	}
	clean := steps[5]
	if clean.Leaked != 1 || clean.State.AppCurrent != 2 || clean.State.ClusterCurrent != 2 ||
		clean.State.AppLeaked != 1 {
		t.Fatalf("cleanup released %d, state %+v; want the 150 s old record released, 2 left",
			clean.Leaked, clean.State)
	}
	if rec := steps[6].Record; rec["status"] != "leaked" {
		t.Fatalf("record of the 150 s old request: %v, want leaked", rec)
	}
	now := float64(time.Now().Unix())
	for _, c := range []struct {
		step int
		age  float64
		ip   string
	}{{7, 50, "-"}, {8, 0, "127.0.0.1"}} {
		rec := steps[c.step].Record
		created, _ := rec["created_at"].(float64)
		if rec["status"] != "active" || rec["app"] != "compact" || rec["cluster"] != "c-compact" ||
			rec["client_ip"] != c.ip || math.Abs(now-c.age-created) > 5 {
			t.Fatalf("step %s: record %v, want an active record of compact/c-compact created %v s ago from %s",
				steps[c.step].Op, rec, c.age, c.ip)
		}
	}
}

// handCleanupGateway is a 2-worker gateway whose connection timeout is 100 s and whose cleanup
// runs only when a test asks for it (its interval is an hour).
func handCleanupGateway(t *testing.T) *harness.Gateway {
	t.Helper()
	return connStack(t, 2, map[string]string{"TOLLGATE_CONN_TIMEOUT": "100",
		"TOLLGATE_CONN_CLEANUP_INTERVAL": "3600"}).gw()
}

// genKeys are the tracking records and keys of one worker generation (tgtest conn_keys).
type genKeys struct {
	Free     int  `json:"free"`      // slot records of released requests (FREE)
	Held     int  `json:"held"`      // slot records of requests in flight
	WT       bool `json:"wt"`        // its wt: and wp: keys exist
	WP       bool `json:"wp"`        //
	DictKeys int  `json:"dict_keys"` // its t:, ts: and ti: keys in connlimit_dict
}

// kill -9 of a worker with requests in flight: its slots come back within the timeout plus one
// cleanup interval (2 s + 1 s), not before the timeout, while the requests still in flight on
// the other workers keep theirs past the timeout (their heartbeat refreshes them).
func TestKilledWorkerSlotsComeBack(t *testing.T) {
	const timeout, interval = 2.0, 1.0
	s := connStack(t, 4, map[string]string{"TOLLGATE_CONN_TIMEOUT": "2",
		"TOLLGATE_CONN_CLEANUP_INTERVAL": "1"})
	g := s.gw()
	h := newHolder(t, g)
	const n = 16
	var victim, victimRecords, victimGen, survivorGen int
	var name string
	var results <-chan holdResult
	// 64 requests held at once and released: every worker ends with released (FREE) slots.
	// (Their own client: Go's transport re-sends a GET whose reused connection fails, so the
	// killed worker's requests must not ride on connections opened before.)
	hw := newHolder(t, g)
	warm := hw.start("demo-p1", "warm", 64)
	eventually(t, "64 warm-up requests in flight", func() bool { return connStateOf(g, "demo-p1").AppCurrent == 64 })
	hw.unhold("warm")
	for range warm {
	}
	hw.client.CloseIdleConnections()
	eventually(t, "warm-up released", func() bool { return connStateOf(g, "demo-p1").AppCurrent == 0 })
	for try := 0; try < 3 && victim == 0; try++ {
		name = "kill" + strconv.Itoa(try)
		results = h.start("demo-p1", name, n)
		eventually(t, "16 requests in flight", func() bool { return connStateOf(g, "demo-p1").AppCurrent == n })
		var ws []struct {
			Generation int  `json:"generation"`
			PID        int  `json:"pid"`
			Live       bool `json:"live"`
			Records    int  `json:"records"`
		}
		g.T("conn_workers", &ws)
		busy := 0
		for _, w := range ws {
			if w.Live && w.Records > 0 {
				busy++
				if w.Records > victimRecords {
					victim, victimRecords, victimGen = w.PID, w.Records, w.Generation
				}
			}
		}
		for _, w := range ws {
			if w.Live && w.Records > 0 && w.Generation != victimGen {
				survivorGen = w.Generation
			}
		}
		if busy < 2 { // all on one worker: nothing to tell apart, try again
			victim, victimRecords = 0, 0
			h.unhold(name)
			eventually(t, "released", func() bool { return connStateOf(g, "demo-p1").AppCurrent == 0 })
		}
	}
	if victim == 0 {
		t.Fatalf("16 connections never spread over two workers")
	}
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(g.PID())).Output()
	if err != nil || !strings.Contains("\n"+string(out), "\n"+strconv.Itoa(victim)+"\n") {
		t.Fatalf("worker %d is not a child of master %d: %q %v", victim, g.PID(), out, err)
	}
	// the killed worker's own requests fail at the client; requests whose backend side ran in
	// it end with 502 and are released normally; the rest stay in flight
	var failed, answered atomic.Int64
	go func() {
		for r := range results {
			if r.err != nil {
				failed.Add(1)
			} else {
				answered.Add(1)
			}
		}
	}()
	var before genKeys
	g.T("conn_keys?gen="+strconv.Itoa(victimGen), &before)
	if before.Free == 0 || before.Held != victimRecords {
		t.Fatalf("generation %d before the kill: %+v, want %d held records and FREE ones",
			victimGen, before, victimRecords)
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	inFlight := func() int64 { return int64(n-victimRecords) - answered.Load() }
	harness.Eventually(t, 10*time.Second, "the killed worker's slots back", func() bool {
		cur, want := connStateOf(g, "demo-p1").AppCurrent, inFlight()
		if cur < want {
			t.Fatalf("counter %d below the %d requests still in flight", cur, want)
		}
		return cur == want && failed.Load() == int64(victimRecords)
	})
	back := time.Since(killed).Seconds()
	survivors := inFlight()
	t.Logf("worker %d killed holding %d of %d slots (%d more ended with its backend side); "+
		"slots back after %.2fs (timeout %.0fs + cleanup interval %.0fs); %d requests still in flight",
		victim, victimRecords, n, answered.Load(), back, timeout, interval, survivors)
	if back > timeout+interval+0.5 || back < timeout*0.75-0.1 {
		t.Fatalf("slots back after %.2fs, want between the timeout less one heartbeat (%.2fs) and "+
			"timeout + interval (%.0fs)", back, timeout*0.75, timeout+interval)
	}
	if survivors <= 0 {
		t.Fatalf("no request survived the kill: the heartbeat is not exercised")
	}
	// the survivors stay in flight past the timeout: their heartbeat keeps their slots
	until := time.Now().Add(time.Duration((timeout + interval) * float64(time.Second)))
	for time.Now().Before(until) {
		if st := connStateOf(g, "demo-p1"); st.AppCurrent != inFlight() {
			t.Fatalf("a live request's slot was taken: %+v, want %d in flight", st, inFlight())
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.unhold(name)
	h.wg.Wait()
	eventually(t, "all slots back", func() bool {
		st := connStateOf(g, "demo-p1")
		return st.AppCurrent == 0 && st.ClusterCurrent == 0 && st.AppLeaked == int64(victimRecords)
	})
	eventually(t, "leak metric", func() bool {
		return g.Metric(`connlimit_leaked_total{app_id="demo-p1",cluster_id="default"}`) == float64(victimRecords)
	})
	// a released slot keeps its record, FREE, for the next request of its worker; the cleanup
	// deletes every key of the killed worker's generation
	var sk genKeys
	g.T("conn_keys?gen="+strconv.Itoa(survivorGen), &sk)
	if sk.Free == 0 || sk.Held != 0 || !sk.WT || !sk.WP {
		t.Fatalf("live generation %d after its requests ended: %+v, want FREE records only", survivorGen, sk)
	}
	var vk genKeys
	eventually(t, "the killed worker's generation forgotten", func() bool {
		g.T("conn_keys?gen="+strconv.Itoa(victimGen), &vk)
		return vk == genKeys{}
	}, func() { t.Logf("generation %d of the killed worker: %+v", victimGen, vk) })
}

// A change in Redis announced on ratelimit:config:update applies within a second; a deleted
// config falls back to the defaults; a bad one keeps the last good one and counts an error.
func TestConnConfigChangeAppliesOnNotice(t *testing.T) {
	s := connStack(t, 2, nil)
	g := s.gw()
	if st := connStateOf(g, "demo-p2"); st.Max != 1000 || st.Burst != 1000 || st.ClusterMax != 5000 {
		t.Fatalf("defaults: %+v, want 1000 / 5000", st)
	}
	applied := func(what string, cond func(connState) bool) {
		t.Helper()
		t0 := time.Now()
		harness.Eventually(t, time.Second, what+" within 1 s", func() bool { return cond(connStateOf(g, "demo-p2")) })
		t.Logf("%s applied after %v", what, time.Since(t0).Round(time.Millisecond))
	}
	s.setConnConfig(keys.ConnConfig("default", "demo-p2"), "max_connections", 3, "burst_connections", 3)
	applied("app limit 3", func(st connState) bool { return st.Max == 3 && st.Burst == 3 })
	steps := connOps(g, "demo-p2", "default", []string{"a", "a", "a", "a", "r1", "r2", "r3"})
	if !steps[2].OK || steps[3].OK || steps[3].Reason != "app_limit_exceeded" {
		t.Fatalf("with limit 3: %+v", steps)
	}
	s.setConnConfig(keys.ConnCluster("default"), "max_connections", 7)
	applied("cluster limit 7", func(st connState) bool { return st.ClusterMax == 7 && st.Headroom == 6 })
	errors := g.Metric("ratelimit_config_errors_total")
	s.setConnConfig(keys.ConnConfig("default", "demo-p2"), "max_connections", 5, "burst_connections", 4)
	eventually(t, "the bad config counted", func() bool { return g.Metric("ratelimit_config_errors_total") > errors })
	if st := connStateOf(g, "demo-p2"); st.Max != 3 {
		t.Fatalf("burst < max was applied: %+v", st)
	}
	s.setConnConfig(keys.ConnConfig("default", "demo-p2"))
	applied("defaults after delete", func(st connState) bool { return st.Max == 1000 })
}

// Without a notice the cached limits of an app with traffic on the node are re-read after the
// config TTL (the TTL re-reads the apps with state on the node, not every configured app).
func TestConnConfigCacheExpires(t *testing.T) {
	s := connStack(t, 2, map[string]string{"TOLLGATE_CONN_CONFIG_TTL": "0.5"})
	g := s.gw()
	if r := g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil); r.Status != 200 {
		t.Fatalf("demo-p3: status %d", r.Status)
	}
	err := s.rdb.HSet(context.Background(), keys.ConnConfig("default", "demo-p3"), "max_connections", 9).Err()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "limit read again after the TTL", func() bool { return connStateOf(g, "demo-p3").Max == 9 })
}

// With Redis down the limiter goes on enforcing the limits it has.
func TestConnLimiterWorksWithRedisDown(t *testing.T) {
	s := connStack(t, 2, map[string]string{"TOLLGATE_CONN_CONFIG_TTL": "0.2"})
	g := s.gw()
	s.appLimits("demo-p1", 2, 2)
	g.Do("GET", "/bucket/warm", "demo-p1", nil, nil)
	s.redis.Stop()
	h := newHolder(t, g)
	h.start("demo-p1", "down", 2)
	eventually(t, "2 held", func() bool { // and the warm-up request's slot given back
		return h.held("down").Now == 2 && connStateOf(g, "demo-p1").AppCurrent == 2
	})
	checkRejection(t, h.do("demo-p1", "none"), "app_limit_exceeded", 2, 2)
	h.unhold("down")
	h.wg.Wait()
	// the log phases of the released requests may still run after their responses arrived
	var st connState
	eventually(t, "nothing in flight with Redis down", func() bool {
		st = connStateOf(g, "demo-p1")
		return st.AppCurrent == 0
	})
	if st.Max != 2 {
		t.Fatalf("with Redis down: %+v, want limit 2 kept", st)
	}
}

// The connlimit_* metrics of Req 19 and the node statistics in Redis.
func TestConnMetricsAndNodeStats(t *testing.T) {
	s := connStack(t, 2, map[string]string{"TOLLGATE_CONN_STATS_INTERVAL": "0.2"})
	g := s.gw()
	s.appLimits("demo-p1", 1, 1)
	r := g.Do("GET", "/bucket/k", "demo-p1", nil, nil)
	// the default, compact set of response headers: price and tokens left, no connection counts
	// (those come with a connection refusal, or on every answer with TOLLGATE_RESPONSE_HEADERS=full)
	if r.Status != 200 || r.Header.Get("X-RateLimit-Cost") == "" || r.Header.Get("X-RateLimit-Remaining") == "" ||
		r.Header.Get("X-Connection-Limit") != "" || r.Header.Get("X-Connection-Current") != "" ||
		r.Header.Get("X-Connection-Remaining") != "" {
		t.Fatalf("admitted: %d %v, want X-RateLimit-Cost and -Remaining only", r.Status, r.Header)
	}
	// the first request's log phase may run after its answer: the held one waits for its slot
	eventually(t, "the first request's slot back", func() bool { return connStateOf(g, "demo-p1").AppCurrent == 0 })
	h := newHolder(t, g)
	h.start("demo-p1", "m", 1)
	// the backend holds the request and the first one's log phase has given its slot back
	// (AppCurrent alone could still count the first request and not yet the held one)
	eventually(t, "held", func() bool {
		return h.held("m").Now == 1 && connStateOf(g, "demo-p1").AppCurrent == 1
	})
	checkRejection(t, h.do("demo-p1", "none"), "app_limit_exceeded", 1, 1)
	labels := `{app_id="demo-p1",cluster_id="default"}`
	eventually(t, "gauges and counters", func() bool {
		return g.Metric("connlimit_active_connections"+labels) == 1 &&
			g.Metric("connlimit_peak_connections"+labels) == 1 &&
			g.Metric(`connlimit_cluster_active_connections{cluster_id="default"}`) == 1 &&
			g.Metric(`connlimit_rejected_total{app_id="demo-p1",cluster_id="default",reason="app_limit_exceeded"}`) == 1
	})
	key := keys.ConnNodeStats("default", "demo-p1", "node-1")
	eventually(t, "node statistics in Redis", func() bool {
		m, err := s.rdb.HGetAll(context.Background(), key).Result()
		return err == nil && m["current"] == "1" && m["peak"] == "1" && m["rejected"] == "1" && m["last_seen"] != ""
	})
	if ttl := s.rdb.TTL(context.Background(), key).Val(); ttl <= 0 || ttl > 300*time.Second {
		t.Fatalf("node statistics TTL %v, want (0, 300s]", ttl)
	}
	h.unhold("m")
	h.wg.Wait()
	eventually(t, "duration histogram", func() bool {
		return g.Metric("connlimit_duration_seconds_count") >= 2 && g.Metric("connlimit_active_connections"+labels) == 0
	})
	connOps(g, "demo-p1", "default", []string{"a", "l1:1000", "c"})
	eventually(t, "leak counter", func() bool { return g.Metric("connlimit_leaked_total"+labels) == 1 })
	resp, err := g.Client.Get(g.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, name := range []string{"connlimit_active_connections", "connlimit_peak_connections",
		"connlimit_rejected_total", "connlimit_leaked_total", "connlimit_duration_seconds"} {
		if !strings.Contains(string(body), "# HELP "+name+" ") {
			t.Fatalf("no HELP for %s in /metrics", name)
		}
	}
}
