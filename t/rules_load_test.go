package t

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"tollgate/t/harness"
)

// Node rules under concurrent load on 2 workers: the chunked path of large window limits and
// a token bucket at a rate whose token lasts less than a double's spacing at a Unix time.

// ruleLoad sends n GET requests of app from `conc` goroutines at once and counts the 200s and the
// rule rejections by rule `by`; anything else is returned as an error.
func ruleLoad(g *harness.Gateway, n, conc int, app, by string) (ok, refused int, err error) {
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		next <- struct{}{}
	}
	close(next)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	defer client.CloseIdleConnections()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				s, e := get(client, g.URL+"/b/k", app, by)
				mu.Lock()
				switch {
				case e != nil:
					if first == nil {
						first = e
					}
				case s == 200:
					ok++
				default:
					refused++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok, refused, first
}

func get(c *http.Client, url, app, by string) (int, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-App-Id", app)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case 200:
		return 200, nil
	case 429:
		var rj ruleReject
		if json.Unmarshal(b, &rj) != nil || rj.Reason != "rule_limited" || rj.RuleID != by {
			return 0, fmt.Errorf("429 %s, want rule_limited by %s", b, by)
		}
		return 429, nil
	}
	return 0, fmt.Errorf("status %d %s", resp.StatusCode, b)
}

// A node fixed window and a node sliding window of 4096 (chunks of 4 units per worker) under
// 8 concurrent clients: the node admits at most the limit within the window and, once the
// load exceeds it, at least limit - workers x chunk (what the other worker may still hold).
func TestRuleNodeWindowChunksUnderLoad(t *testing.T) {
	const limit, chunk, workers = 4096, 4, 2
	s := newStack(t, stackOptions{})
	g := s.gw()
	for _, c := range []struct {
		algorithm string
		window    int64
		app       string
	}{{"fixed_window", 86400, "demo-p0"}, {"sliding_window", 600, "demo-p1"}} {
		for attempt := 0; ; attempt++ {
			id := fmt.Sprintf("load-%s-%d", c.algorithm, attempt)
			s.putRules(nil, base(id, limit, int(c.window), rule{"algorithm": c.algorithm,
				"match": rule{"app_ids": []string{c.app}}}))
			start := time.Now().Unix()
			ok, refused, err := ruleLoad(g, limit+1000, 8, c.app, id)
			if err != nil {
				t.Fatalf("%s: %v", c.algorithm, err)
			}
			// the whole run inside one window (a fixed window may have turned over: retry once)
			if c.algorithm == "fixed_window" && start/c.window != time.Now().Unix()/c.window && attempt == 0 {
				continue
			}
			if time.Now().Unix()-start >= c.window {
				t.Fatalf("%s: the run took longer than the window", c.algorithm)
			}
			if ok > limit || ok < limit-workers*chunk {
				t.Fatalf("%s: %d of %d admitted, want %d … %d", c.algorithm, ok, ok+refused,
					limit-workers*chunk, limit)
			}
			t.Logf("%s: %d of %d admitted (limit %d)", c.algorithm, ok, ok+refused, limit)
			series := `ratelimit_rule_actions_total{rule_id="` + id + `",action="blocked"}`
			eventually(t, fmt.Sprintf("%s = %d", series, refused),
				func() bool { return int(g.Metric(series)) == refused })
			break
		}
	}
}

// limit 10^9 per 60 s: one token is 6e-8 s, below the spacing of doubles at a Unix time
// (2.4e-7 s), and a millisecond refills 16666 tokens. With burst 2 the bucket refuses the third
// request of one clock reading (nginx's cached time, shared by the requests one event loop
// iteration handles): rounds of 32 simultaneous requests must produce refusals. One worker, so
// that no refusal comes from another worker's clock being a millisecond ahead: with float
// time-stamps this bucket never drained and never refused.
func TestRuleHighRateTokenBucketRefuses(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1})
	g := s.gw()
	s.putRules(nil, base("hi-rate", 1000000000, 60, rule{"algorithm": "token_bucket", "burst": 2,
		"match": rule{"app_ids": []string{"demo-p0"}}}))
	total, refused := 0, 0
	for round := 0; round < 200 && refused == 0; round++ {
		ok, r, err := ruleLoad(g, 32, 32, "demo-p0", "hi-rate")
		if err != nil {
			t.Fatal(err)
		}
		total, refused = total+ok+r, refused+r
	}
	if refused == 0 {
		t.Fatalf("a token bucket of burst 2 at 10^9 per 60 s refused none of %d requests sent 32 at once", total)
	}
	series := `ratelimit_rule_actions_total{rule_id="hi-rate",action="blocked"}`
	eventually(t, fmt.Sprintf("%s = %d", series, refused),
		func() bool { return int(g.Metric(series)) == refused })
}
