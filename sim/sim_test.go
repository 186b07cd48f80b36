package sim

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The quick run (10 nodes x 60 apps, 24 virtual seconds, the real scripts on a real
// redis-server) meets the goals: overshoot <= 1 % of the ideal bucket, utilisation
// >= 98 % for apps over quota, drift < 1 %, emergency enforced on every node within 200 ms,; no
// script error, no correction needed. The same seed gives the same run.
func TestQuickRunMeetsGoals(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := run(ctx, Quick(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	s.res.Print(&b)
	t.Log("\n" + b.String())
	if miss := s.res.Goals(); len(miss) > 0 {
		t.Fatalf("goals missed: %v", miss)
	}
	if s.res.RoundLimit != 0 || s.res.Corrections != 0 || s.res.L1Corrections != 0 {
		t.Fatalf("round limit %d, corrections %d / %d", s.res.RoundLimit, s.res.Corrections, s.res.L1Corrections)
	}
	// the same seed gives the same run
	again, err := run(ctx, Quick(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.res.OvershootAll != s.res.OvershootAll || again.res.Calls != s.res.Calls {
		t.Fatalf("not deterministic: overshoot %v vs %v, calls %d vs %d", again.res.OvershootAll,
			s.res.OvershootAll, again.res.Calls, s.res.Calls)
	}
}

// The active-subset mode (only the apps with traffic are visited each step; idle apps exist in
// Redis only) gives the same run as visiting every app, idle ones with leases on their nodes.
func TestActiveSubsetSameAsScanAll(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	c := Quick()
	c.Nodes, c.Apps, c.Active, c.Duration = 20, 60, 0.3, 10*time.Second
	c.Warmup, c.ShiftAt, c.CrashAt, c.EmergencyAt, c.EmergencyFor = 2*time.Second, 4*time.Second,
		6*time.Second, 7*time.Second, 2*time.Second
	c.ReconcileEvery, c.ReapAfter = 3*time.Second, 2*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub, err := run(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.ScanAll = true
	all, err := run(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sub.live) != 18 || len(all.live) != 60 {
		t.Fatalf("visited %d and %d apps, want 18 and 60", len(sub.live), len(all.live))
	}
	a, b := *sub.res, *all.res
	if a.Calls == 0 || a.ShiftedApps == 0 || a.RedisCommands == 0 {
		t.Fatalf("nothing happened: %+v", a)
	}
	for _, r := range []*Result{&a, &b} {
		r.Config.ScanAll = false
		r.Wall, r.SetupWall, r.LoopWall, r.VirtualPerSec, r.RedisUsedMemory, r.RedisCPU = 0, 0, 0, 0, 0, 0
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			t.Errorf("%s: active subset %v, scan-all %v", va.Type().Field(i).Name, va.Field(i), vb.Field(i))
		}
	}
}

// Nodes that start serving an app together share its burst (lua/tollgate/lease/bucket.lua
// slow_acquire): 16 nodes whose first requests of four apps under quota come in the same step
// are all served — a node's first grant takes the request alone, its reserve follows once the
// reply has said how many nodes share the app (mutation: a reserve of burst / 2 in the first
// grant, sized for a node alone — 20 requests refused, although L2 cuts each reserve to the
// node's share of what it holds).
func TestNodesStartingTogetherShareTheBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	c := Default()
	c.Nodes, c.Apps, c.Duration = 16, 4, 3*time.Second
	c.Warmup, c.ShiftAt, c.CrashAt, c.EmergencyAt = 0, 0, 0, 0
	cu := &Custom{Cost: 2, Rate: func(a, n int, t float64) float64 { return 50.0 / 16 }}
	for i := 0; i < c.Apps; i++ {
		cu.Apps = append(cu.Apps, CustomApp{ID: fmt.Sprintf("herd%d", i), G: 100, Burst: 200})
	}
	c.Custom = cu
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	var admitted int64
	for _, s := range res.Series {
		for _, x := range s.Admitted {
			admitted += x
		}
	}
	if len(res.Rejected) != 0 || admitted == 0 {
		t.Fatalf("%d admitted, refused %v: want every request of apps under quota served", admitted, res.Rejected)
	}
}
