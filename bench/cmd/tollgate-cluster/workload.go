package main

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// reqCost is what one benchmark request costs: a GET of the 1 KiB object is C_base(GET) = 1 at
// access plus ceil(1024 / 65536) × C_bw = 1 of bandwidth settled in the log phase.
const reqCost = 2

// slot is the resolution of the recorded series and of the ideal bucket.
const slot = 10 * time.Millisecond

// appSpec is one app of the workload: its configuration and its demand, in tokens/s.
type appSpec struct {
	id     string
	g      int64   // guaranteed quota, tokens/s
	burst  int64   // burst quota, tokens
	demand float64 // mean demand / g while running
}

// workload is what the load generator and the simulator both drive: per app, node and time,
// the demand in tokens/s.
type workload struct {
	scenario string
	nodes    int
	apps     []appSpec
	primary  float64 // share of an app's traffic on its primary node (1/nodes: even)
	dur      time.Duration
	shiftPer time.Duration // scenario c: a share of the apps moves or stops/starts every shiftPer

	// scenario d: node 0 is down in [killAt, upAt) (the load balancer sends its share to node 1)
	killAt, upAt time.Duration
	down         atomic.Bool // set by the runner while node 0 is really down
}

// scenarios, in the order of a sweep.
var scenarioNames = []string{"a", "b90", "b99", "c", "d", "e3", "e05"}

func scenarioLabel(s string) string {
	switch s {
	case "a":
		return "(a) even split"
	case "b90":
		return "(b) 90/10 split"
	case "b99":
		return "(b) 99/1 split"
	case "c":
		return "(c) apps move/stop every 10 s (90/10)"
	case "d":
		return "(d) node killed -9 and restarted (90/10)"
	case "e3":
		return "(e) demand 3x guarantee (90/10)"
	case "e05":
		return "(e) demand 0.5x guarantee (90/10)"
	}
	return s
}

// newWorkload builds the M apps: guarantees 1:2:3:4 repeating, burst 2 × guarantee, and demand
// alternating 1.5× and 0.5× the guarantee (scenario e: 3× or 0.5× for all), scaled so that the
// whole cluster is asked for `reqs` requests per second.
func newWorkload(scenario, split string, nodes, apps int, reqs float64, dur time.Duration) (*workload, error) {
	w := &workload{scenario: scenario, nodes: nodes, dur: dur, shiftPer: 10 * time.Second}
	if split == "" {
		split = "90/10"
		switch scenario {
		case "a":
			split = "50/50"
		case "b99":
			split = "99/1"
		}
	}
	switch split {
	case "50/50":
		w.primary = 1 / float64(nodes)
	case "90/10":
		w.primary = 0.9
	case "99/1":
		w.primary = 0.99
	default:
		return nil, fmt.Errorf("-split %q: want 50/50, 90/10 or 99/1", split)
	}
	if scenario == "d" {
		w.killAt, w.upAt = dur*2/5, dur*3/5
	}
	weights := make([]float64, apps)
	var sum float64
	for i := range weights {
		m := 1.5
		if i%2 == 1 {
			m = 0.5
		}
		switch scenario {
		case "e3":
			m = 3
		case "e05":
			m = 0.5
		}
		weights[i] = m
		sum += float64(1+i%4) * m
	}
	// Σ g_i × m_i = reqs × reqCost
	unit := reqs * reqCost / sum
	for i := 0; i < apps; i++ {
		g := int64(math.Max(1, math.Round(unit*float64(1+i%4))))
		w.apps = append(w.apps, appSpec{id: fmt.Sprintf("app%02d", i), g: g, burst: 2 * g, demand: weights[i]})
	}
	return w, nil
}

// splitName is how the workload splits an app over the nodes.
func (w *workload) splitName() string {
	switch {
	case w.primary == 0.9:
		return "90/10"
	case w.primary == 0.99:
		return "99/1"
	}
	return "even"
}

// epoch of scenario c at virtual second t.
func (w *workload) epoch(t float64) int {
	if w.scenario != "c" {
		return 0
	}
	return int(t / w.shiftPer.Seconds())
}

// moved reports whether app i moves its primary node at the start of epoch e (scenario c).
func moved(i, e int) bool { return e > 0 && (i+e)%4 == 0 }

// stopped reports whether app i is stopped during epoch e (scenario c).
func stopped(i, e int) bool { return e > 0 && (i+e)%4 == 2 }

// primaryOf is app i's primary node in epoch e.
func (w *workload) primaryOf(i, e int) int {
	p := i % w.nodes
	step := max(1, w.nodes/2)
	for x := 1; x <= e; x++ {
		if moved(i, x) {
			p = (p + step) % w.nodes
		}
	}
	return p
}

// rate is app i's demand on node n at virtual second t (tokens/s); nodeDown says whether node 0
// is down (its share then goes to node 1: the load balancer fails over).
func (w *workload) rate(i, n int, t float64, nodeDown bool) float64 {
	e := w.epoch(t)
	if stopped(i, e) {
		return 0
	}
	a := w.apps[i]
	total := float64(a.g) * a.demand
	share := func(n int) float64 {
		if w.primary*float64(w.nodes) <= 1+1e-9 {
			return 1 / float64(w.nodes)
		}
		if n == w.primaryOf(i, e) {
			return w.primary
		}
		return (1 - w.primary) / float64(w.nodes-1)
	}
	if nodeDown {
		switch n {
		case 0:
			return 0
		case 1 % w.nodes:
			return total * (share(0) + share(n))
		}
	}
	return total * share(n)
}

// downAt is whether node 0 is down at virtual second t by the schedule (the simulator's view).
func (w *workload) downAt(t float64) bool {
	return w.killAt > 0 && t >= w.killAt.Seconds() && t < w.upAt.Seconds()
}

// shifts are the (app, slot) pairs whose load changed at an epoch start (moved, or started
// again after a stop), and the control pairs whose load did not change at all.
func (w *workload) shifts() (changed, control [][2]int) {
	if w.scenario != "c" {
		return nil, nil
	}
	per := int(w.shiftPer / slot)
	for e := 1; e*per < int(w.dur/slot); e++ {
		for i := range w.apps {
			switch {
			case stopped(i, e):
			case moved(i, e) || stopped(i, e-1):
				changed = append(changed, [2]int{i, e * per})
			case !stopped(i, e-1) && w.primary*float64(w.nodes) > 1:
				control = append(control, [2]int{i, e * per})
			}
		}
	}
	return changed, control
}
