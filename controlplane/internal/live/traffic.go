package live

import "time"

// traffic turns the cumulative counters the gateways report (docs/rules-contract.md §6: requests
// and blocked per app and per node, leaked connection slots per node) into monotonic totals with
// timestamps, so that alerts can ask what happened over a window. A node's counters start at
// zero when it restarts: a node whose requests_total went back counts all its counters from
// zero, any other counter that went back counts from its new value (inc), and the first report
// of a node only sets its baseline (its totals since it started are not new traffic).
type traffic struct {
	nodes map[string]nodeCounters // last counters seen per node
	apps  map[string]*track       // per app: requests, blocked
	total *track                  // all apps: requests, blocked
	leaks map[string]*track       // per node: leaked slots (in req)
	keep  time.Duration           // history of each track
}

type nodeCounters struct {
	req, blk, leaked  int64
	hasTotal, hasLeak bool
	apps              map[string]NodeAppCounts
}

// tally is a pair of monotonic totals.
type tally struct{ req, blk int64 }

type stamp struct {
	t int64 // Unix seconds
	c tally
}

// track is a monotonic total and its recent values, at least trafficStep apart (but for the
// newest), over the last keep (trafficKeep when zero).
type track struct {
	acc  tally
	pts  []stamp
	keep time.Duration
}

// newTraffic keeps keep of history (trafficKeep when zero).
func newTraffic(keep time.Duration) *traffic {
	if keep <= 0 {
		keep = trafficKeep
	}
	return &traffic{nodes: map[string]nodeCounters{}, apps: map[string]*track{}, total: &track{keep: keep},
		leaks: map[string]*track{}, keep: keep}
}

func (tr *track) add(t int64, d tally) {
	tr.acc.req += d.req
	tr.acc.blk += d.blk
	n := len(tr.pts)
	if n >= 2 && tr.pts[n-1].t-tr.pts[n-2].t < int64(trafficStep/time.Second) {
		tr.pts[n-1] = stamp{t, tr.acc}
	} else {
		tr.pts = append(tr.pts, stamp{t, tr.acc})
	}
	keep := tr.keep
	if keep <= 0 {
		keep = trafficKeep
	}
	cut := 0
	for cut < len(tr.pts)-1 && tr.pts[cut+1].t <= t-int64(keep/time.Second) {
		cut++
	}
	if cut > 0 {
		tr.pts = append(tr.pts[:0], tr.pts[cut:]...)
	}
}

// at is the total at time t: the newest point at or before t, else the oldest point (the
// history is shorter than asked). ok is false for an empty track.
func (tr *track) at(t int64) (stamp, bool) {
	if len(tr.pts) == 0 {
		return stamp{}, false
	}
	p := tr.pts[0]
	for _, q := range tr.pts {
		if q.t > t {
			break
		}
		p = q
	}
	return p, true
}

// over is what was added since now-d, and the span in seconds it covers.
func (tr *track) over(now int64, d time.Duration) (tally, int64) {
	p, ok := tr.at(now - int64(d/time.Second))
	if !ok {
		return tally{}, 0
	}
	return tally{tr.acc.req - p.c.req, tr.acc.blk - p.c.blk}, now - p.t
}

// observe records the counters of the fresh nodes of s.
func (t *traffic) observe(s *Snapshot) {
	now := s.At.Unix()
	var total tally
	apps := map[string]tally{}
	leaks := map[string]int64{}
	seen := map[string]bool{}
	for _, n := range s.Nodes {
		if n.Stale {
			continue
		}
		seen[n.NodeID] = true
		cur := nodeCounters{apps: n.Apps}
		if n.RequestsTotal != nil && n.BlockedTotal != nil {
			cur.req, cur.blk, cur.hasTotal = *n.RequestsTotal, *n.BlockedTotal, true
		}
		if n.ConnLeakedTotal != nil {
			cur.leaked, cur.hasLeak = *n.ConnLeakedTotal, true
		}
		prev, known := t.nodes[n.NodeID]
		t.nodes[n.NodeID] = cur
		if !known {
			continue
		}
		restarted := cur.hasTotal && prev.hasTotal && cur.req < prev.req
		if restarted {
			prev = nodeCounters{}
		}
		if cur.hasTotal && (prev.hasTotal || restarted) {
			total.req += inc(prev.req, cur.req)
			total.blk += inc(prev.blk, cur.blk)
		}
		for id, c := range cur.apps {
			p := prev.apps[id]
			a := apps[id]
			apps[id] = tally{a.req + inc(p.Requests, c.Requests), a.blk + inc(p.Blocked, c.Blocked)}
		}
		if cur.hasLeak && (prev.hasLeak || restarted) {
			leaks[n.NodeID] += inc(prev.leaked, cur.leaked)
		}
	}
	for id := range t.nodes {
		if !seen[id] {
			delete(t.nodes, id) // gone or stale: its next report sets a new baseline
		}
	}
	t.total.add(now, total)
	// an app is tracked while it is active (in the snapshot) or fresh nodes report counters of it
	// (an app whose requests are all refused before its lease never reaches the active set)
	known := make(map[string]bool, len(s.Apps))
	for _, a := range s.Apps {
		known[a.ID] = true
	}
	for _, n := range s.Nodes {
		if !n.Stale {
			for id := range n.Apps {
				known[id] = true
			}
		}
	}
	for id := range known {
		tr := t.apps[id]
		if tr == nil {
			tr = &track{keep: t.keep}
			t.apps[id] = tr
		}
		tr.add(now, apps[id])
	}
	for id := range t.apps {
		if !known[id] {
			delete(t.apps, id)
		}
	}
	for id := range t.leaks {
		if !seen[id] {
			delete(t.leaks, id)
		}
	}
	for id := range seen {
		tr := t.leaks[id]
		if tr == nil {
			tr = &track{keep: t.keep}
			t.leaks[id] = tr
		}
		tr.add(now, tally{req: leaks[id]})
	}
}
