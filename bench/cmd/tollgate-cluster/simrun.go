package main

import (
	"context"

	"tollgate/sim"
)

// simulate runs the workload on the simulator (sim/): the same apps, the same deterministic
// demand per app, node and 10 ms step, node 0 down in the same interval, the control plane's
// reconciliation and reaping intervals of the real run, and computes the same figures.
func simulate(ctx context.Context, w *workload, o options) (figures, error) {
	c := sim.Default()
	c.Nodes, c.Apps, c.Duration, c.Step = w.nodes, len(w.apps), w.dur, slot
	c.Warmup, c.ShiftAt, c.CrashAt, c.EmergencyAt = 0, 0, 0, 0
	c.ReconcileEvery, c.ReapAfter = o.reconcile, o.reapAfter
	var sumG int64
	cu := &sim.Custom{Cost: reqCost}
	for _, a := range w.apps {
		cu.Apps = append(cu.Apps, sim.CustomApp{ID: a.id, G: a.g, Burst: a.burst})
		sumG += a.g
	}
	c.Capacity = max(1_000_000, 10*sumG)
	c.Allocated = float64(sumG) / float64(c.Capacity)
	cu.Rate = func(a, n int, t float64) float64 { return w.rate(a, n, t, w.downAt(t)) }
	cu.Down = func(n int, t float64) bool { return n == 0 && w.downAt(t) }
	c.Custom = cu
	res, err := sim.Run(ctx, c, nil)
	if err != nil {
		return figures{}, err
	}
	ser := make([]series, len(w.apps))
	for i, s := range res.Series {
		ser[i] = series{offered: s.Offered, admitted: s.Admitted}
	}
	f := compute(w, ser)
	for _, n := range res.Rejected {
		f.Refusals += n
	}
	return f, nil
}
