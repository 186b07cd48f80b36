package report

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// RulesRow is the tollgate variant with a number of active rules, over the rounds.
type RulesRow struct {
	Rules     int
	Mix       string // what the rules are (algorithms, distributions)
	ReqPerSec float64
	P50, P99  time.Duration
	Ratio     float64 // median over rounds of req/s ÷ req/s of the round's run without rules
	Requests  int64
	Non2xx    int64
}

// SummarizeRules builds the rules rows from rounds of runs: runs[i][r] is round r of the
// tollgate variant with counts[i] active rules, counts[0] being the run without rules. Medians
// over the rounds; the ratio is the median of each round's req/s ÷ that round's run without
// rules (the runs of a round follow each other, so they share the machine's state).
func SummarizeRules(counts []int, mix string, runs [][]Sample) []RulesRow {
	rows := make([]RulesRow, 0, len(counts))
	for i, n := range counts {
		row := RulesRow{Rules: n, Mix: mix,
			ReqPerSec: median(runs[i], func(x Sample) float64 { return x.ReqPerSec }),
			P50:       medianDuration(runs[i], func(x Sample) time.Duration { return x.P50 }),
			P99:       medianDuration(runs[i], func(x Sample) time.Duration { return x.P99 }),
			Ratio:     PairRatio(Series{Samples: runs[i]}, Series{Samples: runs[0]}),
		}
		if n == 0 {
			row.Mix = "-"
		}
		for _, x := range runs[i] {
			row.Requests += x.Requests
			row.Non2xx += x.Non2xx
		}
		rows = append(rows, row)
	}
	return rows
}

func rulesColumns() []string {
	return []string{"active rules", "req/s", "p50", "p99", "ratio to 0 rules", "non-2xx", "mix"}
}

func rulesCells(r RulesRow) []string {
	return []string{strconv.Itoa(r.Rules), Thousands(r.ReqPerSec), Latency(r.P50),
		Latency(r.P99), fixed(r.Ratio, 3), strconv.FormatInt(r.Non2xx, 10), r.Mix}
}

const rulesTitle = "Rules: (b) tollgate with active rules that never reject (the mix column: how many match a request) " +
	"(one run of each per round; medians over the rounds, ratio to the same round's run without rules)"

// rulesText is the rules section as aligned text ("" without rows).
func (r Report) rulesText() string {
	if len(r.Rules) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n" + rulesTitle + "\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(rulesColumns(), "\t"))
	for _, row := range r.Rules {
		fmt.Fprintln(tw, strings.Join(rulesCells(row), "\t"))
	}
	_ = tw.Flush()
	return b.String()
}

// rulesMarkdown is the rules section as Markdown ("" without rows).
func (r Report) rulesMarkdown() string {
	if len(r.Rules) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## " + rulesTitle + "\n\n")
	b.WriteString("| " + strings.Join(rulesColumns(), " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(rulesColumns())) + "\n")
	for _, row := range r.Rules {
		b.WriteString("| " + strings.Join(rulesCells(row), " | ") + " |\n")
	}
	return b.String()
}
