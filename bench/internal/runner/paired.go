package runner

import (
	"context"
	"fmt"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/report"
	"tollgate/bench/internal/wrk"
)

// paired measures (b) against (a) with both gateways up at once: cfg.Pairs pairs of
// cfg.Slice wrk runs in the order a b, b a, a b, ... (report.Paired). On this kind of shared
// machine the speed of one 10 s run differs from the next by up to a fifth; runs seconds apart
// in alternating order share most of that drift, which then divides out of each pair's ratio.
func (e *env) paired(ctx context.Context) (report.Paired, error) {
	p := report.Paired{Slice: e.cfg.Slice}
	if e.cfg.Pairs == 0 {
		return p, nil
	}
	var nodes [2]*nginxenv.Node
	for i, v := range nginxenv.Variants()[:2] { // (a) plain, (b) tollgate
		node, err := e.start(ctx, v, v.Key+"-"+v.Name+"-paired", "bench-paired-"+v.Name)
		if err != nil {
			return p, err
		}
		defer node.Stop()
		nodes[i] = node
		e.progress("paired %s: nginx pid %d on %s, warm-up %s", v.Label(), node.PID(),
			node.BaseURL, e.cfg.Warmup)
		if _, err := wrk.Run(ctx, e.wrkOptions(node, e.cfg.Warmup)); err != nil {
			return p, err
		}
	}
	for i := 0; i < e.cfg.Pairs; i++ {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		var rate [2]float64
		for _, j := range order {
			res, err := wrk.Run(ctx, e.wrkOptions(nodes[j], e.cfg.Slice))
			if err != nil {
				return p, err
			}
			if res.Non2xx > 0 || res.SocketErrors > 0 {
				return p, fmt.Errorf("paired %s: %d non-2xx responses, %d socket errors: not an "+
					"overhead measurement", nodes[j].Variant.Label(), res.Non2xx, res.SocketErrors)
			}
			rate[j] = res.ReqPerSec
		}
		p.A, p.B = append(p.A, rate[0]), append(p.B, rate[1])
		e.progress("paired %d/%d: (a) %s req/s, (b) %s req/s, ratio %.3f", i+1, e.cfg.Pairs,
			report.Thousands(rate[0]), report.Thousands(rate[1]), rate[1]/rate[0])
	}
	return p, nil
}
