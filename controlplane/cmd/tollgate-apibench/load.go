package main

import (
	"fmt"
	"sync/atomic"
	"time"

	"tollgate/internal/apiload"
)

// create posts a new app (a fresh id each time); a dry run only validates and diffs.
func create(c *apiload.Client, seq *atomic.Int64, dryRun bool) func() bool {
	path, want := "/api/v1/apps", 201
	if dryRun {
		path, want = "/api/v1/apps?dry_run=true", 200
	}
	return func() bool {
		n := seq.Add(1)
		body := fmt.Sprintf(`{"app_id":"new-%07d","cluster_id":"bench","guaranteed_quota":10,"burst_quota":50,"priority":%d,"max_connections":100}`, n, n%4)
		return c.Do("POST", path, []byte(body), want)
	}
}

// update changes the burst quota of one of the n seeded apps (a different one each time).
func update(c *apiload.Client, seq *atomic.Int64, n int) func() bool {
	return func() bool {
		k := seq.Add(1)
		body := fmt.Sprintf(`{"burst_quota":%d}`, 5000+k%100)
		return c.Do("PUT", fmt.Sprintf("/api/v1/apps/app-%05d", k%int64(max(n, 1))), []byte(body), 200)
	}
}

type phase struct {
	name string
	req  func() bool
}

// run drives the phase from conc goroutines for d after 20 warm-up requests.
func (p phase) run(conc int, d time.Duration) apiload.Result { return apiload.Run(conc, d, 20, p.req) }
