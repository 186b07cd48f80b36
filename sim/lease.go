package sim

import (
	"math"
	"time"
)

// lease is what one gateway node knows of one app (lua/tollgate/lease/bucket.lua and
// lease/sync.lua):
// its tokens, pending consumption, reserve target and the upkeep state of worker 0's tick.
type lease struct {
	tokens       int64
	pendingCost  int64
	pendingCount int64
	reported     int64
	giveBack     int64 // cut by an emergency, returned with the next report

	joined     bool    // a grant has put tokens in it: worker 0's tick visits it (lease/active.lua)
	tracked    bool    // the tick keeps its rate (lease/sync.lua state[app])
	targetSet  bool    // a tick has computed its target (the dict's target key)
	target     int64   // the tick's target
	rate       float64 // EWMA of the node's consumption, tokens/s
	lastTotal  int64
	lastActive int64 // virtual µs
	lastReport int64

	scarceUntil int64
	negUntil    int64
	negReason   string
	nodes       int64 // active nodes of the app, from the last grant
	nodesUntil  int64 // virtual µs the node remembers that count until (0: never had one)

	seq       int64
	refilling bool // an asynchronous refill is in flight
}

// knowsNodes is whether the node remembers how many nodes share the app (the dict's nodes
// key, kept NodesFor after each grant): if not, its next grant asks for no reserve.
func (l *lease) knowsNodes(now int64) bool { return l.nodesUntil > now }

// nodesOr1 is the app's active nodes as the node's tick reads them (1 when it does not know).
func (l *lease) nodesOr1(now int64) int64 {
	if l.knowsNodes(now) && l.nodes > 0 {
		return l.nodes
	}
	return 1
}

// reserve is lease/bucket.lua target_of(): the tick's target, or before the first tick the
// minimum target capped at a fair share of the burst among the nodes the node knows of.
func (l *lease) reserve(g Gateway, burst, now int64) int64 {
	if l.targetSet {
		return l.target
	}
	share := float64(burst) / float64(2*l.nodesOr1(now))
	return int64(math.Min(float64(g.MinTarget), math.Floor(share)))
}

// targetOf is lease/sync.lua's target(): ~TargetHorizon of the node's traffic, at least MinTarget
// unless L2 is scarce, at most a fair share of the burst among the active nodes and MaxTarget.
func targetOf(g Gateway, rate float64, scarce bool, burst, nodes int64) int64 {
	t := rate * g.TargetHorizon
	if !scarce && t < float64(g.MinTarget) {
		t = float64(g.MinTarget)
	}
	if nodes < 1 {
		nodes = 1
	}
	t = math.Min(t, float64(burst)/float64(2*nodes))
	t = math.Min(t, float64(g.MaxTarget))
	return int64(math.Max(1, math.Floor(t)))
}

// negTTL is the negative-cache time of lease/bucket.lua exhausted(): the time L2 needs to refill
// the deficit at its rate, clamped.
func negTTL(g Gateway, deficit int64, rateMilli int64) time.Duration {
	secs := 60.0
	if deficit <= 0 {
		secs = 0
	} else if rateMilli > 0 {
		secs = float64(deficit) / (float64(rateMilli) / 1000)
	}
	d := time.Duration(secs * float64(time.Second))
	return max(g.NegCacheMin, min(g.NegCacheMax, d))
}
