package nginxenv

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FlushInterval is how often each worker moves its metrics into shared memory (metrics.lua);
// counters that stay unchanged for longer than this after the load stopped are complete.
const FlushInterval = time.Second

const (
	settle       = FlushInterval + 300*time.Millisecond
	flushTimeout = 15 * time.Second
	metricsPoll  = 100 * time.Millisecond
)

// L3 are the gateway's local-lease counters.
type L3 struct {
	Hits, Misses float64
}

// Sub is l - o.
func (l L3) Sub(o L3) L3 { return L3{Hits: l.Hits - o.Hits, Misses: l.Misses - o.Misses} }

// L3 scrapes /metrics once.
func (n *Node) L3(ctx context.Context) (L3, error) {
	body, status, err := n.get(ctx, n.MetricsURL+"/metrics", false)
	if err != nil {
		return L3{}, err
	}
	if status != http.StatusOK {
		return L3{}, fmt.Errorf("nginxenv: /metrics: status %d", status)
	}
	return ParseL3(string(body))
}

// ParseL3 reads ratelimit_l3_hits_total and ratelimit_l3_misses_total (0 when absent).
func ParseL3(text string) (L3, error) {
	var l L3
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		var dst *float64
		switch {
		case !ok:
			continue
		case name == "ratelimit_l3_hits_total":
			dst = &l.Hits
		case name == "ratelimit_l3_misses_total":
			dst = &l.Misses
		default:
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return L3{}, fmt.Errorf("nginxenv: %s: %w", name, err)
		}
		*dst = v
	}
	return l, sc.Err()
}

// Series returns the /metrics lines whose series name starts with one of the prefixes.
func (n *Node) Series(ctx context.Context, prefixes ...string) ([]string, error) {
	body, status, err := n.get(ctx, n.MetricsURL+"/metrics", false)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("nginxenv: /metrics: status %d", status)
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
				break
			}
		}
	}
	return out, nil
}

// SettledL3 polls /metrics after the load has stopped until the counters have not changed for
// longer than one flush interval, so that every worker's last flush is included.
func (n *Node) SettledL3(ctx context.Context) (L3, error) {
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	last, err := n.L3(ctx)
	if err != nil {
		return L3{}, err
	}
	changed := time.Now()
	tick := time.NewTicker(metricsPoll)
	defer tick.Stop()
	for time.Since(changed) < settle {
		select {
		case <-ctx.Done():
			return L3{}, fmt.Errorf("nginxenv: metrics did not settle: %w", ctx.Err())
		case <-tick.C:
		}
		cur, err := n.L3(ctx)
		if err != nil {
			return L3{}, err
		}
		if cur != last {
			last, changed = cur, time.Now()
		}
	}
	return last, nil
}
