package live

import (
	"time"
)

// rangeSpans are the ranges of the dashboard (Req 23.7); each keeps seriesPoints points of
// cumulative totals.
func rangeSpans() map[string]time.Duration {
	return map[string]time.Duration{"1h": time.Hour, "6h": 6 * time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour}
}

const seriesPoints = 120

// TimePoint is one point of a time series of the dashboard.
type TimePoint struct {
	Timestamp int64   `json:"timestamp"` // Unix seconds
	Value     float64 `json:"value"`
}

type point struct {
	t              int64 // Unix seconds
	req, cost, rej int64 // cumulative totals: requests, cost, rejected connections
	bin, bout      int64 // body bytes in (uploads) and out (downloads), cumulative
}

// ring keeps the last seriesPoints points at least step seconds apart.
type ring struct {
	step int64
	pts  []point
}

func (r *ring) add(p point) {
	if n := len(r.pts); n > 0 && p.t-r.pts[n-1].t < r.step {
		return
	}
	if len(r.pts) == seriesPoints {
		copy(r.pts, r.pts[1:])
		r.pts = r.pts[:seriesPoints-1]
	}
	r.pts = append(r.pts, p)
}

// series is the history of one total (all apps, or one app) at every range's resolution.
type series struct {
	rings map[string]*ring
	last  point
	moved int64 // Unix seconds of the last point whose counters differ from the one before
}

// longest is the longest range, in seconds.
var longest = func() int64 {
	var l time.Duration
	for _, d := range rangeSpans() {
		l = max(l, d)
	}
	return int64(l / time.Second)
}()

func newSeries() *series {
	s := &series{rings: map[string]*ring{}}
	for name, span := range rangeSpans() {
		s.rings[name] = &ring{step: int64(span/time.Second) / seriesPoints}
	}
	return s
}

func (s *series) add(p point) {
	s.last = p
	for _, r := range s.rings {
		r.add(p)
	}
}

// rates is the request and cost rate per second between consecutive points of a range.
func (s *series) rates(rng string) (req, cost []TimePoint) {
	r := s.rings[rng]
	req, cost = []TimePoint{}, []TimePoint{}
	if r == nil {
		return req, cost
	}
	pts := append(append([]point(nil), r.pts...), s.last)
	for i := 1; i < len(pts); i++ {
		dt := float64(pts[i].t - pts[i-1].t)
		if dt <= 0 {
			continue
		}
		req = append(req, TimePoint{pts[i].t, float64(inc(pts[i-1].req, pts[i].req)) / dt})
		cost = append(cost, TimePoint{pts[i].t, float64(inc(pts[i-1].cost, pts[i].cost)) / dt})
	}
	return req, cost
}

// byteRates is the bandwidth in and out (bytes/s) between consecutive points of a range.
func (s *series) byteRates(rng string) (in, out []TimePoint) {
	r := s.rings[rng]
	in, out = []TimePoint{}, []TimePoint{}
	if r == nil {
		return in, out
	}
	pts := append(append([]point(nil), r.pts...), s.last)
	for i := 1; i < len(pts); i++ {
		dt := float64(pts[i].t - pts[i-1].t)
		if dt <= 0 {
			continue
		}
		in = append(in, TimePoint{pts[i].t, float64(inc(pts[i-1].bin, pts[i].bin)) / dt})
		out = append(out, TimePoint{pts[i].t, float64(inc(pts[i-1].bout, pts[i].bout)) / dt})
	}
	return in, out
}

// within is what was added over the last span (or since the history starts). A counter that
// went back (stats reset, node restart) counts from its new value.
func (s *series) within(rng string) point {
	var out point
	r := s.rings[rng]
	if r == nil || len(r.pts) == 0 {
		return out
	}
	pts := append(append([]point(nil), r.pts...), s.last)
	for i := 1; i < len(pts); i++ {
		out.req += inc(pts[i-1].req, pts[i].req)
		out.cost += inc(pts[i-1].cost, pts[i].cost)
		out.rej += inc(pts[i-1].rej, pts[i].rej)
		out.bin += inc(pts[i-1].bin, pts[i].bin)
		out.bout += inc(pts[i-1].bout, pts[i].bout)
	}
	return out
}

// inc is how much a cumulative counter grew from a to b; one that went back (stats reset, a
// node restarted) counts from zero.
func inc(a, b int64) int64 {
	if b >= a {
		return b - a
	}
	return max(b, 0)
}

// MaxAppSeries caps the apps with a series of their own (about 16 KiB each when full): an app
// gets one when its counters first show traffic, and loses it once they have not moved for the
// longest range (its series would read zero everywhere); at the cap, further apps have no
// series (their history reads zero) until one is dropped. Apps that never had traffic, most of
// a 100,000-app store, cost nothing here.
const MaxAppSeries = 10000

// history is the series of the cluster totals and of the apps with traffic, and the previous
// snapshot (for rates). Only the service's loop writes it, under the service's lock.
type history struct {
	total   *series
	apps    map[string]*series
	prev    *Snapshot
	max     int   // MaxAppSeries unless a test sets it
	skipped int64 // apps with traffic left without a series at the cap
}

func newHistory() *history {
	return &history{total: newSeries(), apps: map[string]*series{}, max: MaxAppSeries}
}

// observe sets the rates of s from the previous snapshot and records its totals.
func (h *history) observe(s *Snapshot) {
	prev := map[string]AppState{}
	dt := 0.0
	if h.prev != nil {
		dt = s.At.Sub(h.prev.At).Seconds()
		for _, a := range h.prev.Apps {
			prev[a.ID] = a
		}
	}
	var req, cost, rej int64
	seen := make(map[string]bool, len(s.Apps))
	for i := range s.Apps {
		a := &s.Apps[i]
		if p, ok := prev[a.ID]; ok && dt > 0 {
			a.RequestRate = float64(inc(p.Requests, a.Requests)) / dt
			a.CostRate = float64(inc(p.Cost, a.Cost)) / dt
		}
		rej += a.ConnRejected
		p := point{t: s.At.Unix(), req: a.Requests, cost: a.Cost, rej: a.ConnRejected, bin: a.BytesIn,
			bout: a.BytesOut}
		sr := h.apps[a.ID]
		switch {
		case sr != nil && (p.req != sr.last.req || p.cost != sr.last.cost || p.rej != sr.last.rej ||
			p.bin != sr.last.bin || p.bout != sr.last.bout):
			sr.moved = p.t
		case sr != nil && p.t-sr.moved > longest:
			continue // idle for the longest range: dropped below
		case sr == nil && p.req == 0 && p.cost == 0 && p.rej == 0 && p.bin == 0 && p.bout == 0:
			continue // no traffic yet
		case sr == nil && len(h.apps) >= h.max:
			h.skipped++
			continue
		case sr == nil:
			sr = newSeries()
			sr.moved = p.t
			h.apps[a.ID] = sr
			if q, ok := prev[a.ID]; ok { // its point before the traffic started
				sr.add(point{t: h.prev.At.Unix(), req: q.Requests, cost: q.Cost, rej: q.ConnRejected,
					bin: q.BytesIn, bout: q.BytesOut})
			} else if h.prev != nil {
				// not in the previous view: its byte totals started from zero since (the other
				// totals are Redis's, counted since before)
				sr.add(point{t: h.prev.At.Unix(), req: p.req, cost: p.cost, rej: p.rej})
			}
		}
		seen[a.ID] = true
		sr.add(p)
	}
	// the totals and the clusters' rates come from the clusters' totals, which the scripts keep
	// for every app (the snapshot holds the active apps only)
	prevCluster := map[string]ClusterState{}
	if h.prev != nil {
		for _, c := range h.prev.Clusters {
			prevCluster[c.ID] = c
		}
	}
	for i := range s.Clusters {
		c := &s.Clusters[i]
		req, cost = req+c.Requests, cost+c.Cost
		if p, ok := prevCluster[c.ID]; ok && dt > 0 {
			c.RequestRate = float64(inc(p.Requests, c.Requests)) / dt
			c.CostRate = float64(inc(p.Cost, c.Cost)) / dt
		}
	}
	for id := range h.apps {
		if !seen[id] {
			delete(h.apps, id)
		}
	}
	h.total.add(point{t: s.At.Unix(), req: req, cost: cost, rej: rej, bin: s.BytesIn, bout: s.BytesOut})
	h.prev = s
}
