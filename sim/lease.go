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

	target     int64
	rate       float64 // EWMA of the node's consumption, tokens/s
	lastTotal  int64
	lastActive int64 // virtual µs
	lastReport int64
	started    bool

	scarceUntil int64
	negUntil    int64
	negReason   string
	nodes       int64 // active nodes of the app, from the last grant

	seq       int64
	refilling bool // an asynchronous refill is in flight
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
