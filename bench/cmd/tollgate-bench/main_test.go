package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The quick mode end to end against real redis-server, nginx and wrk: the table has the five
// variants, each served requests and answered nothing but 2xx, and the lease-based gateway asks
// Redis far less often than the Redis-per-request limiter. No timing is asserted
// (docs/design.md §10).
func TestQuickRunEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, five nginx and wrk (about 25 s)")
	}
	for _, bin := range []string{"redis-server", "nginx", "wrk"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is required: %v", bin, err)
		}
	}
	out := filepath.Join(t.TempDir(), "latest.md")
	var stdout, stderr bytes.Buffer
	rep, err := run([]string{"-quick", "-out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run -quick: %v\nprogress:\n%s", err, stderr.String())
	}
	t.Logf("\n%s", stdout.String())

	want := []string{"(a) plain", "(b) tollgate", "(c) redis-per-request", "(d) limit_req",
		"(e) empty-lua-phases"}
	if len(rep.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(want))
	}
	for i, row := range rep.Rows {
		if got := "(" + row.Key + ") " + row.Name; got != want[i] {
			t.Errorf("row %d is %q, want %q", i, got, want[i])
		}
		if !(row.ReqPerSec > 0) || row.Requests == 0 {
			t.Errorf("%s: %v req/s over %d requests, want > 0", want[i], row.ReqPerSec,
				row.Requests)
		}
		if row.Non2xx != 0 {
			t.Errorf("%s: %d non-2xx responses, want 0", want[i], row.Non2xx)
		}
	}
	b, c := rep.Rows[1], rep.Rows[2]
	if math.IsNaN(b.CallsPer1000) || math.IsNaN(c.CallsPer1000) || math.IsNaN(b.HitRatio) {
		t.Fatalf("Redis calls or hit ratio not measured: (b) %v calls, %v hits; (c) %v calls",
			b.CallsPer1000, b.HitRatio, c.CallsPer1000)
	}
	if !(b.CallsPer1000 < c.CallsPer1000/10) {
		t.Errorf("Redis calls per 1000 requests: (b) %.2f, want < (c) %.2f / 10",
			b.CallsPer1000, c.CallsPer1000)
	}
	// the paired measurement: -quick runs 2 pairs, each with both sides measured
	if p := rep.Paired; len(p.A) != 2 || len(p.Ratios()) != 2 || !(p.Median() > 0) {
		t.Errorf("paired: a %v, b %v; want 2 pairs with requests on both sides", p.A, p.B)
	}
	// the rules section: 0, 10 and 100 active rules that never reject
	if len(rep.Rules) != 3 {
		t.Fatalf("%d rules rows, want 3 (0, 10, 100 rules)", len(rep.Rules))
	}
	for i, n := range []int{0, 10, 100} {
		r := rep.Rules[i]
		if r.Rules != n || !(r.ReqPerSec > 0) || r.Non2xx != 0 {
			t.Errorf("rules row %d: %d rules, %v req/s, %d non-2xx; want %d rules, > 0 req/s, "+
				"no non-2xx", i, r.Rules, r.ReqPerSec, r.Non2xx, n)
		}
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("markdown not written: %v", err)
	}
	for _, label := range want {
		if !strings.Contains(string(md), "| "+label+" |") {
			t.Errorf("markdown table lacks %q:\n%s", label, md)
		}
	}
	if !strings.Contains(string(md), "paired (b)/(a): both gateways up at once, 2 pairs") {
		t.Errorf("markdown lacks the paired line:\n%s", md)
	}
	if !strings.Contains(string(md), "| 100 | ") {
		t.Errorf("markdown lacks the rules section:\n%s", md)
	}
}
