package sim

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"
)

func pct(v float64) string { return fmt.Sprintf("%.2f %%", 100*v) }

// Print writes the result as a Markdown table with the goals of the issue.
func (r *Result) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "tollgate-sim: %d nodes x %d apps (%d active), %s virtual in steps of %s, seed %d, capacity %d tokens/s (%.0f %% guaranteed)\n",
		c.Nodes, c.Apps, r.ActiveApps, c.Duration, c.Step, c.Seed, c.Capacity, 100*c.Allocated)
	fmt.Fprintf(w, "scenario: warm-up %s, load shift at %s, node n000 crashes at %s, emergency at %s for %s\n",
		c.Warmup, c.ShiftAt, c.CrashAt, c.EmergencyAt, c.EmergencyFor)
	fmt.Fprintf(w, "wall %s (apps created in %s, simulation %s: %.2f virtual s per s), %d script calls, %d errors\n",
		r.Wall.Round(time.Millisecond), r.SetupWall.Round(time.Millisecond), r.LoopWall.Round(time.Millisecond),
		r.VirtualPerSec, r.Calls, r.Errors)
	vs := c.Duration.Seconds()
	fmt.Fprintf(w, "Redis: %.0f script calls and %.0f commands (inside scripts included) per virtual second; %.2f s of redis-server CPU per virtual second (%.1f µs per script call); used_memory %.1f MB at the end\n\n",
		float64(r.RedisScripts)/vs, float64(r.RedisCommands)/vs, r.RedisCPU.Seconds()/vs,
		float64(r.RedisCPU.Microseconds())/math.Max(1, float64(r.RedisScripts)), float64(r.RedisUsedMemory)/1e6)
	rows := [][3]string{
		{"overshoot, all apps: (admitted - ideal bucket) / ideal", pct(r.OvershootAll), "<= 1 %"},
		{"overshoot, worst app", pct(r.OvershootWorst), "<= 1 %"},
		{fmt.Sprintf("utilisation: admitted / ideal before the shift, %d apps with demand > quota", r.OverQuotaApps), pct(r.Utilisation), ">= 98 %"},
		{"utilisation, worst app / 5th percentile", pct(r.UtilWorst) + " / " + pct(r.UtilP5), ""},
		{"refused where the ideal bucket refused nothing, after warm-up", pct(r.FalseReject), ""},
		{"the same during warm-up", fmt.Sprintf("%d tokens", r.StartRejected), ""},
		{"drift, max over apps and reconciliation windows", pct(r.DriftMax), "< 1 %"},
		{"drift, mean", pct(r.DriftMean), ""},
		{"drift corrections (apps) / L1 corrections", fmt.Sprintf("%d / %d", r.Corrections, r.L1Corrections), ""},
		{"leases reaped (the crashed node and idle ones) / tokens returned", fmt.Sprintf("%d / %d", r.Reaped, r.ReapedTokens), ""},
		{fmt.Sprintf("convergence after the load shift, %d apps: p50 / p95 / max", r.ShiftedApps),
			fmt.Sprintf("%s / %s / %s (%d not within 5 s)", r.ConvergeP50, r.ConvergeP95, r.ConvergeMax, r.NotConverged), ""},
		{fmt.Sprintf("the same measure on %d apps whose traffic did not move: p50 / p95", r.ControlApps),
			fmt.Sprintf("%s / %s", r.ControlP50, r.ControlP95), ""},
		{"emergency enforced on every live node after", r.EmergencyAll.String(), "<= 200 ms"},
		{"P3 cost admitted in the emergency's first second", fmt.Sprint(r.EmergencyP3), ""},
		{"P1/P2 admitted / ideal in the emergency's first second", pct(r.EmergencyP12), ""},
		{"P0 admitted / ideal in the emergency's first second", pct(r.EmergencyP0), ""},
		{"cluster usage, max over overload windows", pct(r.UsageMax), ""},
	}
	fmt.Fprintln(w, "| metric | value | goal |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %s | %s |\n", row[0], row[1], row[2])
	}
	var reasons []string
	for k := range r.Rejected {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	fmt.Fprint(w, "\nrefused requests by reason:")
	for _, k := range reasons {
		fmt.Fprintf(w, " %s=%d", k, r.Rejected[k])
	}
	fmt.Fprintln(w)
}

// Goals lists the goals this result misses (empty when it meets them all).
func (r *Result) Goals() []string {
	var miss []string
	if r.OvershootAll > 0.01 || r.OvershootWorst > 0.01 {
		miss = append(miss, fmt.Sprintf("overshoot %s (worst app %s) > 1 %%", pct(r.OvershootAll), pct(r.OvershootWorst)))
	}
	if r.Utilisation < 0.98 {
		miss = append(miss, fmt.Sprintf("utilisation %s < 98 %%", pct(r.Utilisation)))
	}
	if r.DriftMax >= 0.01 {
		miss = append(miss, fmt.Sprintf("drift %s >= 1 %%", pct(r.DriftMax)))
	}
	if r.Config.EmergencyAt > 0 && (r.EmergencyAll == 0 || r.EmergencyAll > 200*time.Millisecond) {
		miss = append(miss, fmt.Sprintf("emergency took %s on every node", r.EmergencyAll))
	}
	if r.Errors > 0 {
		miss = append(miss, fmt.Sprintf("%d script errors", r.Errors))
	}
	return miss
}
