// Package sim is a deterministic simulator of tollgate's token economy: a virtual clock, the
// real Redis scripts on a real redis-server (with their explicit time argument), and a model of
// the gateway's L3 lease policy with the gateway's own parameters. It reports, for N nodes x M
// apps under skewed and bursty load, admitted cost against an ideal single token bucket per
// app, utilisation, overshoot, drift, convergence after a load shift and how fast an emergency
// takes effect. See README.md for the model and where it differs from the Lua.
package sim

import (
	"fmt"
	"math"
	"time"
)

// Gateway holds the L3 lease parameters, with the defaults of lua/tollgate/settings.lua and
// lua/tollgate/lease/sync.lua.
type Gateway struct {
	SyncInterval    time.Duration // TOLLGATE_SYNC_INTERVAL 0.1 s
	BatchThreshold  int64         // TOLLGATE_BATCH_THRESHOLD 1000 requests
	MinTarget       int64         // TOLLGATE_RESERVE_TARGET 1000 tokens
	MaxTarget       int64         // TOLLGATE_MAX_TARGET 200000 tokens
	TargetHorizon   float64       // TOLLGATE_TARGET_HORIZON 0.5 s of traffic
	RefillThreshold float64       // 0.2 of the target
	IdleReturn      time.Duration // TOLLGATE_IDLE_RETURN 1 s
	NegCacheMin     time.Duration // 0.05 s
	NegCacheMax     time.Duration // 1 s
	Heartbeat       time.Duration // 5 s (lease/sync.lua HEARTBEAT)
	EWMA            float64       // 0.3 (lease/sync.lua EWMA)
	ScarceFor       time.Duration // 2 s (lease/bucket.lua note_grant)
	NodesFor        time.Duration // 10 s: a grant's count of active nodes is remembered (note_grant)
}

// DefaultGateway are the gateway's defaults.
func DefaultGateway() Gateway {
	return Gateway{SyncInterval: 100 * time.Millisecond, BatchThreshold: 1000, MinTarget: 1000,
		MaxTarget: 200_000, TargetHorizon: 0.5, RefillThreshold: 0.2, IdleReturn: time.Second,
		NegCacheMin: 50 * time.Millisecond, NegCacheMax: time.Second, Heartbeat: 5 * time.Second,
		EWMA: 0.3, ScarceFor: 2 * time.Second, NodesFor: 10 * time.Second}
}

// Config is one simulation run.
type Config struct {
	Nodes    int
	Apps     int
	Duration time.Duration // virtual
	Step     time.Duration // virtual time step
	Seed     uint64

	// Active is the fraction of apps that carry traffic: the top-ranked ceil(Active x Apps) apps
	// (1: all). The others exist in Redis (created through the store, reconciled and measured
	// by the control-plane jobs) but have no traffic and no lease on any node.
	Active float64
	// ScanAll visits every app in every step, idle ones with leases on their nodes, instead of
	// only the active ones (the same results, slower: it is what the tests compare against).
	ScanAll bool

	Capacity  int64   // cluster capacity, tokens/s
	Allocated float64 // sum of guaranteed quotas / capacity

	Gateway Gateway

	Warmup         time.Duration // excluded from the steady-state utilisation window
	ShiftAt        time.Duration // load shift: shifted apps move to the other half of their nodes
	CrashAt        time.Duration // one node stops for good (0: none)
	EmergencyAt    time.Duration // emergency activated (0: none)
	EmergencyFor   time.Duration
	PushDelayMax   time.Duration // pub/sub delivery delay per node, uniform in (0, max]
	PollEvery      time.Duration // a node that missed the push learns it by polling (config poll)
	PushLoss       float64       // fraction of nodes that miss the push
	ReconcileEvery time.Duration
	ReapAfter      time.Duration
	UsageEvery     time.Duration // overload job interval
	Tolerance      float64       // drift tolerance of the reconciler

	RedisServer string // redis-server binary (default: $TOLLGATE_REDIS_SERVER or from PATH)

	// Custom replaces the generated workload (the cluster benchmark runs its own workload on the
	// simulator to compare it with real nodes); nil: the workload described in README.md.
	Custom *Custom
}

// Custom is a workload given from outside: apps, a deterministic demand per app, node and
// virtual second, and node crashes with restart. Every request costs Cost; requests arrive as
// the demand accumulates (no Poisson noise), as an open-loop load generator sends them. The
// result holds each app's offered and admitted cost per step (Result.Series).
type Custom struct {
	Apps []CustomApp
	Cost int64
	// Rate is app a's demand on node n at virtual second t, in tokens/s.
	Rate func(a, n int, t float64) float64
	// Down reports whether node n is down at virtual second t: when it goes down its leases and
	// unreported consumption are lost (kill -9); when it comes back it starts with empty leases.
	Down func(n int, t float64) bool
}

// CustomApp is one app of a custom workload (priority 0, no borrowing).
type CustomApp struct {
	ID       string
	G, Burst int64
}

// Default is the full run: 100 nodes x 1000 apps, 60 virtual seconds.
func Default() Config {
	return Config{Nodes: 100, Apps: 1000, Duration: 60 * time.Second, Step: 10 * time.Millisecond,
		Seed: 1, Active: 1, Capacity: 1_000_000, Allocated: 0.85, Gateway: DefaultGateway(),
		Warmup: 5 * time.Second, ShiftAt: 20 * time.Second, CrashAt: 30 * time.Second,
		EmergencyAt: 45 * time.Second, EmergencyFor: 10 * time.Second,
		PushDelayMax: 10 * time.Millisecond, PollEvery: time.Second, PushLoss: 0,
		ReconcileEvery: 10 * time.Second, ReapAfter: 5 * time.Second, UsageEvery: 5 * time.Second,
		Tolerance: 0.1}
}

// Quick is the small run of `go test`: 10 nodes x 60 apps, 24 virtual seconds.
func Quick() Config {
	c := Default()
	c.Nodes, c.Apps, c.Duration, c.Capacity = 10, 60, 24*time.Second, 200_000
	c.Warmup, c.ShiftAt, c.CrashAt, c.EmergencyAt, c.EmergencyFor = 3*time.Second, 8*time.Second,
		12*time.Second, 18*time.Second, 4*time.Second
	c.ReconcileEvery, c.ReapAfter = 5*time.Second, 3*time.Second
	return c
}

func (c Config) validate() error {
	switch {
	case c.Nodes < 2 || c.Apps < 4:
		return fmt.Errorf("sim: want at least 2 nodes and 4 apps")
	case c.Step <= 0 || c.Duration < 10*c.Step:
		return fmt.Errorf("sim: step %s too large for duration %s", c.Step, c.Duration)
	case c.Gateway.SyncInterval < c.Step:
		return fmt.Errorf("sim: step %s longer than the sync interval", c.Step)
	case c.Active <= 0 || c.Active > 1:
		return fmt.Errorf("sim: active share %.2f outside (0, 1]", c.Active)
	case c.Allocated <= 0 || c.Allocated > 0.9:
		return fmt.Errorf("sim: allocated share %.2f outside (0, 0.9]", c.Allocated)
	}
	return nil
}

// activeApps is the number of apps with traffic.
func (c Config) activeApps() int {
	return max(1, min(c.Apps, int(math.Ceil(c.Active*float64(c.Apps)-1e-9))))
}
