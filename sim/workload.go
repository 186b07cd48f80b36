package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// app is one simulated application: its config, demand shape, the nodes carrying its traffic,
// its leases there, its ideal bucket and its counters.
type app struct {
	id    string
	idx   int
	g     int64 // guaranteed quota, tokens/s
	burst int64
	prio  int
	cost  int64 // cost of each of its requests

	load   float64 // mean demand / g
	period float64 // on/off period in seconds
	phase  float64 // offset of the period

	nodes   []int     // node indexes carrying its traffic
	share   []float64 // share of the demand per node (parallel to nodes)
	leases  []lease   // parallel to nodes
	active  bool      // carries traffic (Config.Active)
	shifted bool      // takes part in the load shift
	control bool      // like the shifted apps, but its traffic stays put

	ideal ideal
	m     appMetrics
	due   []float64 // Custom: requests accumulated per node and not yet sent
}

var costs = []int64{1, 1, 3, 6, 17}

// workload builds the apps: Zipf-skewed quotas summing to Allocated x Capacity, 40 % of apps
// under their quota, 40 % at 1.5x and 20 % at 3x, on/off bursts, each app spread over a number of
// nodes that falls with its rank, with a skewed share per node.
func workload(c Config, rng *rand.Rand) []*app {
	if c.Custom != nil {
		return customWorkload(c)
	}
	w := make([]float64, c.Apps)
	var sum float64
	for i := range w {
		w[i] = 1 / math.Pow(float64(i+1), 1.0)
		sum += w[i]
	}
	total := c.Allocated * float64(c.Capacity)
	apps := make([]*app, c.Apps)
	activeN := c.activeApps()
	for i := range apps {
		g := int64(math.Max(1, math.Floor(total*w[i]/sum)))
		a := &app{id: appID(i), idx: i, g: g, burst: 2 * g, prio: i % 4,
			cost: costs[rng.IntN(len(costs))], period: 1 + 3*rng.Float64(), phase: rng.Float64()}
		switch r := rng.Float64(); {
		case r < 0.4:
			a.load = 0.5
		case r < 0.8:
			a.load = 1.5
		default:
			a.load = 3
		}
		n := int(math.Round(float64(c.Nodes) / math.Sqrt(float64(i+1))))
		n = max(1, min(c.Nodes, n))
		start := rng.IntN(c.Nodes)
		a.active = i < activeN
		if !a.active && !c.ScanAll {
			n = 0 // an idle app holds no lease anywhere
		}
		for j := 0; j < n; j++ {
			a.nodes = append(a.nodes, (start+j)%c.Nodes)
			a.share = append(a.share, 1/math.Sqrt(float64(j+1)))
		}
		normalize(a.share)
		a.leases = make([]lease, n)
		a.shifted = a.active && n >= 2 && a.load > 1 && i%2 == 0
		a.control = a.active && n >= 2 && a.load > 1 && i%2 == 1
		apps[i] = a
	}
	return apps
}

func normalize(v []float64) {
	var s float64
	for _, x := range v {
		s += x
	}
	if s == 0 {
		return
	}
	for i := range v {
		v[i] /= s
	}
}

// rate is the app's demand in tokens/s at virtual second t: on/off bursts around its mean
// (1.3x for 70 % of each period, 0.3x for the rest).
func (a *app) rate(t float64) float64 {
	if !a.active {
		return 0
	}
	x := math.Mod(t/a.period+a.phase, 1)
	m := 1.3
	if x >= 0.7 {
		m = 0.3
	}
	return float64(a.g) * a.load * m
}

// shift moves the app's traffic from the first half of its nodes to the second half.
func (a *app) shift() {
	half := len(a.nodes) / 2
	for j := 0; j < half; j++ {
		a.share[j] = 0
	}
	normalize(a.share)
}

// drop removes node n from the app's traffic (a crashed gateway: clients go elsewhere).
func (a *app) drop(n int) {
	for j, x := range a.nodes {
		if x == n {
			a.share[j] = 0
		}
	}
	normalize(a.share)
}

// poisson draws a Poisson count with mean lambda (normal approximation above 30).
func poisson(rng *rand.Rand, lambda float64) int64 {
	if lambda <= 0 {
		return 0
	}
	if lambda > 30 {
		v := math.Round(lambda + math.Sqrt(lambda)*rng.NormFloat64())
		return int64(math.Max(0, v))
	}
	l, k, p := math.Exp(-lambda), int64(0), 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// appID is the id of the app of rank i: app0000…app9999, then app10000….
func appID(i int) string { return fmt.Sprintf("app%04d", i) }

// customWorkload builds the apps of Config.Custom: every app may send to every node.
func customWorkload(c Config) []*app {
	apps := make([]*app, len(c.Custom.Apps))
	for i, ca := range c.Custom.Apps {
		a := &app{id: ca.ID, idx: i, g: ca.G, burst: ca.Burst, cost: c.Custom.Cost, load: 1, active: true}
		for n := 0; n < c.Nodes; n++ {
			a.nodes = append(a.nodes, n)
			a.share = append(a.share, 1/float64(c.Nodes))
		}
		a.leases = make([]lease, c.Nodes)
		a.due = make([]float64, c.Nodes)
		apps[i] = a
	}
	return apps
}
