package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/bench/internal/nginxenv"
	"tollgate/internal/keys"
)

// recorder holds the per-app series of a real run, written by the requests' goroutines.
type recorder struct {
	offered, admitted [][]atomic.Int64 // [app][slot] tokens
	intended          atomic.Int64     // requests the schedule asked for
	sent              atomic.Int64     // requests sent
	dropped           atomic.Int64     // not sent: too many in flight on the node (generator overloaded)
	errors            atomic.Int64     // transport errors and answers other than 200/429
	refused           atomic.Int64
	falseRefused      atomic.Int64
	probes            atomic.Int64 // Redis commands the generator itself sent (L2 reads)
	reasons           sync.Map     // reason → *atomic.Int64
}

func newRecorder(apps, slots int) *recorder {
	r := &recorder{offered: make([][]atomic.Int64, apps), admitted: make([][]atomic.Int64, apps)}
	for i := range r.offered {
		r.offered[i] = make([]atomic.Int64, slots)
		r.admitted[i] = make([]atomic.Int64, slots)
	}
	return r
}

func (r *recorder) series() []series {
	out := make([]series, len(r.offered))
	for i := range r.offered {
		out[i].offered = make([]int64, len(r.offered[i]))
		out[i].admitted = make([]int64, len(r.offered[i]))
		for j := range r.offered[i] {
			out[i].offered[j] = r.offered[i][j].Load()
			out[i].admitted[j] = r.admitted[i][j].Load()
		}
	}
	return out
}

func (r *recorder) reason(s string) {
	v, _ := r.reasons.LoadOrStore(s, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// l2Reader tells whether an app's L2 held tokens at a refusal: it reads the L2 hash (at most
// every 20 ms per app) and refills it to now at the guaranteed rate, capped by the burst minus
// what the leases hold, exactly as the scripts do (no emergency or overload in this benchmark).
type l2Reader struct {
	rdb  redis.UniversalClient
	w    *workload
	rec  *recorder
	mu   []sync.Mutex
	last []l2Snap
}

type l2Snap struct {
	read                        time.Time
	tokens, lastUs, outstanding float64
}

func newL2Reader(rdb redis.UniversalClient, w *workload, rec *recorder) *l2Reader {
	return &l2Reader{rdb: rdb, w: w, rec: rec, mu: make([]sync.Mutex, len(w.apps)), last: make([]l2Snap, len(w.apps))}
}

// held is the L2 tokens of app i now.
func (l *l2Reader) held(ctx context.Context, i int) float64 {
	a := l.w.apps[i]
	l.mu[i].Lock()
	defer l.mu[i].Unlock()
	now := time.Now()
	if now.Sub(l.last[i].read) > 20*time.Millisecond {
		l.rec.probes.Add(1)
		v, err := l.rdb.HMGet(ctx, keys.L2(clusterID, a.id), "current_tokens", "last_refill_us", "outstanding").Result()
		if err != nil {
			return 0
		}
		f := func(x any) float64 {
			s, _ := x.(string)
			n, _ := strconv.ParseFloat(s, 64)
			return n
		}
		l.last[i] = l2Snap{read: now, tokens: f(v[0]), lastUs: f(v[1]), outstanding: f(v[2])}
	}
	s := l.last[i]
	capTokens := float64(a.burst) - math.Max(0, s.outstanding)
	t := s.tokens + float64(a.g)*math.Max(0, float64(now.UnixMicro())-s.lastUs)/1e6
	return math.Max(0, math.Min(math.Max(capTokens, 0), t))
}

// falseThreshold is how many tokens L2 must hold for a refusal to count as false: the request's
// cost plus 100 ms of the app's guarantee (a node that was refused remembers it for at least
// the negative cache's 50 ms, during which L2 refills; those tokens are not lost, the next
// grant takes them).
func falseThreshold(a appSpec) float64 { return reqCost + 0.1*float64(a.g) }

// generator drives the nodes open-loop: per node, every slot, the requests each app's rate
// asks for are sent without waiting for earlier answers (at most maxInflight per node).
type generator struct {
	w       *workload
	st      *stack
	rec     *recorder
	l2      *l2Reader
	clients []*http.Client
	sem     []chan struct{}
	start   time.Time
	wg      sync.WaitGroup
	verbose bool
}

const maxInflight = 256

func newGenerator(w *workload, st *stack, rec *recorder) *generator {
	g := &generator{w: w, st: st, rec: rec, l2: newL2Reader(st.rdb, w, rec), verbose: st.o.verbose}
	for range st.nodes {
		g.clients = append(g.clients, &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: maxInflight, IdleConnTimeout: 30 * time.Second, DisableCompression: true}})
		g.sem = append(g.sem, make(chan struct{}, maxInflight))
	}
	return g
}

// run drives the load for the workload's duration; down reports whether node 0 is down.
func (g *generator) run(ctx context.Context) {
	g.start = time.Now()
	var wg sync.WaitGroup
	for n := range g.st.nodes {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			g.node(ctx, n)
		}(n)
	}
	wg.Wait()
	g.wg.Wait()
}

func (g *generator) node(ctx context.Context, n int) {
	due := make([]float64, len(g.w.apps))
	tick := time.NewTicker(slot)
	defer tick.Stop()
	last := g.start
	url := "http://" + g.st.nodes[n].addr + nginxenv.ObjectPath
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			el := now.Sub(g.start)
			if el >= g.w.dur {
				return
			}
			dt := now.Sub(last).Seconds()
			last = now
			s := int(el / slot)
			down := g.w.down.Load()
			for i := range g.w.apps {
				due[i] += g.w.rate(i, n, el.Seconds(), down) * dt / reqCost
				k := int(due[i])
				due[i] -= float64(k)
				for ; k > 0; k-- {
					g.rec.intended.Add(1)
					select {
					case g.sem[n] <- struct{}{}:
					default:
						g.rec.dropped.Add(1)
						continue
					}
					g.rec.sent.Add(1)
					g.rec.offered[i][s].Add(reqCost)
					g.wg.Add(1)
					go g.request(ctx, n, i, s, url)
				}
			}
		}
	}
}

func (g *generator) request(ctx context.Context, n, i, s int, url string) {
	defer g.wg.Done()
	defer func() { <-g.sem[n] }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		g.rec.errors.Add(1)
		return
	}
	req.Header.Set(nginxenv.AppHeader, g.w.apps[i].id)
	resp, err := g.clients[n].Do(req)
	if err != nil {
		g.rec.errors.Add(1)
		g.rec.reason("transport_error")
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		g.rec.admitted[i][s].Add(reqCost)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		g.rec.refused.Add(1)
		reason := resp.Header.Get("X-Tollgate-Reason")
		if reason == "" {
			var b struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal(body, &b)
			reason = b.Reason
		}
		if reason == "" {
			reason = strconv.Itoa(resp.StatusCode)
		}
		g.rec.reason(reason)
		held := g.l2.held(ctx, i)
		if held >= falseThreshold(g.w.apps[i]) {
			g.rec.falseRefused.Add(1)
			g.rec.reason("false " + reason)
		}
		if g.verbose && (g.w.apps[i].demand < 1 || held >= falseThreshold(g.w.apps[i])) {
			g.st.o.logf("refused %s on node %d at %.2fs: %s, L2 holds %.0f: %s", g.w.apps[i].id, n,
				time.Since(g.start).Seconds(), reason, held, body)
		}
	default:
		g.rec.errors.Add(1)
		g.rec.reason("status_" + strconv.Itoa(resp.StatusCode))
	}
}
