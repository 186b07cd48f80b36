package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type client struct {
	base  string
	http  *http.Client
	token string
	seq   atomic.Int64
}

func newClient(base string, conns int) *client {
	tr := &http.Transport{MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, IdleConnTimeout: time.Minute}
	return &client{base: base, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (c *client) login() error {
	body := fmt.Sprintf(`{"username":"admin","password":%q}`, password)
	resp, err := c.http.Post(c.base+"/api/v1/auth/login", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			AccessToken string `json:"access_token"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Data.AccessToken == "" {
		return fmt.Errorf("login: %d %v", resp.StatusCode, err)
	}
	c.token = out.Data.AccessToken
	return nil
}

// request sends one request and reports whether it got the wanted status.
type request func() bool

func (c *client) do(method, path string, body []byte, want int) bool {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == want
}

func (c *client) get(path string) request {
	return func() bool { return c.do("GET", path, nil, 200) }
}

// create posts a new app (a fresh id each time); a dry run only validates and diffs.
func (c *client) create(dryRun bool) request {
	path, want := "/api/v1/apps", 201
	if dryRun {
		path, want = "/api/v1/apps?dry_run=true", 200
	}
	return func() bool {
		n := c.seq.Add(1)
		body := fmt.Sprintf(`{"app_id":"new-%07d","cluster_id":"bench","guaranteed_quota":10,"burst_quota":50,"priority":%d,"max_connections":100}`, n, n%4)
		return c.do("POST", path, []byte(body), want)
	}
}

type phase struct {
	name string
	req  request
}

type result struct {
	n, errors          int
	rate               float64
	p50, p90, p99, max time.Duration
}

// run drives req from conc goroutines for d (after a short warm-up) and summarises latencies.
func (p phase) run(conc int, d time.Duration) result {
	for i := 0; i < 20; i++ {
		p.req()
	}
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			e := 0
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if !p.req() {
					e++
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all, errs = append(all, lat...), errs+e
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	q := func(f float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(f*float64(len(all))))]
	}
	return result{n: len(all), errors: errs, rate: float64(len(all)) / elapsed.Seconds(),
		p50: q(0.50), p90: q(0.90), p99: q(0.99), max: q(1)}
}
