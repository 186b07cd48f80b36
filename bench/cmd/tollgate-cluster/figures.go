package main

import (
	"math"
	"sort"
)

// series is what one app was offered and admitted, in tokens per slot.
type series struct {
	offered, admitted []int64
}

// figures are the accuracy figures of one run (real nodes or simulator).
type figures struct {
	Overshoot      float64 `json:"overshoot_pct"`             // Σ admitted over Σ ideal − 1, %
	WorstOvershoot float64 `json:"worst_app_overshoot_pct"`   // max over apps, %
	MeanUtil       float64 `json:"mean_app_utilisation_pct"`  // admitted / min(demand, ideal), mean, %
	WorstUtil      float64 `json:"worst_app_utilisation_pct"` // min over apps, %
	ConvP99        float64 `json:"convergence_p99_s"`         // apps whose load moved (scenario c)
	ConvControlP99 float64 `json:"convergence_control_p99_s"` // apps whose load did not move
	FalseRefusals  int64   `json:"false_refusals"`
	Refusals       int64   `json:"refusals"`
}

// idealOf runs the app's ideal single token bucket (rate g, burst b, full at the start) over the
// offered series: per slot it admits what it holds of what was offered.
func idealOf(a appSpec, offered []int64) []int64 {
	out := make([]int64, len(offered))
	tokens := float64(a.burst)
	per := float64(a.g) * slot.Seconds()
	for i, o := range offered {
		tokens = math.Min(float64(a.burst), tokens+per)
		take := min(o, int64(tokens/reqCost)*reqCost)
		tokens -= float64(take)
		out[i] = take
	}
	return out
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

// compute derives the figures of a run from its series.
func compute(w *workload, s []series) figures {
	var f figures
	var adm, ideal int64
	f.WorstUtil = 100
	var utils []float64
	ideals := make([][]int64, len(s))
	for i, a := range w.apps {
		ideals[i] = idealOf(a, s[i].offered)
		ai, ii, di := sum(s[i].admitted), sum(ideals[i]), sum(s[i].offered)
		adm += ai
		ideal += ii
		if ii > 0 {
			f.WorstOvershoot = math.Max(f.WorstOvershoot, pct(ai, ii))
		}
		if ref := min(di, ii); ref > 0 {
			u := 100 * float64(ai) / float64(ref)
			utils = append(utils, u)
			f.WorstUtil = math.Min(f.WorstUtil, u)
		}
	}
	f.Overshoot = pct(adm, ideal)
	for _, u := range utils {
		f.MeanUtil += u / float64(len(utils))
	}
	changed, control := w.shifts()
	f.ConvP99 = p99(convergence(w, s, ideals, changed))
	f.ConvControlP99 = p99(convergence(w, s, ideals, control))
	return f
}

// pct is the overshoot of a over ideal in %: (a − ideal) / ideal, never below 0.
func pct(a, ideal int64) float64 {
	if ideal <= 0 {
		return 0
	}
	return math.Max(0, 100*float64(a-ideal)/float64(ideal))
}

// convWindow is how long after a shift convergence is judged; convBin is its resolution.
const (
	convWindow = 5e9 // ns
	convBin    = 10  // slots (100 ms)
)

// convergence measures, per (app, shift slot), how long after the shift the app's admitted
// cost stops drifting from its ideal bucket's: with gap(t) = ideal − admitted, cumulated from
// the shift, it is the first 100 ms bin τ from which, until the end of the 5 s window,
// |gap(t) − gap(τ)| ≤ ε + 2 % × guarantee × (t − τ), ε = 100 ms of the app's guarantee + 2
// requests: from τ on the admitted rate stays within 2 % of the ideal rate (the utilisation
// goal), give or take the granularity ε of leases and requests. An app whose admission tracks
// the ideal rate from the start reads 0, whatever offset it started with.
func convergence(w *workload, s []series, ideals [][]int64, at [][2]int) []float64 {
	var out []float64
	bins := int(convWindow / int64(slot) / convBin)
	for _, p := range at {
		i, from := p[0], p[1]
		a := w.apps[i]
		eps := 0.1*float64(a.g) + 2*reqCost
		gap := make([]float64, 0, bins+1)
		var g float64
		gap = append(gap, 0)
		for b := 0; b < bins; b++ {
			for k := 0; k < convBin; k++ {
				x := from + b*convBin + k
				if x >= len(s[i].admitted) {
					break
				}
				g += float64(ideals[i][x] - s[i].admitted[x])
			}
			gap = append(gap, g)
		}
		tau := len(gap) - 1
		for t := len(gap) - 1; t >= 0; t-- {
			ok := true
			for u := t; u < len(gap); u++ {
				slack := 0.02 * float64(a.g) * float64((u-t)*convBin) * slot.Seconds()
				if math.Abs(gap[u]-gap[t]) > eps+slack {
					ok = false
					break
				}
			}
			if !ok {
				break
			}
			tau = t
		}
		out = append(out, float64(tau*convBin)*slot.Seconds())
	}
	return out
}

func p99(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	i := int(math.Ceil(0.99*float64(len(v)))) - 1
	return v[max(0, i)]
}
