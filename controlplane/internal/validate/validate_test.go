package validate_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

type auditLog struct {
	mu sync.Mutex
	a  []validate.Attempt
}

func (l *auditLog) ValidationAttempt(_ context.Context, a validate.Attempt) {
	l.mu.Lock()
	l.a = append(l.a, a)
	l.mu.Unlock()
}

// snapshot is every key of the Redis with its serialized value.
func snapshot(t fataler, f *testutil.Fixture) map[string]string {
	t.Helper()
	out := map[string]string{}
	var cursor uint64
	for {
		ks, next, err := f.RDB.Scan(f.Ctx, cursor, "*", 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			v, err := f.RDB.Dump(f.Ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		if cursor = next; cursor == 0 {
			return out
		}
	}
}

type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

var ids = []string{"a1", "a2", "a3", "new1", "bad id", ""}

// expected is the oracle of Property 11 and Req 16: the set of "field:code" a change breaks,
// written from the rules, not from the validator.
func expected(cl store.Cluster, existing map[string]store.App, ch validate.Change) []string {
	var out []string
	add := func(field, code string) { out = append(out, field+":"+code) }
	name := func(i int, a validate.App, f string) string {
		if keys.ValidID(a.AppID) {
			return "apps[" + a.AppID + "]." + f
		}
		return fmt.Sprintf("apps[%d].%s", i, f)
	}
	beforeCap := math.Floor(float64(cl.Capacity)*(1-cl.ReservedRatio) + 1e-6)
	var beforeSum int64
	for _, a := range existing {
		beforeSum += a.GuaranteedQuota
	}
	if c := ch.Cluster; c != nil {
		if c.Capacity <= 0 {
			add("cluster.capacity", "invalid_capacity")
		}
		if c.ReservedRatio < 0 || c.ReservedRatio >= 1 {
			add("cluster.reserved_ratio", "invalid_reserved_ratio")
		}
		cl = *c
	}
	after := map[string]store.App{}
	for k, v := range existing {
		after[k] = v
	}
	seen := map[string]bool{}
	for i, a := range ch.Apps {
		switch {
		case !keys.ValidID(a.AppID):
			add(name(i, a, "app_id"), "invalid_id")
		case seen[a.AppID]:
			add(name(i, a, "app_id"), "duplicate_app")
		}
		seen[a.AppID] = true
		switch {
		case !keys.ValidID(a.ClusterID):
			add(name(i, a, "cluster_id"), "invalid_id")
		case existing[a.AppID].ClusterID != "" && existing[a.AppID].ClusterID != a.ClusterID:
			add(name(i, a, "cluster_id"), "cluster_change")
		case a.ClusterID == "c2":
			add(name(i, a, "cluster_id"), "unknown_cluster")
		}
		if a.GuaranteedQuota <= 0 {
			add(name(i, a, "guaranteed_quota"), "invalid_guaranteed_quota")
		}
		if a.BurstQuota <= 0 {
			add(name(i, a, "burst_quota"), "invalid_burst_quota")
		} else if a.BurstQuota < a.GuaranteedQuota {
			add(name(i, a, "burst_quota"), "burst_below_guaranteed")
		}
		if a.Priority < 0 || a.Priority > 3 {
			add(name(i, a, "priority"), "invalid_priority")
		}
		if a.CBw < 0 {
			add(name(i, a, "c_bw"), "invalid_c_bw")
		}
		if a.MaxBorrow < 0 {
			add(name(i, a, "max_borrow"), "invalid_max_borrow")
		}
		if c := a.Connections; c != nil {
			if c.MaxConnections <= 0 {
				add(name(i, a, "connections.max_connections"), "invalid_max_connections")
			}
			if c.BurstConnections < c.MaxConnections {
				add(name(i, a, "connections.burst_connections"), "burst_below_max_connections")
			}
		}
		if keys.ValidID(a.AppID) {
			after[a.AppID] = a.App
		}
	}
	touched := ch.Cluster != nil
	var sum int64
	for _, a := range ch.Apps {
		touched = touched || a.ClusterID == "c1"
	}
	for _, a := range after {
		if a.ClusterID == "c1" {
			sum += a.GuaranteedQuota
		}
	}
	// the one cap, (1 - reserved_ratio) x capacity; a change that adds nothing to an excess
	// (the sum not raised, the cap not lowered) passes
	limit := math.Floor(float64(cl.Capacity)*(1-cl.ReservedRatio) + 1e-6)
	worse := sum > beforeSum || limit < beforeCap
	if touched && cl.Capacity > 0 && cl.ReservedRatio >= 0 && cl.ReservedRatio < 1 && float64(sum) > limit && worse {
		add("clusters[c1].guaranteed_quota", "over_allocation")
	}
	sort.Strings(out)
	return out
}

// Property 11 (Req 16.2-16.5): the validator rejects exactly the changes that break a rule —
// guaranteed quotas above (1 - reserved_ratio) of capacity, burst below guaranteed, priority outside 0-3, and
// the id, quota, borrow, c_bw and connection rules — naming each broken field; it never writes
// (dry run or not); and whatever it accepts the scripts accept too.
func TestProperty11ConfigValidation(t *testing.T) {
	f := testutil.NewFixture(t)
	audit := &auditLog{}
	v := validate.New(f.Store, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), audit)
	rapid.Check(t, func(rt *rapid.T) {
		if err := f.RDB.FlushDB(f.Ctx).Err(); err != nil {
			rt.Fatal(err)
		}
		ratio := rapid.SampledFrom([]float64{0.05, 0.1, 0.2}).Draw(rt, "ratio")
		cl := store.Cluster{ID: "c1", Capacity: rapid.Int64Range(10, 100_000).Draw(rt, "capacity"), ReservedRatio: ratio}
		if _, err := f.Store.PutCluster(f.Ctx, cl); err != nil {
			rt.Fatal(err)
		}
		existing := map[string]store.App{}
		for _, id := range ids[:3] {
			if !rapid.Bool().Draw(rt, "exists_"+id) {
				continue
			}
			a := store.App{AppID: id, ClusterID: "c1", GuaranteedQuota: rapid.Int64Range(1, cl.Capacity/4+1).Draw(rt, "g"),
				Priority: 1, CBw: 1, Enabled: true}
			a.BurstQuota = a.GuaranteedQuota
			if _, err := f.Store.PutApp(f.Ctx, a); err == nil {
				existing[id] = a
			}
		}
		ch := validate.Change{}
		if rapid.Bool().Draw(rt, "change_cluster") {
			c := store.Cluster{ID: "c1", Capacity: rapid.Int64Range(-5, 100_000).Draw(rt, "new_capacity"),
				ReservedRatio: rapid.SampledFrom([]float64{-0.1, 0.05, 0.1, 0.2, 1}).Draw(rt, "new_ratio")}
			ch.Cluster = &c
		}
		for i, n := 0, rapid.IntRange(0, 4).Draw(rt, "apps"); i < n; i++ {
			g := rapid.Int64Range(-2, cl.Capacity).Draw(rt, "guaranteed")
			a := validate.App{App: store.App{
				AppID:           rapid.SampledFrom(ids).Draw(rt, "app_id"),
				ClusterID:       rapid.SampledFrom([]string{"c1", "c1", "c1", "c2", "b d"}).Draw(rt, "cluster_id"),
				GuaranteedQuota: g,
				BurstQuota:      rapid.Int64Range(g-3, 3*g+3).Draw(rt, "burst"),
				Priority:        rapid.IntRange(-1, 4).Draw(rt, "priority"),
				CBw:             rapid.Int64Range(-1, 3).Draw(rt, "c_bw"),
				MaxBorrow:       rapid.Int64Range(-1, 100).Draw(rt, "max_borrow"),
				Enabled:         true,
			}}
			if rapid.Bool().Draw(rt, "connections") {
				m := rapid.Int64Range(-1, 10).Draw(rt, "max_connections")
				a.Connections = &validate.ConnLimits{MaxConnections: m, BurstConnections: rapid.Int64Range(m-2, m+5).Draw(rt, "burst_connections")}
			}
			ch.Apps = append(ch.Apps, a)
		}
		dry := rapid.Bool().Draw(rt, "dry_run")
		before := snapshot(rt, f)
		res, err := v.Validate(f.Ctx, "alice", ch, dry)
		if err != nil {
			rt.Fatal(err)
		}
		if after := snapshot(rt, f); !reflect.DeepEqual(before, after) {
			rt.Fatal("validation wrote to Redis")
		}
		var got []string
		for _, x := range res.Violations {
			if x.Message == "" || strings.Contains(x.Message, "%!") {
				rt.Fatalf("violation without a proper message: %+v", x)
			}
			got = append(got, x.Field+":"+x.Code)
		}
		sort.Strings(got)
		want := expected(cl, existing, ch)
		if strings.Join(got, " ") != strings.Join(want, " ") || res.Valid != (len(want) == 0) || res.DryRun != dry {
			rt.Fatalf("violations %v, want %v (valid %v)", got, want, res.Valid)
		}
		if res.Valid {
			apply(rt, f, existing, ch)
		}
	})
	audit.mu.Lock()
	defer audit.mu.Unlock()
	if len(audit.a) < 100 || audit.a[0].Actor != "alice" {
		t.Fatalf("audit hook saw %d attempts", len(audit.a))
	}
}

// apply writes an accepted change through the store — shrinking apps first, then the cluster,
// then the rest — and fails if a script refuses what the validator accepted.
func apply(t *rapid.T, f *testutil.Fixture, existing map[string]store.App, ch validate.Change) {
	apps := append([]validate.App(nil), ch.Apps...)
	sort.SliceStable(apps, func(i, j int) bool {
		return apps[i].GuaranteedQuota-existing[apps[i].AppID].GuaranteedQuota <
			apps[j].GuaranteedQuota-existing[apps[j].AppID].GuaranteedQuota
	})
	clusterDone := ch.Cluster == nil
	for _, a := range apps {
		if !clusterDone && a.GuaranteedQuota > existing[a.AppID].GuaranteedQuota {
			if _, err := f.Store.PutCluster(f.Ctx, *ch.Cluster); err != nil {
				t.Fatalf("accepted cluster refused by the script: %v", err)
			}
			clusterDone = true
		}
		if _, err := f.Store.PutApp(f.Ctx, a.App); err != nil {
			t.Fatalf("accepted app %+v refused by the script: %v", a.App, err)
		}
	}
	if !clusterDone {
		if _, err := f.Store.PutCluster(f.Ctx, *ch.Cluster); err != nil {
			t.Fatalf("accepted cluster refused by the script: %v", err)
		}
	}
	var sum int64
	z, _ := f.RDB.ZRangeWithScores(f.Ctx, keys.L1Apps("c1"), 0, -1).Result()
	for _, m := range z {
		sum += int64(m.Score)
	}
	c, _ := f.Store.GetCluster(f.Ctx, "c1")
	if float64(sum) > 0.9*float64(c.Capacity)+1e-6 {
		t.Fatalf("accepted change allocated %d of %d", sum, c.Capacity)
	}
}

// The diff names exactly the fields that change, with old and new values; every attempt is
// logged without echoing values or invalid ids.
func TestDiffAndLog(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c1", 100_000)
	f.App("c1", "a1", 1000, 2000, 1, 0)
	var buf bytes.Buffer
	v := validate.New(f.Store, slog.New(slog.NewTextHandler(&buf, nil)), nil)
	ch := validate.Change{Apps: []validate.App{
		{App: store.App{AppID: "a1", ClusterID: "c1", GuaranteedQuota: 1000, BurstQuota: 3000, Priority: 2, CBw: 1, Enabled: true}},
		{App: store.App{AppID: "n1", ClusterID: "c1", GuaranteedQuota: 10, BurstQuota: 10, Enabled: true},
			Connections: &validate.ConnLimits{MaxConnections: 5, BurstConnections: 8}},
	}}
	res, err := v.Validate(f.Ctx, "bob", ch, true)
	if err != nil || !res.Valid || !res.DryRun {
		t.Fatalf("%+v %v", res, err)
	}
	got := map[string]string{}
	for _, d := range res.Diff {
		got[d.Path] = fmt.Sprintf("%v->%v", d.Old, d.New)
	}
	want := map[string]string{
		"apps[a1].burst_quota": "2000->3000", "apps[a1].priority": "1->2",
		"apps[n1].cluster_id": "<nil>->c1", "apps[n1].guaranteed_quota": "<nil>->10", "apps[n1].burst_quota": "<nil>->10",
		"apps[n1].priority": "<nil>->0", "apps[n1].c_bw": "<nil>->0", "apps[n1].max_borrow": "<nil>->0",
		"apps[n1].enabled": "<nil>->true", "apps[n1].connections.max_connections": "<nil>->5",
		"apps[n1].connections.burst_connections": "<nil>->8",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("diff %v\nwant %v", got, want)
	}
	bad := validate.Change{Apps: []validate.App{{App: store.App{AppID: "x\ny=1", ClusterID: "c1", GuaranteedQuota: 200_000, BurstQuota: 1}}}}
	res, _ = v.Validate(f.Ctx, "bob", bad, false)
	if res.Valid {
		t.Fatal("bad change accepted")
	}
	log := buf.String()
	if strings.Count(log, "config validation") != 2 || !strings.Contains(log, "dry_run=true") ||
		!strings.Contains(log, "config validation rejected") || strings.Contains(log, "y=1") || strings.Contains(log, "200000") {
		t.Fatalf("log:\n%s", log)
	}
}
