package sim

import "math"

// Emergency ratios and the overload factor, as in redis-scripts/_common.lua; the ideal bucket
// follows the same rate schedule as L2 so that any difference is the cost of distribution.
var ratio = [4]float64{1, 0.5, 0.1, 0}

func overloadFactor(prio int, usage float64) float64 {
	if prio <= 0 || usage <= 0.9 {
		return 1
	}
	x := math.Min(1, (usage-0.9)/0.1)
	return 1 - (1-ratio[prio])*x
}

// ideal is a single token bucket per app that sees the app's whole demand at once.
type ideal struct {
	tokens float64
}

// admit refills the bucket for dt seconds at g x factor (capped at cap) and admits up to n
// requests of cost each; it returns the number admitted.
func (b *ideal) admit(g, cap, factor, dt float64, n, cost int64) int64 {
	b.tokens = math.Min(cap, b.tokens+g*factor*dt)
	k := min(n, int64(b.tokens)/cost)
	b.tokens -= float64(k * cost)
	return k
}
