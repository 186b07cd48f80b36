// Package report turns the benchmark's per-round samples into the result table: medians per
// metric over the rounds, ratios to the plain baseline, the goals of docs/design.md §10, and the
// table as aligned text and as Markdown.
package report

import (
	"math"
	"sort"
	"time"
)

// Sample is one measured run of one variant.
type Sample struct {
	ReqPerSec    float64
	P50, P99     time.Duration
	Requests     int64 // completed requests (wrk)
	Non2xx       int64
	SocketErrors int64
	HasL3        bool // the L3 counters were scraped
	L3Hits       float64
	L3Misses     float64
	HasRedis     bool          // Redis calls were counted
	RedisCalls   int64         // commands Redis executed during the run, including inside scripts
	ScriptCalls  int64         // script invocations (EVALSHA ...) during the run
	NginxCPU     time.Duration // CPU time of the nginx master and workers during the run
	RedisCPU     time.Duration // CPU time of redis-server during the run (when HasRedis)
}

// HitRatio is hits / (hits + misses); NaN when nothing was counted.
func (s Sample) HitRatio() float64 {
	if !s.HasL3 || s.L3Hits+s.L3Misses == 0 {
		return math.NaN()
	}
	return s.L3Hits / (s.L3Hits + s.L3Misses)
}

// CallsPer1000 is Redis commands per 1000 completed requests; NaN when not counted.
func (s Sample) CallsPer1000() float64 { return s.per1000(s.RedisCalls) }

// ScriptsPer1000 is script invocations per 1000 completed requests; NaN when not counted.
func (s Sample) ScriptsPer1000() float64 { return s.per1000(s.ScriptCalls) }

// NginxMicrosPerReq is nginx CPU time per completed request in µs; NaN without requests.
func (s Sample) NginxMicrosPerReq() float64 { return micros(s.NginxCPU, s.Requests) }

// RedisMicrosPerReq is redis-server CPU time per completed request in µs; NaN when not counted.
func (s Sample) RedisMicrosPerReq() float64 {
	if !s.HasRedis {
		return math.NaN()
	}
	return micros(s.RedisCPU, s.Requests)
}

func micros(d time.Duration, requests int64) float64 {
	if requests == 0 {
		return math.NaN()
	}
	return float64(d.Microseconds()) / float64(requests)
}

func (s Sample) per1000(n int64) float64 {
	if !s.HasRedis || s.Requests == 0 {
		return math.NaN()
	}
	return float64(n) / float64(s.Requests) * 1000
}

// Series is every sample of one variant, one per round, in round order.
type Series struct {
	Key, Name string
	Samples   []Sample
}

// Row is one line of the table.
type Row struct {
	Key, Name      string
	ReqPerSec      float64
	P50, P99       time.Duration
	Ratio          float64 // median over rounds of req/s ÷ the baseline's req/s in the same round
	HitRatio       float64 // NaN: not measured
	CallsPer1000   float64 // NaN: not measured
	ScriptsPer1000 float64 // NaN: not measured
	NginxMicros    float64 // nginx CPU µs per request
	RedisMicros    float64 // redis-server CPU µs per request; NaN: not measured
	Requests       int64   // total over rounds
	Non2xx         int64   // total over rounds
	SocketErrors   int64   // total over rounds
}

// Summarize builds one row per series; series[0] is the baseline of the ratio column.
func Summarize(series []Series) []Row {
	rows := make([]Row, 0, len(series))
	for _, s := range series {
		r := Row{Key: s.Key, Name: s.Name,
			ReqPerSec:      median(s.Samples, func(x Sample) float64 { return x.ReqPerSec }),
			P50:            medianDuration(s.Samples, func(x Sample) time.Duration { return x.P50 }),
			P99:            medianDuration(s.Samples, func(x Sample) time.Duration { return x.P99 }),
			HitRatio:       median(s.Samples, Sample.HitRatio),
			CallsPer1000:   median(s.Samples, Sample.CallsPer1000),
			ScriptsPer1000: median(s.Samples, Sample.ScriptsPer1000),
			NginxMicros:    median(s.Samples, Sample.NginxMicrosPerReq),
			RedisMicros:    median(s.Samples, Sample.RedisMicrosPerReq),
		}
		if len(series) > 0 {
			r.Ratio = PairRatio(s, series[0])
		}
		for _, x := range s.Samples {
			r.Requests += x.Requests
			r.Non2xx += x.Non2xx
			r.SocketErrors += x.SocketErrors
		}
		rows = append(rows, r)
	}
	return rows
}

// PairRatio is the median over rounds of num's req/s ÷ den's req/s of the same round (rounds
// interleave the variants, so a pair shares the machine's state of that moment).
func PairRatio(num, den Series) float64 {
	var ratios []float64
	for i := range num.Samples {
		if i < len(den.Samples) && den.Samples[i].ReqPerSec > 0 {
			ratios = append(ratios, num.Samples[i].ReqPerSec/den.Samples[i].ReqPerSec)
		}
	}
	return medianOf(ratios)
}

func median(samples []Sample, f func(Sample) float64) float64 {
	vals := make([]float64, 0, len(samples))
	for _, s := range samples {
		if v := f(s); !math.IsNaN(v) {
			vals = append(vals, v)
		}
	}
	return medianOf(vals)
}

func medianDuration(samples []Sample, f func(Sample) time.Duration) time.Duration {
	return time.Duration(median(samples, func(s Sample) float64 { return float64(f(s)) }))
}

// medianOf is the median of vals (mean of the middle two for an even count), NaN when empty.
func medianOf(vals []float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	v := append([]float64(nil), vals...)
	sort.Float64s(v)
	mid := len(v) / 2
	if len(v)%2 == 1 {
		return v[mid]
	}
	return (v[mid-1] + v[mid]) / 2
}
