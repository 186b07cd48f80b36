package report

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Paired is (b) measured against (a) with both gateways running at once: short wrk runs
// alternating a b, b a, a b, ... so that a machine whose speed drifts (other guests of the
// host, frequency changes) weighs on both alike. A[i] and B[i] are the req/s of pair i.
type Paired struct {
	Slice time.Duration
	A, B  []float64
}

// Measured reports whether there is at least one complete pair.
func (p Paired) Measured() bool { return len(p.Ratios()) > 0 }

// Ratios are B[i] / A[i] of the pairs with a positive A[i].
func (p Paired) Ratios() []float64 {
	var r []float64
	for i := range p.A {
		if i < len(p.B) && p.A[i] > 0 {
			r = append(r, p.B[i]/p.A[i])
		}
	}
	return r
}

// Median is the median ratio of the pairs; NaN when none was measured.
func (p Paired) Median() float64 { return medianOf(p.Ratios()) }

// Quartiles are the 25th and 75th percentiles of the ratios (nearest rank); NaN when none.
func (p Paired) Quartiles() (q1, q3 float64) {
	r := p.Ratios()
	if len(r) == 0 {
		return math.NaN(), math.NaN()
	}
	sort.Float64s(r)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(r)))) - 1
		if i < 0 {
			i = 0
		}
		return r[i]
	}
	return rank(0.25), rank(0.75)
}

// line describes the measurement for the report's footer.
func (p Paired) line() string {
	if !p.Measured() {
		return ""
	}
	q1, q3 := p.Quartiles()
	var sa, sb float64
	for i := range p.Ratios() {
		sa += p.A[i]
		sb += p.B[i]
	}
	return fmt.Sprintf("paired (b)/(a): both gateways up at once, %d pairs of %s wrk runs in "+
		"the order a b, b a, ...: median ratio %.3f (quartiles %.3f–%.3f), %s vs %s req/s on "+
		"average", len(p.Ratios()), p.Slice, p.Median(), q1, q3,
		Thousands(sb/float64(len(p.Ratios()))), Thousands(sa/float64(len(p.Ratios()))))
}
