package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Meta describes the machine and the load of a run.
type Meta struct {
	Date        time.Time
	CPUs        int
	CPUModel    string
	Nginx       string
	Redis       string
	Wrk         string
	Threads     int
	Connections int
	Duration    time.Duration
	Warmup      time.Duration
	Rounds      int
	LoadStart   string   // load average (1, 5, 15 min) when the run began
	LoadEnd     string   // and when it ended
	Env         []string // TOLLGATE_* settings inherited from the environment
}

// Report is a finished benchmark.
type Report struct {
	Meta   Meta
	Rows   []Row
	Goals  []Goal
	Rules  []RulesRow // the rules section (empty: not measured)
	Paired Paired     // the paired (a)/(b) measurement (no pairs: not measured)
}

// New summarizes the series and checks the goals.
func New(meta Meta, series []Series, paired Paired) Report {
	return Report{Meta: meta, Rows: Summarize(series), Goals: Goals(series, paired),
		Paired: paired}
}

func columns() []string {
	return []string{"variant", "req/s", "p50", "p99", "ratio to (a)", "L3 hit ratio",
		"Redis calls / 1000 req", "of which scripts", "nginx CPU µs/req", "redis CPU µs/req",
		"non-2xx"}
}

func (r Report) cells(row Row) []string {
	return []string{"(" + row.Key + ") " + row.Name, Thousands(row.ReqPerSec), Latency(row.P50),
		Latency(row.P99), fixed(row.Ratio, 3), Percent(row.HitRatio), fixed(row.CallsPer1000, 2),
		fixed(row.ScriptsPer1000, 2), fixed(row.NginxMicros, 1), fixed(row.RedisMicros, 1),
		strconv.FormatInt(row.Non2xx, 10)}
}

func (r Report) header() []string {
	m := r.Meta
	lines := []string{
		fmt.Sprintf("date: %s", m.Date.Format(time.RFC3339)),
		fmt.Sprintf("machine: %d CPUs, %s", m.CPUs, m.CPUModel),
		fmt.Sprintf("software: %s, %s, %s", m.Nginx, m.Redis, m.Wrk),
		fmt.Sprintf("load average: %s at start, %s at end (anything well above 0 at the "+
			"start means other processes competed with the benchmark)", m.LoadStart, m.LoadEnd),
		fmt.Sprintf("load: wrk -t%d -c%d -d%s --latency, %s warm-up before every run, %d round(s) "+
			"interleaving the variants, medians over rounds", m.Threads, m.Connections,
			m.Duration, m.Warmup, m.Rounds),
	}
	if len(m.Env) > 0 {
		lines = append(lines, "environment: "+strings.Join(m.Env, " "))
	}
	return lines
}

// footer: warnings first (loud), then the goals and the meaning of the Redis columns.
func (r Report) footer() []string {
	lines := r.Warnings()
	for _, g := range r.Goals {
		verdict := "met"
		if !g.Met {
			verdict = "NOT met"
		}
		lines = append(lines, fmt.Sprintf("goal %s: %s — %s", g.Name, verdict, g.Detail))
	}
	if l := r.Paired.line(); l != "" {
		lines = append(lines, l)
	}
	lines = append(lines, r.cpuLine())
	return append(lines, "Redis calls: every command Redis executed during the measured run "+
		"(INFO commandstats, including the commands scripts run inside Redis); of which "+
		"scripts: EVALSHA/EVAL invocations, i.e. the limiter's round trips")
}

// cpuLine compares the nginx CPU per request of the variants with (a)'s: unlike req/s it
// hardly depends on what else runs on the machine.
func (r Report) cpuLine() string {
	if len(r.Rows) == 0 || !(r.Rows[0].NginxMicros > 0) {
		return "CPU: not measured"
	}
	base := r.Rows[0]
	parts := make([]string, 0, len(r.Rows)-1)
	for _, row := range r.Rows[1:] {
		parts = append(parts, fmt.Sprintf("(%s) %.2f×", row.Key, row.NginxMicros/base.NginxMicros))
	}
	return fmt.Sprintf("CPU: user+system time of the processes during the measured run per "+
		"completed request; nginx CPU per request relative to (%s): %s", base.Key,
		strings.Join(parts, ", "))
}

// Warnings are loud lines for variants that answered anything but 2xx or had socket errors.
func (r Report) Warnings() []string {
	var w []string
	for _, row := range r.Rows {
		if row.Non2xx > 0 {
			w = append(w, fmt.Sprintf("!!! WARNING: (%s) %s answered %d non-2xx responses of %d "+
				"— the limiter rejected or failed requests; this is not an overhead measurement",
				row.Key, row.Name, row.Non2xx, row.Requests))
		}
		if row.SocketErrors > 0 {
			w = append(w, fmt.Sprintf("!!! WARNING: (%s) %s had %d socket errors (wrk)",
				row.Key, row.Name, row.SocketErrors))
		}
	}
	return w
}

// Text is the report as aligned plain text.
func (r Report) Text() string {
	var b strings.Builder
	for _, l := range r.header() {
		b.WriteString(l + "\n")
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns(), "\t"))
	for _, row := range r.Rows {
		fmt.Fprintln(tw, strings.Join(r.cells(row), "\t"))
	}
	_ = tw.Flush()
	b.WriteString("\n")
	for _, l := range r.footer() {
		b.WriteString(l + "\n")
	}
	b.WriteString(r.rulesText())
	return b.String()
}

// Markdown is the report as a Markdown document.
func (r Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# tollgate benchmark\n\n")
	for _, l := range r.header() {
		b.WriteString("- " + l + "\n")
	}
	b.WriteString("\n| " + strings.Join(columns(), " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(columns())) + "\n")
	for _, row := range r.Rows {
		b.WriteString("| " + strings.Join(r.cells(row), " | ") + " |\n")
	}
	b.WriteString("\n")
	for _, l := range r.footer() {
		b.WriteString("- " + l + "\n")
	}
	b.WriteString(r.rulesMarkdown())
	return b.String()
}

// Thousands formats v rounded, with thousands separators ("29,343"); "—" for NaN.
func Thousands(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// Latency formats d in µs below 1 ms, else in ms with two decimals.
func Latency(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// Percent formats a ratio as a percentage with three decimals; "—" for NaN.
func Percent(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.3f %%", v*100)
}

func fixed(v float64, decimals int) string {
	if math.IsNaN(v) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}
