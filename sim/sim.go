package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/internal/ledger"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

const cluster = "sim"

// Sim is one run.
type Sim struct {
	cfg  Config
	rng  *rand.Rand
	rdb  *redis.Client
	set  *scripts.Set
	led  *ledger.Ledger
	ctx  context.Context
	apps []*app
	live []*app   // the apps visited every step: the active ones (all with ScanAll)
	ids  []string // every app's id, for the control-plane jobs

	t0, now, dt int64 // virtual Unix microseconds; dt = step
	nodes       []nodeState
	byNode      [][]ref // leases of each node

	async []call // this step's asynchronous refills, applied at the next step
	ready []func()

	em       emergency
	overload struct{ usage float64 }
	usage    struct {
		consumed int64
		at       int64
	}
	m   runMetrics
	log io.Writer
	res *Result
}

type ref struct{ a, j int } // app index, lease index

type nodeState struct {
	crashed  bool
	emUntil  int64 // virtual µs the node enforces emergency until (0: none)
	noticeAt int64 // virtual µs the node learns of a pending activation (0: none)
	offset   int64 // phase of its sync tick, µs
	poll     int64 // phase of its config poll, µs
}

type emergency struct {
	start, end int64 // virtual µs; 0 before activation
	applied    int   // nodes that enforce it
	allAt      int64 // when the last node started enforcing
}

type call struct {
	name string
	keys []string
	args []any
	done func(res []any, err error)
}

// Run executes a simulation and returns its results. Progress lines go to log (may be nil).
func Run(ctx context.Context, c Config, log io.Writer) (*Result, error) {
	s, err := run(ctx, c, log)
	if err != nil {
		return nil, err
	}
	return s.res, nil
}

func run(ctx context.Context, c Config, log io.Writer) (*Sim, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = io.Discard
	}
	srv, err := startRedis(c.RedisServer)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer rdb.Close()
	set, err := scripts.New()
	if err != nil {
		return nil, err
	}
	if err := set.LoadAll(ctx, rdb); err != nil {
		return nil, err
	}
	s := &Sim{cfg: c, rng: rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15)), rdb: rdb, set: set,
		led: ledger.New(rdb, set), ctx: ctx, log: log}
	wall := time.Now()
	if err := s.setup(); err != nil {
		return nil, err
	}
	setupWall := time.Since(wall)
	cmd0, script0, err := commandCalls(ctx, rdb)
	if err != nil {
		return nil, err
	}
	cpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		return nil, err
	}
	loopWall := time.Now()
	if err := s.loop(); err != nil {
		return nil, err
	}
	loopTime := time.Since(loopWall)
	cmd1, script1, err := commandCalls(ctx, rdb)
	if err != nil {
		return nil, err
	}
	cpu1, err := redisCPU(ctx, rdb)
	if err != nil {
		return nil, err
	}
	used, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	s.res = s.result(time.Since(wall))
	s.res.SetupWall, s.res.LoopWall = setupWall, loopTime
	s.res.VirtualPerSec = c.Duration.Seconds() / loopTime.Seconds()
	s.res.RedisCPU = cpu1 - cpu0
	s.res.RedisCommands, s.res.RedisScripts, s.res.RedisUsedMemory = cmd1-cmd0, script1-script0, used
	return s, nil
}

// setup writes the cluster and the apps through the config store, and starts the virtual clock
// just after Redis' own (the buckets created with Redis TIME start full).
func (s *Sim) setup() error {
	st := store.New(s.rdb, s.set)
	if _, err := st.PutCluster(s.ctx, store.Cluster{ID: cluster, Capacity: s.cfg.Capacity, ReservedRatio: 0.1}); err != nil {
		return err
	}
	s.apps = workload(s.cfg, s.rng)
	if err := s.putApps(st); err != nil {
		return err
	}
	for _, a := range s.apps {
		a.ideal.tokens = float64(a.burst)
		s.ids = append(s.ids, a.id)
		if a.active || s.cfg.ScanAll {
			s.live = append(s.live, a)
		}
	}
	now, err := s.rdb.Time(s.ctx).Result()
	if err != nil {
		return err
	}
	s.t0 = (now.Unix() + 2) * 1_000_000
	s.dt = s.cfg.Step.Microseconds()
	s.nodes = make([]nodeState, s.cfg.Nodes)
	s.byNode = make([][]ref, s.cfg.Nodes)
	sync := s.cfg.Gateway.SyncInterval.Microseconds()
	for n := range s.nodes {
		s.nodes[n].offset = (int64(n) * 7 * s.dt) % sync
		s.nodes[n].poll = s.rng.Int64N(s.cfg.PollEvery.Microseconds())
	}
	for ai, a := range s.apps {
		for j, n := range a.nodes {
			s.byNode[n] = append(s.byNode[n], ref{ai, j})
		}
	}
	s.usage.at = s.t0
	s.m.init(s)
	return nil
}

// putApps creates the apps through the config store with 8 concurrent writers (the order does
// not matter: every bucket starts full and the allocations only add up).
func (s *Sim) putApps(st *store.Store) error {
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(s.apps); i += writers {
				a := s.apps[i]
				if _, err := st.PutApp(s.ctx, store.App{AppID: a.id, ClusterID: cluster, GuaranteedQuota: a.g,
					BurstQuota: a.burst, Priority: a.prio, CBw: 1, MaxBorrow: 0, Enabled: true}); err != nil {
					errs <- fmt.Errorf("sim: app %s: %w", a.id, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (s *Sim) at(d time.Duration) int64 { return s.t0 + d.Microseconds() }

func (s *Sim) loop() error {
	end := s.at(s.cfg.Duration)
	nextProgress := s.at(10 * time.Second)
	for s.now = s.t0; s.now < end; s.now += s.dt {
		s.m.now = s.now
		for _, f := range s.ready {
			f()
		}
		s.ready = s.ready[:0]
		if err := s.events(); err != nil {
			return err
		}
		sync, err := s.traffic()
		if err != nil {
			return err
		}
		if err := s.slowPaths(sync); err != nil {
			return err
		}
		reports := s.ticks()
		if err := s.exec(append(reports, s.async...)); err != nil {
			return err
		}
		s.async = s.async[:0]
		if err := s.periodic(); err != nil {
			return err
		}
		s.m.step(s)
		if s.now >= nextProgress {
			fmt.Fprintf(s.log, "sim: %s virtual, %d script calls\n",
				time.Duration(s.now-s.t0)*time.Microsecond, s.m.calls)
			nextProgress += 10_000_000
		}
	}
	return nil
}

// exec runs calls in one pipeline and hands every reply to its callback.
func (s *Sim) exec(calls []call) error {
	if len(calls) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = s.set.Run(s.ctx, pipe, c.name, c.keys, c.args...)
	}
	_, _ = pipe.Exec(s.ctx)
	s.m.calls += int64(len(calls))
	for i, c := range calls {
		res, err := cmds[i].Slice()
		if err != nil && s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		c.done(res, err)
	}
	return nil
}

// events: load shift, node crash, emergency activation, pushes and polls reaching nodes, and
// emergencies ending on the nodes.
func (s *Sim) events() error {
	c := s.cfg
	if c.ShiftAt > 0 && s.now == s.at(c.ShiftAt) {
		for _, a := range s.apps {
			if a.shifted {
				a.shift()
			}
		}
	}
	if c.Custom != nil && c.Custom.Down != nil {
		s.customDown()
	}
	if c.CrashAt > 0 && s.now == s.at(c.CrashAt) {
		s.nodes[0].crashed = true
		for _, r := range s.byNode[0] {
			s.apps[r.a].drop(0)
		}
	}
	if c.EmergencyAt > 0 && s.now == s.at(c.EmergencyAt) {
		if err := s.activate(); err != nil {
			return err
		}
	}
	for n := range s.nodes {
		ns := &s.nodes[n]
		if ns.noticeAt > 0 && s.now >= ns.noticeAt && !ns.crashed {
			ns.noticeAt = 0
			ns.emUntil = s.em.end
			s.scaleLeases(n)
			s.em.applied++
			if s.em.applied == s.liveNodes() {
				s.em.allAt = s.now
			}
		}
		if ns.emUntil > 0 && s.now >= ns.emUntil {
			ns.emUntil = 0
		}
	}
	return nil
}

func (s *Sim) liveNodes() int {
	n := 0
	for _, ns := range s.nodes {
		if !ns.crashed {
			n++
		}
	}
	return n
}

// activate runs emergency_activate and schedules its push to every node: after the pub/sub
// delay, or at the node's next config poll when the push is lost.
func (s *Sim) activate() error {
	_, until, err := s.led.ActivateEmergency(s.ctx, cluster, ledger.Activation{
		Duration: s.cfg.EmergencyFor, Reason: "simulated incident", Source: "manual", Actor: "sim"}, s.now)
	if err != nil {
		return err
	}
	s.em.start, s.em.end = s.now, until*1_000_000
	poll := s.cfg.PollEvery.Microseconds()
	for n := range s.nodes {
		ns := &s.nodes[n]
		if ns.crashed {
			continue
		}
		if s.rng.Float64() < s.cfg.PushLoss {
			ns.noticeAt = s.now + (ns.poll-(s.now-s.t0)%poll+poll)%poll + 1
		} else {
			ns.noticeAt = s.now + 1 + s.rng.Int64N(s.cfg.PushDelayMax.Microseconds())
		}
	}
	return nil
}

// scaleLeases is lease/emergency.lua scale_leases(): cut every lease of node n to its ratio (the rest
// is given back with the next report) and scale its target.
func (s *Sim) scaleLeases(n int) {
	for _, r := range s.byNode[n] {
		a := s.apps[r.a]
		ra := ratio[a.prio]
		if ra >= 1 {
			continue
		}
		l := &a.leases[r.j]
		give := l.tokens - int64(math.Floor(float64(l.tokens)*ra))
		l.tokens -= give
		l.giveBack += give
		l.target = int64(math.Floor(float64(l.target) * ra))
	}
}

type syncNeed struct{ a, j int }

// traffic: this step's requests on every node, served from the leases (the hot path of
// l3_bucket.acquire); requests an empty lease cannot serve go to the slow path.
func (s *Sim) traffic() ([]syncNeed, error) {
	dt := float64(s.dt) / 1e6
	t := float64(s.now-s.t0) / 1e6
	var need []syncNeed
	for _, a := range s.live {
		ai := a.idx
		rate := a.rate(t)
		var total int64
		for j, n := range a.nodes {
			if a.share[j] == 0 || s.nodes[n].crashed {
				continue
			}
			var k int64
			if cu := s.cfg.Custom; cu != nil {
				a.due[j] += cu.Rate(ai, n, t) * dt / float64(a.cost)
				k = int64(a.due[j])
				a.due[j] -= float64(k)
			} else {
				k = poisson(s.rng, rate*a.share[j]*dt/float64(a.cost))
			}
			if k == 0 {
				continue
			}
			total += k
			if rest := s.serve(ai, j, k); rest > 0 {
				a.m.wait[j] = rest
				need = append(need, syncNeed{ai, j})
			}
		}
		s.m.demand(a, total)
		s.idealStep(a, total, dt)
	}
	return need, nil
}

// serve admits up to k requests from lease j of app ai and returns how many wait for the slow
// path.
func (s *Sim) serve(ai, j int, k int64) int64 {
	a := s.apps[ai]
	l := &a.leases[j]
	ns := &s.nodes[a.nodes[j]]
	if ns.emUntil > 0 && a.prio >= 3 {
		s.m.reject(a, "emergency_blocked", k)
		return 0
	}
	take := min(k, l.tokens/a.cost)
	if take > 0 {
		l.tokens -= take * a.cost
		l.pendingCost += take * a.cost
		l.pendingCount += take
		s.m.admit(a, take*a.cost)
		// the hot path: a deduction that leaves less than RefillThreshold of the target starts
		// the asynchronous refill (a request that finds the lease empty takes the slow path)
		if float64(l.tokens) < float64(l.reserve(s.cfg.Gateway, a.burst, s.now))*s.cfg.Gateway.RefillThreshold {
			s.refill(ai, j)
		}
	}
	rest := k - take
	if rest > 0 && l.negUntil > s.now {
		s.m.reject(a, l.negReason, rest)
		return 0
	}
	return rest
}

// refill queues the single-flight asynchronous refill of l3_bucket.refill_timer; its reply is
// credited at the next step.
func (s *Sim) refill(ai, j int) {
	a := s.apps[ai]
	l := &a.leases[j]
	if l.refilling {
		return
	}
	want := l.reserve(s.cfg.Gateway, a.burst, s.now) - l.tokens
	if want <= 0 {
		return
	}
	l.refilling = true
	node := nodeID(a.nodes[j])
	k, args := grantCall(a.id, node, want, 1, want, s.now)
	s.async = append(s.async, call{name: "l2_grant", keys: k, args: args, done: func(res []any, err error) {
		s.ready = append(s.ready, func() {
			l.refilling = false
			g, perr := ledger.ParseGrant(res)
			if err != nil || perr != nil {
				s.m.errors++
				return
			}
			s.credit(l, g.Granted)
			s.noteGrant(l, g, want, res)
		})
	}})
}

// grantCall is l2_grant of the gateway (lease/bucket.lua run_grant): `reserve` is the part of
// `want` beyond what the node needs now, which L2 cuts to the node's share of the burst.
func grantCall(app, node string, want, min, reserve, now int64) ([]string, []any) {
	k, args := ledger.GrantCall(cluster, app, node, want, min, now)
	return k, append(args, "", "", reserve)
}

// noteGrant is lease/bucket.lua note_grant(): scarce when L2 granted less than asked after the
// cut of the reserve to the node's share (the reply's ninth field), or was left with less than
// a quarter of the burst; the count of active nodes.
func (s *Sim) noteGrant(l *lease, g ledger.Grant, want int64, res []any) {
	if len(res) > 8 {
		if v, ok := res[8].(int64); ok {
			want = v
		}
	}
	if g.Granted < want || 4*g.TokensLeft < g.Burst {
		l.scarceUntil = s.now + s.cfg.Gateway.ScarceFor.Microseconds()
	}
	l.nodes = g.ActiveNodes
	l.nodesUntil = s.now + s.cfg.Gateway.NodesFor.Microseconds()
}

// credit adds granted tokens to a lease; a lease with tokens joins the node's active set, which
// worker 0's tick visits (lease/active.lua mark).
func (s *Sim) credit(l *lease, granted int64) {
	if granted <= 0 {
		return
	}
	l.tokens += granted
	l.joined = true
}

// slowPaths is l3_bucket.slow_acquire: one synchronous grant of (request + reserve) per lease
// with waiting requests, in rounds until every waiting request is served or refused. A node
// that does not know how many nodes share the app asks for the request alone, and its
// asynchronous refill takes the reserve once the reply has told it.
func (s *Sim) slowPaths(need []syncNeed) error {
	for round := 0; len(need) > 0; round++ {
		if round == 64 {
			for _, w := range need {
				a := s.apps[w.a]
				s.m.reject(a, "sim_round_limit", a.m.wait[w.j])
				a.m.wait[w.j] = 0
			}
			return nil
		}
		calls := make([]call, 0, len(need))
		var next []syncNeed
		for _, w := range need {
			a := s.apps[w.a]
			l := &a.leases[w.j]
			cost := a.cost
			first := !l.knowsNodes(s.now)
			var reserve int64
			if !first {
				reserve = l.reserve(s.cfg.Gateway, a.burst, s.now)
			}
			want := cost + reserve
			k, args := grantCall(a.id, nodeID(a.nodes[w.j]), want, cost, reserve, s.now)
			w := w
			calls = append(calls, call{name: "l2_grant", keys: k, args: args, done: func(res []any, err error) {
				g, perr := ledger.ParseGrant(res)
				if err != nil || perr != nil {
					s.m.errors++
					s.m.reject(a, "redis_error", a.m.wait[w.j])
					a.m.wait[w.j] = 0
					return
				}
				s.noteGrant(l, g, want, res)
				if g.Granted <= 0 {
					reason := g.Reason
					if reason == "ok" {
						reason = "app_exhausted"
					}
					l.negUntil = s.now + negTTL(s.cfg.Gateway, cost-g.TokensLeft, g.RateMilli).Microseconds()
					l.negReason = reason
					s.m.reject(a, reason, a.m.wait[w.j])
					a.m.wait[w.j] = 0
					return
				}
				s.credit(l, g.Granted)
				rest := a.m.wait[w.j]
				a.m.wait[w.j] = 0
				if left := s.serve(w.a, w.j, rest); left > 0 {
					a.m.wait[w.j] = left
					next = append(next, w)
				}
				if first {
					s.refill(w.a, w.j)
				}
			}})
		}
		if err := s.exec(calls); err != nil {
			return err
		}
		need = next
	}
	return nil
}

func nodeID(n int) string { return fmt.Sprintf("n%03d", n) }

// ticks is worker 0's tick of lease/sync.lua on every node whose sync interval comes round: upkeep
// (rate, target, idle and scarce returns, emergency give-back) and the reports it makes due; a
// lease with BatchThreshold pending requests reports at once.
func (s *Sim) ticks() []call {
	var calls []call
	sync := s.cfg.Gateway.SyncInterval.Microseconds()
	for n := range s.nodes {
		ns := &s.nodes[n]
		if ns.crashed {
			continue
		}
		tick := (s.now-s.t0-ns.offset)%sync == 0
		for _, r := range s.byNode[n] {
			a := s.apps[r.a]
			l := &a.leases[r.j]
			if tick {
				if c, ok := s.upkeep(a, l, n); ok {
					calls = append(calls, c)
				}
			} else if l.pendingCount >= s.cfg.Gateway.BatchThreshold {
				calls = append(calls, s.report(a, l, n, 0))
			}
		}
	}
	return calls
}

func (s *Sim) upkeep(a *app, l *lease, n int) (call, bool) {
	g := s.cfg.Gateway
	if !l.joined {
		return call{}, false // not in the node's active set: the tick does not visit it
	}
	total := l.reported + l.pendingCost
	if !l.tracked {
		// the first tick since the app joined: its rate starts from here
		l.tracked, l.targetSet, l.lastTotal, l.lastActive, l.rate, l.lastReport = true, true, total, s.now, 0, 0
	}
	delta := total - l.lastTotal
	l.lastTotal = total
	if delta != 0 {
		l.lastActive = s.now
	}
	l.rate += g.EWMA * (float64(delta)/g.SyncInterval.Seconds() - l.rate)
	scarce := l.scarceUntil > s.now
	l.target = targetOf(g, l.rate, scarce, a.burst, l.nodesOr1(s.now))
	if s.nodes[n].emUntil > 0 {
		l.target = int64(math.Floor(float64(l.target) * ratio[a.prio]))
	}
	returned := l.giveBack
	l.giveBack = 0
	switch {
	case l.tokens > 0 && s.now-l.lastActive >= g.IdleReturn.Microseconds():
		returned += l.tokens
		l.tokens = 0
	case scarce && l.tokens > 2*l.target:
		returned += l.tokens - l.target
		l.tokens = l.target
	}
	force := (l.tokens > 0 || returned > 0) && s.now-l.lastReport >= g.Heartbeat.Microseconds()
	if l.pendingCost == 0 && l.pendingCount == 0 && returned == 0 && !force {
		// lease/sync.lua tick: a quiet app with nothing left to report leaves the active set
		// (its target stays as the last tick left it)
		if l.tokens == 0 && l.giveBack == 0 && s.now-l.lastActive >= (g.IdleReturn+g.Heartbeat).Microseconds() &&
			s.now-l.lastReport >= g.Heartbeat.Microseconds() {
			l.joined, l.tracked = false, false
		}
		return call{}, false
	}
	return s.report(a, l, n, returned), true
}

// report is lease/sync.lua prepare()+send(): pending consumption, returned tokens and held tokens.
func (s *Sim) report(a *app, l *lease, n int, returned int64) call {
	l.seq++
	r := ledger.Report{Seq: l.seq, Consumed: l.pendingCost, Requests: l.pendingCount, Returned: returned, Held: l.tokens}
	l.reported += l.pendingCost
	l.pendingCost, l.pendingCount = 0, 0
	l.lastReport = s.now
	k, args := ledger.ReportCall(cluster, a.id, nodeID(n), r, s.now)
	return call{name: "l3_report", keys: k, args: args, done: func(_ []any, err error) {
		if err != nil {
			s.m.errors++
		}
	}}
}

// periodic runs the control plane's jobs on the virtual clock: reconciliation (drift,
// reaping, L1 invariant) and overload measurement with emergency expiry.
func (s *Sim) periodic() error {
	since := s.now - s.t0 + s.dt
	if since%s.cfg.ReconcileEvery.Microseconds() == 0 {
		if err := s.reconcile(); err != nil {
			return err
		}
	}
	if since%s.cfg.UsageEvery.Microseconds() == 0 {
		return s.measureUsage()
	}
	return nil
}

func (s *Sim) reconcile() error {
	at := s.now + s.dt
	calls := make([]call, 0, len(s.apps))
	for _, a := range s.apps {
		k := []string{keys.L2(cluster, a.id), keys.Leases(cluster, a.id), keys.Nodes(cluster, a.id),
			keys.Stats(cluster, a.id), keys.L1(cluster), keys.Active(cluster), keys.Debtors(cluster)}
		calls = append(calls, call{name: "l2_reconcile", keys: k,
			args: []any{s.cfg.Tolerance, int64(s.cfg.ReapAfter / time.Second), at},
			done: func(res []any, err error) {
				if err != nil || len(res) < 7 {
					s.m.errors++
					return
				}
				s.m.reconciled(res)
			}})
	}
	if err := s.exec(calls); err != nil {
		return err
	}
	// the L1 check as the job runs it: the allocation set's sums (one page: the simulator's
	// apps fit the job's sweep page, so each of its ticks is a whole cycle), then l1_correct
	revs, err := s.led.ReadRevs(s.ctx, cluster)
	if err != nil {
		return err
	}
	sums, err := s.led.TallyL1(s.ctx, cluster, s.ids)
	if err != nil {
		return err
	}
	r, err := s.led.CorrectL1(s.ctx, cluster, revs, sums)
	if err != nil {
		return err
	}
	if r.Corrected {
		s.m.l1Corrections++
	}
	return nil
}

// measureUsage is the overload job: reported consumption over the interval / capacity, recorded
// with overload_set; the ideal buckets follow the same factor. It also records an expired
// emergency, as the emergency job does.
func (s *Sim) measureUsage() error {
	at := s.now + s.dt
	t, err := s.led.ClusterTotals(s.ctx, cluster) // kept by l3_report, as the usage job reads it
	if err != nil {
		return err
	}
	total := t.Consumed
	dt := float64(at-s.usage.at) / 1e6
	u := float64(total-s.usage.consumed) / dt / float64(s.cfg.Capacity)
	s.usage.consumed, s.usage.at = total, at
	if _, err := s.led.SetOverload(s.ctx, cluster, u, 3*s.cfg.UsageEvery, at); err != nil {
		return err
	}
	s.overload.usage = math.Round(u*1e6) / 1e6
	s.m.usage = append(s.m.usage, u)
	if s.em.end > 0 && at >= s.em.end {
		if _, err := s.led.DeactivateEmergency(s.ctx, cluster, ledger.Deactivation{Reason: "expired",
			Source: "expired", Actor: "sim", OnlyIfExpired: true}, at); err != nil {
			return err
		}
	}
	return nil
}

// idealStep feeds the app's whole demand of the step to its ideal bucket, which follows the
// same refill factor and emergency cap as L2.
func (s *Sim) idealStep(a *app, n int64, dt float64) {
	factor, cap := overloadFactor(a.prio, s.overload.usage), float64(a.burst)
	if s.em.start > 0 && s.now >= s.em.start && s.now < s.em.end {
		factor = ratio[a.prio]
		cap = float64(a.burst) * factor
	}
	k := a.ideal.admit(float64(a.g), cap, factor, dt, n, a.cost)
	s.m.ideal(a, k*a.cost)
}

// customDown crashes and restarts nodes as Config.Custom.Down says: a crashed node loses its
// leases and what it had not reported; a restarted one starts with empty leases.
func (s *Sim) customDown() {
	t := float64(s.now-s.t0) / 1e6
	for n := range s.nodes {
		down := s.cfg.Custom.Down(n, t)
		ns := &s.nodes[n]
		if down == ns.crashed {
			continue
		}
		ns.crashed = down
		if down {
			continue
		}
		for _, r := range s.byNode[n] {
			a := s.apps[r.a]
			// a restarted gateway's report sequence goes on from its clock (lease/sync.lua
			// seq_base): L2 applies its reports, the first of which replaces what it held
			seq := a.leases[r.j].seq + 1_000_000
			a.leases[r.j] = lease{seq: seq}
			a.due[r.j] = 0
		}
	}
}
