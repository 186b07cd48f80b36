package report

import (
	"math"
	"strings"
	"testing"
	"time"
)

func sample(rps float64, hits, misses float64, calls, reqs int64) Sample {
	return Sample{ReqPerSec: rps, P50: time.Millisecond, P99: 4 * time.Millisecond,
		Requests: reqs, HasL3: hits+misses > 0, L3Hits: hits, L3Misses: misses,
		HasRedis: calls >= 0, RedisCalls: calls, NginxCPU: time.Duration(reqs) * 20 * time.Microsecond}
}

func series() []Series {
	return []Series{
		{Key: "a", Name: "plain", Samples: []Sample{
			sample(100, 0, 0, -1, 1000), sample(110, 0, 0, -1, 1100), sample(90, 0, 0, -1, 900)}},
		{Key: "b", Name: "tollgate", Samples: []Sample{
			sample(95, 999, 1, 2, 950), sample(100, 995, 5, 2, 1000), sample(80, 990, 10, 2, 800)}},
		{Key: "c", Name: "redis-per-request", Samples: []Sample{
			sample(40, 0, 0, 400, 400), sample(45, 0, 0, 450, 450), sample(35, 0, 0, 350, 350)}},
	}
}

func TestSummarizeTakesMediansAndPairedRatios(t *testing.T) {
	rows := Summarize(series())
	if rows[0].ReqPerSec != 100 || rows[1].ReqPerSec != 95 {
		t.Fatalf("median req/s = %v, %v; want 100, 95", rows[0].ReqPerSec, rows[1].ReqPerSec)
	}
	// per-round ratios of (b): 0.95, 0.909, 0.889 -> median 0.909
	if math.Abs(rows[1].Ratio-100.0/110) > 1e-9 {
		t.Errorf("ratio of (b) = %v, want %v", rows[1].Ratio, 100.0/110)
	}
	if rows[1].HitRatio != 0.995 {
		t.Errorf("hit ratio of (b) = %v, want 0.995", rows[1].HitRatio)
	}
	if !math.IsNaN(rows[0].HitRatio) || !math.IsNaN(rows[0].CallsPer1000) {
		t.Errorf("(a) has no L3 or Redis numbers, got %v, %v", rows[0].HitRatio,
			rows[0].CallsPer1000)
	}
	if rows[2].CallsPer1000 != 1000 {
		t.Errorf("calls/1000 of (c) = %v, want 1000", rows[2].CallsPer1000)
	}
}

func TestGoals(t *testing.T) {
	g := Goals(series(), Paired{})
	if len(g) != 3 {
		t.Fatalf("%d goals, want 3", len(g))
	}
	if !g[0].Met || !g[1].Met || !g[2].Met {
		t.Errorf("goals = %+v; want all met (0.909 ≥ 0.9, 99.5 %% ≥ 99 %%, 2.29 ≥ 2)", g)
	}
	s := series()
	s[1].Samples[1].ReqPerSec = 90 // per-round ratios 0.95, 0.818, 0.889 -> 0.889
	if g := Goals(s, Paired{}); g[0].Met {
		t.Errorf("goal (b) ≥ 0.9 (a) met with ratio 0.889: %+v", g[0])
	}
	if g := Goals(s[:1], Paired{}); g[1].Met || g[1].Detail != "not measured" {
		t.Errorf("hit goal without (b) = %+v, want not measured", g[1])
	}
}

func TestPairedDecidesThePlainGoal(t *testing.T) {
	// the rounds say 0.909 (met); the pairs, 0.80 0.85 0.88 0.95 -> median 0.865 (not met)
	p := Paired{Slice: 2 * time.Second, A: []float64{100, 100, 100, 100}, B: []float64{80, 88, 95, 85}}
	if m := p.Median(); math.Abs(m-0.865) > 1e-9 {
		t.Fatalf("median = %v, want 0.865", m)
	}
	if q1, q3 := p.Quartiles(); q1 != 0.80 || q3 != 0.88 {
		t.Errorf("quartiles = %v, %v; want 0.80, 0.88", q1, q3)
	}
	g := Goals(series(), p)
	if g[0].Met || !strings.Contains(g[0].Detail, "paired median ratio 0.865") ||
		!strings.Contains(g[0].Detail, "median of per-round ratios") {
		t.Errorf("plain goal = %+v, want not met on the paired median, rounds still shown", g[0])
	}
	p.B = []float64{95, 91, 89, 92} // 0.89 0.91 0.92 0.95 -> 0.915
	if g := Goals(series(), p); !g[0].Met {
		t.Errorf("plain goal = %+v, want met at paired median 0.915", g[0])
	}
	r := New(Meta{Date: time.Unix(0, 0).UTC(), CPUs: 2, Rounds: 3}, series(), p)
	if !strings.Contains(r.Text(), "paired (b)/(a): both gateways up at once, 4 pairs of 2s") ||
		!strings.Contains(r.Text(), "92 vs 100 req/s") {
		t.Errorf("report lacks the paired line:\n%s", r.Text())
	}
	if (Paired{A: []float64{0}, B: []float64{5}}).Measured() {
		t.Error("a pair with no (a) requests counts as measured")
	}
}

func TestReportShowsWarningsAndVerdicts(t *testing.T) {
	s := series()
	s[2].Samples[0].Non2xx = 7
	r := New(Meta{Date: time.Unix(0, 0).UTC(), CPUs: 2, Rounds: 3}, s, Paired{})
	for _, out := range []string{r.Text(), r.Markdown()} {
		for _, want := range []string{"(b) tollgate", "WARNING: (c) redis-per-request answered 7",
			"goal (b) ≥ 0.90 × (a): met", "99.500 %", "relative to (a): (b) 1.00×", " 20.0 "} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
	}
}

func TestFormatting(t *testing.T) {
	cases := map[string]string{
		Thousands(1234567.4):             "1,234,567",
		Thousands(999):                   "999",
		Thousands(math.NaN()):            "—",
		Latency(850 * time.Microsecond):  "850µs",
		Latency(2040 * time.Microsecond): "2.04ms",
		Percent(0.99954):                 "99.954 %",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestSummarizeRulesPairsEachRoundWithItsRunWithoutRules(t *testing.T) {
	run := func(rps float64, non2xx int64) Sample {
		return Sample{ReqPerSec: rps, P50: time.Millisecond, P99: 3 * time.Millisecond,
			Requests: int64(rps) * 5, Non2xx: non2xx}
	}
	// round 2 ran on a machine a third slower: its ratios still compare like with like
	runs := [][]Sample{
		{run(300, 0), run(200, 0), run(310, 0)},
		{run(270, 0), run(190, 1), run(300, 0)}, // 0.900 0.950 0.968 -> 0.950
		{run(240, 0), run(150, 0), run(217, 0)}, // 0.800 0.750 0.700 -> 0.750
	}
	rows := SummarizeRules([]int{0, 10, 100}, "mix", runs)
	if len(rows) != 3 || rows[0].Mix != "-" || rows[1].Mix != "mix" || rows[2].Rules != 100 {
		t.Fatalf("rows = %+v", rows)
	}
	if rows[0].Ratio != 1 || math.Abs(rows[1].Ratio-0.95) > 1e-9 || math.Abs(rows[2].Ratio-0.75) > 1e-9 {
		t.Errorf("ratios = %v %v %v, want 1, 0.95, 0.75", rows[0].Ratio, rows[1].Ratio, rows[2].Ratio)
	}
	if rows[1].ReqPerSec != 270 || rows[1].Non2xx != 1 || rows[1].Requests != (270+190+300)*5 {
		t.Errorf("row of 10 rules = %+v, want median 270 req/s, 1 non-2xx, all requests", rows[1])
	}
}
