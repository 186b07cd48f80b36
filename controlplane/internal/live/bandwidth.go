package live

// bandwidth turns the body byte counters the gateways report per app (docs/rules-contract.md
// §6: `bytes_in`, `bytes_out`, cumulative since the node started, dated by `reported_at`) into
// bytes per second and monotonic totals.
//
//   - Rate: each fresh node's rate of an app is what its counters grew between its last two
//     reports, over the time between them; the app's rate is the sum over the fresh nodes. A
//     node that has not reported since the last collection keeps its rate (nothing new is
//     known); a stale node counts for nothing.
//   - Totals: every growth is added once to the app's total (and the view's), from which the
//     history's series and windows are cut. A node's first report only sets its baseline; a
//     node whose requests_total went back restarted and counts from zero; any counter that went
//     back counts from its new value. A node keeps its baseline while the registry lists it, so
//     that a node stale for a while and back counts the bytes of the gap when it returns.
type bandwidth struct {
	nodes map[string]*bwNode
	apps  map[string]*bytePair // per app: totals while the app is known
	total bytePair
}

type bytePair struct{ in, out int64 }

type bwNode struct {
	at    float64 // when its counters were taken (Unix s)
	req   int64   // its requests_total, -1 if absent
	apps  map[string]NodeAppCounts
	rates map[string][2]float64 // per app: bytes/s in, out over its last report interval
}

func newBandwidth() *bandwidth {
	return &bandwidth{nodes: map[string]*bwNode{}, apps: map[string]*bytePair{}}
}

// observe adds what the nodes of s reported since the last call, and sets the bandwidth
// fields of s (its apps, clusters and totals).
func (b *bandwidth) observe(s *Snapshot) {
	listed := make(map[string]bool, len(s.Nodes))
	known := make(map[string]bool, len(s.Apps))
	for _, a := range s.Apps {
		known[a.ID] = true
	}
	rates := map[string][2]float64{}
	for _, n := range s.Nodes {
		listed[n.NodeID] = true
		if n.Stale {
			continue
		}
		nd := b.node(n)
		for id, r := range nd.rates {
			q := rates[id]
			rates[id] = [2]float64{q[0] + r[0], q[1] + r[1]}
		}
		for id := range n.Apps {
			known[id] = true
		}
	}
	for id := range b.nodes {
		if !listed[id] {
			delete(b.nodes, id) // left the registry: its next report sets a new baseline
		}
	}
	for id := range b.apps {
		if !known[id] {
			delete(b.apps, id)
		}
	}
	byCluster := map[string][2]float64{}
	for i := range s.Apps {
		a := &s.Apps[i]
		r := rates[a.ID]
		a.BytesInRate, a.BytesOutRate = r[0], r[1]
		if t := b.apps[a.ID]; t != nil {
			a.BytesIn, a.BytesOut = t.in, t.out
		}
		q := byCluster[a.Cluster]
		byCluster[a.Cluster] = [2]float64{q[0] + r[0], q[1] + r[1]}
	}
	for i := range s.Clusters {
		c := &s.Clusters[i]
		c.BytesInRate, c.BytesOutRate = byCluster[c.ID][0], byCluster[c.ID][1]
	}
	s.BytesIn, s.BytesOut = b.total.in, b.total.out
}

// node takes the report of fresh node n: the growth of its counters since its previous report
// goes to the totals, and its rates are set from it.
func (b *bandwidth) node(n Node) *bwNode {
	at := n.ReportedAt
	if at <= 0 {
		at = float64(n.LastSeen)
	}
	req := int64(-1)
	if n.RequestsTotal != nil {
		req = *n.RequestsTotal
	}
	prev := b.nodes[n.NodeID]
	if prev == nil {
		nd := &bwNode{at: at, req: req, apps: n.Apps, rates: map[string][2]float64{}}
		b.nodes[n.NodeID] = nd
		return nd
	}
	dt := at - prev.at
	if dt <= 0 {
		return prev // the same report as before (or an older one): nothing new
	}
	base := prev.apps
	if req >= 0 && prev.req >= 0 && req < prev.req {
		base = nil // the node restarted: its counters start from zero
	}
	nd := &bwNode{at: at, req: req, apps: n.Apps, rates: make(map[string][2]float64, len(n.Apps))}
	for id, c := range n.Apps {
		p := base[id]
		din, dout := inc(p.BytesIn, c.BytesIn), inc(p.BytesOut, c.BytesOut)
		if din == 0 && dout == 0 {
			continue
		}
		t := b.apps[id]
		if t == nil {
			t = &bytePair{}
			b.apps[id] = t
		}
		t.in, t.out = t.in+din, t.out+dout
		b.total.in, b.total.out = b.total.in+din, b.total.out+dout
		nd.rates[id] = [2]float64{float64(din) / dt, float64(dout) / dt}
	}
	b.nodes[n.NodeID] = nd
	return nd
}
