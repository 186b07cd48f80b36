package report

import (
	"fmt"
	"math"
)

// Thresholds of the goals (docs/design.md §10, the benchmark's brief).
const (
	MinRatioToPlain  = 0.90 // (b) ≥ 0.90 × (a)
	MinHitRatio      = 0.99 // L3 hit ratio of (b)
	MinRatioToRemote = 2.0  // (b) ≥ 2 × (c)
)

// Goal is one checked goal.
type Goal struct {
	Name   string
	Met    bool
	Detail string // the numbers behind the verdict
}

// Goals checks the goals on the series keyed "a" (plain), "b" (tollgate), "c" (remote). When
// the paired measurement ran, it decides (b) ≥ 0.90 × (a): its pairs are seconds apart where
// the rounds' are half a minute, so the machine's drift cancels out of it far better.
func Goals(series []Series, paired Paired) []Goal {
	by := map[string]Series{}
	for _, s := range series {
		by[s.Key] = s
	}
	a, b, c := by["a"], by["b"], by["c"]
	plain := ratioGoal(fmt.Sprintf("(b) ≥ %.2f × (a)", MinRatioToPlain), b, a, MinRatioToPlain)
	if paired.Measured() {
		m := paired.Median()
		q1, q3 := paired.Quartiles()
		plain.Met = m >= MinRatioToPlain
		plain.Detail = fmt.Sprintf("paired median ratio %.3f (quartiles %.3f–%.3f, %d pairs), "+
			"needs ≥ %.2f; rounds: %s", m, q1, q3, len(paired.Ratios()), MinRatioToPlain,
			plain.Detail)
	}
	return []Goal{
		plain,
		hitGoal(b),
		ratioGoal(fmt.Sprintf("(b) ≥ %.0f × (c)", MinRatioToRemote), b, c, MinRatioToRemote),
	}
}

func ratioGoal(name string, num, den Series, min float64) Goal {
	r := PairRatio(num, den)
	if math.IsNaN(r) {
		return Goal{Name: name, Detail: "not measured"}
	}
	rate := func(s Series) float64 { return median(s.Samples, func(x Sample) float64 { return x.ReqPerSec }) }
	return Goal{Name: name, Met: r >= min, Detail: fmt.Sprintf(
		"(%s) %s req/s vs (%s) %s req/s: ratio %.3f (median of per-round ratios), needs ≥ %.2f",
		num.Key, Thousands(rate(num)), den.Key, Thousands(rate(den)), r, min)}
}

func hitGoal(b Series) Goal {
	name := fmt.Sprintf("L3 hit ratio of (b) ≥ %.0f %%", MinHitRatio*100)
	r := median(b.Samples, Sample.HitRatio)
	if math.IsNaN(r) {
		return Goal{Name: name, Detail: "not measured"}
	}
	var hits, misses float64
	for _, s := range b.Samples {
		hits += s.L3Hits
		misses += s.L3Misses
	}
	return Goal{Name: name, Met: r >= MinHitRatio, Detail: fmt.Sprintf(
		"median %s (all rounds: %s hits, %s misses)", Percent(r), Thousands(hits),
		Thousands(misses))}
}
