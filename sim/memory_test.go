package sim

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseUsedMemory(t *testing.T) {
	info := "# Memory\r\nused_memory:1348688\r\nused_memory_human:1.29M\r\nused_memory_rss:7000000\r\n" +
		"mem_clients_slaves:0\r\nmem_clients_normal:20496\r\nmem_not_counted_for_evict:0\r\n"
	n, err := parseUsedMemory(info)
	if err != nil || n != 1348688-20496 {
		t.Fatalf("parseUsedMemory = %d, %v; want %d", n, err, 1348688-20496)
	}
	for _, bad := range []string{"# Memory\r\nused_memory_rss:5\r\n", "used_memory:12x\r\n", "used_memory:12\r\nmem_clients_normal:x\r\n", ""} {
		if n, err := parseUsedMemory(bad); err == nil {
			t.Errorf("parseUsedMemory(%q) = %d, want an error", bad, n)
		}
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=500,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hincrby:calls=35,usec=40,usec_per_call=1.14,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hset:calls=5,usec=5,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	total, scripts, err := parseCommandStats(info)
	if err != nil || total != 50 || scripts != 10 {
		t.Fatalf("parseCommandStats = %d, %d, %v; want 50 (info left out), 10", total, scripts, err)
	}
	if _, _, err := parseCommandStats("cmdstat_get:usec=1\r\n"); err == nil {
		t.Fatal("a line without calls= parsed")
	}
}

func TestPerItem(t *testing.T) {
	if got := perItem(1000, 4000, 3); got != 1000 {
		t.Fatalf("perItem = %v, want 1000", got)
	}
	if got := perItem(1000, 4000, 0); got != 0 {
		t.Fatalf("perItem of no item = %v, want 0", got)
	}
}

// A small measurement on a real redis-server: apps cost memory, an active app's lease state
// costs memory, and each lease added costs less than the first (which creates the app's
// leases, nodes and stats keys). The steps add up to the readings.
func TestMeasureMemorySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("redis-server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := MeasureMemory(ctx, MemoryConfig{Apps: 2000, Active: 500, Nodes: []int{1, 4}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.Print(&b)
	t.Log("\n" + b.String())
	if r.PerApp < 100 || r.PerApp > 10_000 {
		t.Fatalf("%.0f B per app", r.PerApp)
	}
	if len(r.Steps) != 2 {
		t.Fatalf("steps %v", r.Steps)
	}
	first, second := r.Steps[0], r.Steps[1]
	if first.PerApp <= 0 || second.Marginal <= 0 || second.Marginal >= first.PerApp {
		t.Fatalf("first lease %.0f B, each further lease %.0f B", first.PerApp, second.Marginal)
	}
	if got := float64(r.AfterJobs) + second.PerApp*500; int64(got+0.5) != second.Used {
		t.Fatalf("after apps and job %d + %.1f x 500 != %d", r.AfterJobs, second.PerApp, second.Used)
	}
	if r.PerAppWithJob <= r.PerApp { // the reconcile job writes every app's stats hash
		t.Fatalf("%.0f B per app after the reconcile job, %.0f B before", r.PerAppWithJob, r.PerApp)
	}
	if _, err := MeasureMemory(ctx, MemoryConfig{Apps: 10, Active: 1, Nodes: []int{2, 2}}, nil); err == nil {
		t.Fatal("node counts that do not increase accepted")
	}
}

func TestParseCPU(t *testing.T) {
	d, err := parseCPU("# CPU\r\nused_cpu_sys:4.25\r\nused_cpu_user:108.5\r\nused_cpu_sys_children:1.0\r\n")
	if err != nil || d != 112750*time.Millisecond {
		t.Fatalf("parseCPU = %s, %v; want 112.75s", d, err)
	}
	if _, err := parseCPU("used_cpu_sys:1\r\n"); err == nil {
		t.Fatal("INFO cpu without used_cpu_user parsed")
	}
}
