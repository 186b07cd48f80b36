package main

import (
	"testing"
	"time"
)

// constant is a series offering `rate` tokens/s for n slots.
func constant(rate float64, n int) []int64 {
	out := make([]int64, n)
	var due float64
	for i := range out {
		due += rate * slot.Seconds() / reqCost
		k := int64(due)
		due -= float64(k)
		out[i] = k * reqCost
	}
	return out
}

// The ideal bucket admits guarantee × duration + burst of a demand above the guarantee, and all
// of a demand below it.
func TestIdealBucket(t *testing.T) {
	a := appSpec{g: 100, burst: 200}
	n := int(10 * time.Second / slot)
	over := sum(idealOf(a, constant(150, n)))
	if over < 1190 || over > 1200 {
		t.Fatalf("ideal of 1.5x demand over 10 s = %d, want 100 × 10 + 200 = 1200", over)
	}
	under := constant(50, n)
	if got := sum(idealOf(a, under)); got != sum(under) {
		t.Fatalf("ideal of 0.5x demand = %d, want all %d", got, sum(under))
	}
}

// Convergence reads 0 for an app that tracks the ideal rate (whatever offset it had before the
// shift, with jitter below ε), about the lag for an app that admits nothing for a while, and overshoot and
// utilisation follow the admitted cost.
func TestConvergenceAndFigures(t *testing.T) {
	w := &workload{scenario: "c", nodes: 4, primary: 0.9, dur: 20 * time.Second, shiftPer: 10 * time.Second,
		apps: []appSpec{{id: "a", g: 100, burst: 200, demand: 1.5}, {id: "b", g: 100, burst: 200, demand: 1.5}}}
	n := int(w.dur / slot)
	offered := constant(150, n)
	ideal := idealOf(w.apps[0], offered)
	tracking := append([]int64(nil), ideal...)
	from := int(w.shiftPer / slot)
	tracking[from-5] -= 20 // an offset before the shift
	tracking[from+30] -= 4 // and jitter below ε after it
	lagging := append([]int64(nil), ideal...)
	lag := int(700 * time.Millisecond / slot)
	for i := from; i < from+lag; i++ {
		lagging[i] = 0
	}
	s := []series{{offered: offered, admitted: tracking}, {offered: offered, admitted: lagging}}
	at := [][2]int{{0, from}, {1, from}}
	c := convergence(w, s, [][]int64{ideal, ideal}, at)
	if c[0] != 0 {
		t.Fatalf("an app tracking the ideal rate converged after %.2f s, want 0", c[0])
	}
	if c[1] < 0.6 || c[1] > 0.8 {
		t.Fatalf("an app admitting nothing for 0.7 s converged after %.2f s, want ~0.7", c[1])
	}
	f := compute(w, s)
	if f.Overshoot != 0 || f.WorstUtil >= 98 || f.WorstUtil < 90 {
		t.Fatalf("figures %+v: want no overshoot and the lagging app's utilisation in [90, 98)", f)
	}
	s[0].admitted = append([]int64(nil), offered...) // admits all it is offered: 50 % over
	if f := compute(w, s); f.WorstOvershoot < 30 {
		t.Fatalf("an app admitting all of 1.5x its guarantee for 20 s: worst overshoot %.1f %%, want > 30 (3000 over 2200)", f.WorstOvershoot)
	}
}
