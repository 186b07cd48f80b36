package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// render is the Markdown table: one column per N, one row per figure.
func render(o options, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# tollgate-scale — %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "One gateway node (%d workers), the control plane binary and redis-server on %d CPUs; "+
		"wrk -t1 -c%d on one app (%s warm-up, then runs of %s); %d API clients; %d changes timed; %d random apps probed.\n\n",
		o.workers, runtime.NumCPU(), o.connections, warmup, o.duration, o.writers, o.changes, o.sample)
	head := []string{"configured apps"}
	for _, r := range rows {
		head = append(head, fmt.Sprintf("%d", r.apps))
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(head)))
	b.WriteString("\n")
	line := func(name string, f func(r row) string) {
		cells := []string{name}
		for _, r := range rows {
			cells = append(cells, f(r))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	line("apps created per second (store, 16 writers)", func(r row) string { return fmt.Sprintf("%.0f", r.createRate) })
	line("fresh node: start → config loaded", func(r row) string { return dur(r.loadTime) })
	line("config_dict", func(r row) string { return r.configDict })
	line("full load under traffic: announcement → loaded", func(r row) string { return dur(r.reloadTime) })
	line("req/s, p99 on one app during that load (non-2xx)", func(r row) string {
		return fmt.Sprintf("%.0f, %s (%d)", r.reloadRPS, dur(r.reloadP99), r.reloadBad)
	})
	line("apps the node knows (of a random sample)", func(r row) string {
		return fmt.Sprintf("%d / %d", r.known, r.sample)
	})
	first := rows[0]
	line(fmt.Sprintf("gateway req/s on one app (median of %d runs; vs %d apps)", o.rounds, first.apps), func(r row) string {
		return fmt.Sprintf("%.0f (%+.1f %%)", r.reqPerSec, pct(r.reqPerSec, first.reqPerSec))
	})
	line(fmt.Sprintf("gateway p99 (median of %d runs; vs %d apps)", o.rounds, first.apps), func(r row) string {
		return fmt.Sprintf("%s (%+.1f %%)", dur(r.p99), pct(float64(r.p99), float64(first.p99)))
	})
	line("refused (non-2xx) during the run", func(r row) string { return fmt.Sprintf("%d", r.refused) })
	line("fail-open admissions during the run", func(r row) string { return fmt.Sprintf("%.0f", r.failOpen) })
	line("API 2xx → enforced on the node, p50", func(r row) string { return dur(r.propP50) })
	line("API 2xx → enforced on the node, max", func(r row) string { return dur(r.propMax) })
	line("changes not enforced within 30 s", func(r row) string { return fmt.Sprintf("%d", r.propLost) })
	line("nginx worker private memory (max)", func(r row) string { return mib(r.workerMem) })
	zoneRows(line)
	line("a shared dict ran full (error.log)", func(r row) string { return fmt.Sprintf("%t", r.zoneFullWarn) })
	line("control plane RSS (after the API phases)", func(r row) string { return mib(r.cpRSS) })
	line("Redis used_memory", func(r row) string { return mib(r.redisMem) })
	line("idle CPU: nginx / Redis / control plane", func(r row) string {
		return fmt.Sprintf("%.0f %% / %.0f %% / %.0f %%", r.idleNginx, r.idleRedis, r.idleCP)
	})
	line("API PUT /apps/{id} p50 / p99 (errors)", func(r row) string {
		return fmt.Sprintf("%s / %s (%d)", dur(r.putP50), dur(r.putP99), r.putErrors)
	})
	line("API GET /apps first page p50 / p99 (errors)", func(r row) string {
		return fmt.Sprintf("%s / %s (%d)", dur(r.listP50), dur(r.listP99), r.listErrors)
	})
	return b.String()
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func pct(v, base float64) float64 {
	if base == 0 {
		return 0
	}
	return 100 * (v - base) / base
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
