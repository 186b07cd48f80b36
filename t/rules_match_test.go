package t

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The match corpus (testdata/rules/match.json, testdata/README.md) through real nginx (2
// workers) and Redis: the rules the gateway's index gives a request, checked there, are the
// ones the corpus says it matches. Every case's rules are shadow rules far from their limits
// (they count and never refuse); after a case's requests each rule has as many hits as
// requests that list it. A last rule that matches everything counts every request: when it
// has them all, each worker has flushed the counts of those requests (a worker moves all its
// counters to the shared metrics at once), so a rule still at 0 really matched nothing.

type matchCase struct {
	Name     string           `json:"name"`
	Rules    []map[string]any `json:"rules"`
	Requests []struct {
		App     string         `json:"app"`
		Method  string         `json:"method"`
		Path    string         `json:"path"`
		Headers map[string]any `json:"headers"`
		Match   []string       `json:"match"`
	} `json:"requests"`
}

func loadMatchCorpus(t *testing.T) []matchCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "rules", "match.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []matchCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("testdata/rules/match.json holds no case")
	}
	return cases
}

// headerValues is a corpus header value: a string, or a list of them (a repeated header).
func headerValues(t *testing.T, v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				t.Fatalf("header value %v is not a string", e)
			}
			out[i] = s
		}
		return out
	}
	t.Fatalf("header value %v is neither a string nor a list", v)
	return nil
}

func TestRuleMatchCorpus(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	var prev []string
	for ci, c := range loadMatchCorpus(t) {
		prefix := "m" + strconv.Itoa(ci) + "-"
		var rs []rule
		for _, cr := range c.Rules {
			r := base(prefix+cr["id"].(string), 1_000_000, 60, rule{"action": "shadow"})
			for k, v := range cr {
				if k != "id" {
					r[k] = v
				}
			}
			rs = append(rs, r)
		}
		all := prefix + "zz-every-request"
		rs = append(rs, base(all, 1_000_000, 60, rule{"action": "shadow", "priority": 1_000_000}))
		s.putRules(prev, rs...)
		prev = prev[:0]
		for _, r := range rs {
			prev = append(prev, r["id"].(string))
		}
		want := map[string]int{}
		for _, q := range c.Requests {
			h := http.Header{"X-App-Id": {q.App}}
			for k, v := range q.Headers {
				h[http.CanonicalHeaderKey(k)] = append(h[http.CanonicalHeaderKey(k)], headerValues(t, v)...)
			}
			r := g.DoHeader(q.Method, q.Path, h)
			if r.Status >= 400 && r.Status != 404 {
				t.Fatalf("%s: %s %s %v: %d %s", c.Name, q.Method, q.Path, h, r.Status, r.Body)
			}
			for _, id := range q.Match {
				want[prefix+id]++
			}
		}
		series := func(id string) string { return `ratelimit_rule_hits_total{rule_id="` + id + `"}` }
		metricIs(t, g, series(all), float64(len(c.Requests)))
		for _, cr := range c.Rules {
			id := prefix + cr["id"].(string)
			if got := g.Metric(series(id)); got != float64(want[id]) {
				t.Errorf("%s: rule %s has %v hits, want %d (the requests that match it)",
					c.Name, cr["id"], got, want[id])
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		t.Logf("%s: %s", c.Name, fmt.Sprint(want))
	}
}
