package report

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// RulesRow is one measured run of the tollgate variant with a number of active rules.
type RulesRow struct {
	Rules     int
	Mix       string // what the rules are (algorithms, distributions)
	ReqPerSec float64
	P50, P99  time.Duration
	Ratio     float64 // req/s ÷ req/s of the run without rules
	Requests  int64
	Non2xx    int64
}

func rulesColumns() []string {
	return []string{"active rules", "req/s", "p50", "p99", "ratio to 0 rules", "non-2xx", "mix"}
}

func rulesCells(r RulesRow) []string {
	return []string{strconv.Itoa(r.Rules), Thousands(r.ReqPerSec), Latency(r.P50),
		Latency(r.P99), fixed(r.Ratio, 3), strconv.FormatInt(r.Non2xx, 10), r.Mix}
}

const rulesTitle = "Rules: (b) tollgate with active rules that match every request and never reject"

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
