// Package apiload drives the admin API for the benchmark programs (tollgate-apibench,
// tollgate-scale): a client that signs in once and sends requests with its token, and a phase
// runner that sends one kind of request from concurrent clients and summarises the latencies.
package apiload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Client is an admin API client holding an access token.
type Client struct {
	base  string
	http  *http.Client
	token string
}

// New is a client of the API at base (http://host:port) with room for conns connections.
func New(base string, conns int) *Client {
	tr := &http.Transport{MaxIdleConns: 2 * conns, MaxIdleConnsPerHost: 2 * conns, IdleConnTimeout: time.Minute}
	return &Client{base: base, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// Login signs in and keeps the access token.
func (c *Client) Login(user, password string) error {
	body, _ := json.Marshal(map[string]string{"username": user, "password": password})
	resp, err := c.http.Post(c.base+"/api/v1/auth/login", "application/json", bytes.NewReader(body))
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
		return fmt.Errorf("apiload: login: status %d: %v", resp.StatusCode, err)
	}
	c.token = out.Data.AccessToken
	return nil
}

// Do sends one request (a JSON body when body is not nil) and reports whether it got want.
func (c *Client) Do(method, path string, body []byte, want int) bool {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, r)
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

// Get is a request that GETs path and wants 200.
func (c *Client) Get(path string) func() bool {
	return func() bool { return c.Do("GET", path, nil, 200) }
}

// Result summarises one phase.
type Result struct {
	N, Errors          int
	Rate               float64 // requests per second
	P50, P90, P99, Max time.Duration
}

// Run sends warmup requests, then drives req from conc goroutines for d and summarises the
// latencies (nearest-rank quantiles).
func Run(conc int, d time.Duration, warmup int, req func() bool) Result {
	for i := 0; i < warmup; i++ {
		req()
	}
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			e := 0
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if !req() {
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
	q := Quantiles(all)
	return Result{N: len(all), Errors: errs, Rate: float64(len(all)) / time.Since(start).Seconds(),
		P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: q(1)}
}

// Quantiles sorts d and returns its nearest-rank quantile function (0 for no samples).
func Quantiles(d []time.Duration) func(float64) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return func(q float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		i := int(q*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
}

// Ms formats d in milliseconds with two decimals ("12.34ms").
func Ms(d time.Duration) string {
	return strings.TrimSpace(fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000))
}
