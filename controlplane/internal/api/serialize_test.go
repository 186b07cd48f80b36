package api

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"tollgate/internal/keys"
)

// writers is how many concurrent writers each case of TestConcurrentWrites runs.
const writers = 50

// race runs fn(i) for i in [0, writers) at once (released together) and returns the statuses.
func race(fn func(i int) result) []result {
	out := make([]result, writers)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range writers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			out[i] = fn(i)
		}()
	}
	start.Done()
	done.Wait()
	return out
}

func count(rs []result, code int) int {
	n := 0
	for _, r := range rs {
		if r.code == code {
			n++
		}
	}
	return n
}

// agree checks that what the API shows of the cluster's apps is what the gateway enforces: each
// app's L2 hash (the fields the scripts read) and its member of L1's allocation set hold the
// API's values, no L2 hash or member exists without an app, the connection-limit hash is the
// API's, and L1's maintained allocated sum is the sum of the apps' guaranteed quotas.
func agree(t *testing.T, f *fixture, tok, cluster string, ids []string) {
	t.Helper()
	ctx := context.Background()
	sum := int64(0)
	for _, id := range ids {
		res := f.call(t, "GET", "/api/v1/apps/"+id, tok, nil)
		l2, err := f.rdb.HGetAll(ctx, keys.L2(cluster, id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, zerr := f.rdb.ZScore(ctx, keys.L1Apps(cluster), id).Result()
		conn, err := f.rdb.HGetAll(ctx, keys.ConnConfig(cluster, id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if res.code == 404 {
			if len(l2) > 0 || zerr == nil || len(conn) > 0 {
				t.Errorf("app %s: the API has none, Redis has L2 %v, an allocation (%v), limits %v", id, l2, zerr == nil, conn)
			}
			continue
		}
		if res.code != 200 {
			t.Fatalf("GET %s: %d %s", id, res.code, res.raw)
		}
		for _, k := range []string{"guaranteed_quota", "burst_quota", "priority", "c_bw", "max_borrow"} {
			if want := fmt.Sprint(res.get("data", k)); l2[k] != want {
				t.Errorf("app %s: the API shows %s %s, L2 holds %q", id, k, want, l2[k])
			}
		}
		enabled := "0"
		if res.get("data", "enabled") == true {
			enabled = "1"
		}
		if l2["enabled"] != enabled {
			t.Errorf("app %s: the API shows enabled %s, L2 holds %q", id, enabled, l2["enabled"])
		}
		g, _ := strconv.ParseInt(fmt.Sprint(res.get("data", "guaranteed_quota")), 10, 64)
		if z, err := f.rdb.ZScore(ctx, keys.L1Apps(cluster), id).Result(); err != nil || int64(z) != g {
			t.Errorf("app %s: guaranteed %d, L1's allocation set holds %v (%v)", id, g, z, err)
		}
		sum += g
		for _, k := range []string{"max_connections", "burst_connections"} {
			if v := res.get("data", k); v != nil && conn[k] != fmt.Sprint(v) {
				t.Errorf("app %s: the API shows %s %v, the gateway reads %q", id, k, v, conn[k])
			} else if v == nil && conn[k] != "" {
				t.Errorf("app %s: the API shows no %s, the gateway reads %q", id, k, conn[k])
			}
		}
	}
	alloc, err := f.rdb.HGet(ctx, keys.L1(cluster), "allocated").Int64()
	if err != nil {
		t.Fatal(err)
	}
	z, err := f.rdb.ZRangeWithScores(ctx, keys.L1Apps(cluster), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	zsum := int64(0)
	for _, m := range z {
		zsum += int64(m.Score)
	}
	if alloc != sum || zsum != sum {
		t.Errorf("cluster %s: L1 allocated %d, allocation set %d, the apps' guaranteed quotas %d", cluster, alloc, zsum, sum)
	}
}

// TestConcurrentWrites: 50 writers at once per case, through the admin API over a real Redis.
// Creates of one id answer exactly one 201; after updates, deletes and a mix of every kind of
// write, the API shows what the gateway enforces and L1's allocated sum is the guaranteed
// quotas' sum. Access keys, buckets, rules and breakers: one 201 per id, the maps consistent.
func TestConcurrentWrites(t *testing.T) {
	f := newFixture(t)
	tok := f.admin(t)
	const cl = "race"
	if r := f.call(t, "PUT", "/api/v1/clusters/"+cl, tok, map[string]any{"capacity": 100000, "reserved_ratio": 0.1}); r.code != 201 && r.code != 200 {
		t.Fatalf("cluster: %d %s", r.code, r.raw)
	}
	app := func(id string, g int) map[string]any {
		return map[string]any{"app_id": id, "cluster_id": cl, "guaranteed_quota": g, "burst_quota": 2 * g,
			"priority": g % 4, "max_connections": g, "burst_connections": g + 5}
	}

	t.Run("creates", func(t *testing.T) {
		rs := race(func(i int) result { return f.call(t, "POST", "/api/v1/apps", tok, app("c1", 100+i)) })
		if n, c := count(rs, 201), count(rs, 409); n != 1 || c != writers-1 {
			t.Fatalf("creates of one id: %d × 201, %d × 409 (want 1 and %d)", n, c, writers-1)
		}
		for _, r := range rs {
			if r.code == 409 && r.errCode() != "already_exists" {
				t.Fatalf("a refused create: %s", r.raw)
			}
		}
		agree(t, f, tok, cl, []string{"c1"})
	})

	t.Run("creates at the cap", func(t *testing.T) {
		// 90,000 allocatable; c1 holds 100-149: 50 apps of 2,000 each, room for 44 or 45
		rs := race(func(i int) result {
			return f.call(t, "POST", "/api/v1/apps", tok, app(fmt.Sprintf("cap%02d", i), 2000))
		})
		n := count(rs, 201)
		if n+count(rs, 400) != writers || n < 44 || n > 45 {
			t.Fatalf("creates up to the cap: %d × 201, %d × 400 of %d", n, count(rs, 400), writers)
		}
		for _, r := range rs {
			if r.code == 400 && !violation(r, "clusters[race].guaranteed_quota", "over_allocation") {
				t.Fatalf("a refused create: %s", r.raw)
			}
		}
		ids := []string{"c1"}
		for i := range writers {
			ids = append(ids, fmt.Sprintf("cap%02d", i))
		}
		agree(t, f, tok, cl, ids)
		for _, id := range ids[1:] {
			f.call(t, "DELETE", "/api/v1/apps/"+id, tok, nil)
		}
		agree(t, f, tok, cl, ids)
	})

	t.Run("updates", func(t *testing.T) {
		rs := race(func(i int) result {
			return f.call(t, "PUT", "/api/v1/apps/c1", tok, map[string]any{"guaranteed_quota": 10 + i,
				"burst_quota": 1000 + i, "priority": i % 4, "max_connections": 10 + i, "burst_connections": 20 + i})
		})
		if n := count(rs, 200); n != writers {
			t.Fatalf("updates: %d × 200 of %d", n, writers)
		}
		agree(t, f, tok, cl, []string{"c1"})
	})

	t.Run("connection limits", func(t *testing.T) {
		race(func(i int) result {
			return f.call(t, "PUT", "/api/v1/connections/c1", tok, map[string]any{"max_connections": 1 + i, "burst_connections": 100 + i})
		})
		agree(t, f, tok, cl, []string{"c1"})
	})

	t.Run("deletes", func(t *testing.T) {
		rs := race(func(i int) result { return f.call(t, "DELETE", "/api/v1/apps/c1", tok, nil) })
		if n, nf := count(rs, 200), count(rs, 404); n != 1 || nf != writers-1 {
			t.Fatalf("deletes of one id: %d × 200, %d × 404", n, nf)
		}
		agree(t, f, tok, cl, []string{"c1"})
	})

	t.Run("mixed", func(t *testing.T) {
		ids := []string{"m0", "m1", "m2"}
		rs := race(func(i int) result {
			id := ids[i%len(ids)]
			switch (i / len(ids)) % 4 {
			case 0:
				return f.call(t, "POST", "/api/v1/apps", tok, app(id, 50+i))
			case 1:
				return f.call(t, "PUT", "/api/v1/apps/"+id, tok, map[string]any{"guaranteed_quota": 70 + i, "burst_quota": 500})
			case 2:
				return f.call(t, "DELETE", "/api/v1/apps/"+id, tok, nil)
			default:
				return f.call(t, "PUT", "/api/v1/connections/"+id, tok, map[string]any{"max_connections": 3 + i})
			}
		})
		for _, r := range rs {
			if r.code >= 500 {
				t.Fatalf("a mixed write failed: %d %s", r.code, r.raw)
			}
		}
		agree(t, f, tok, cl, ids)
	})

	t.Run("access keys, buckets, rules, breakers", func(t *testing.T) {
		ctx := context.Background()
		for _, id := range []string{"k0", "k1"} {
			if r := f.call(t, "POST", "/api/v1/apps", tok, app(id, 10)); r.code != 201 {
				t.Fatalf("app %s: %d %s", id, r.code, r.raw)
			}
		}
		rs := race(func(i int) result {
			return f.call(t, "POST", fmt.Sprintf("/api/v1/apps/k%d/access-keys", i%2), tok, map[string]any{"access_key_id": "AKIARACE0000000000001"})
		})
		if n := count(rs, 201); n != 1 {
			t.Fatalf("one access key added to two apps at once: %d × 201", n)
		}
		owner, _ := f.rdb.HGet(ctx, keys.AccessKeys(), "AKIARACE0000000000001").Result()
		for _, a := range []string{"k0", "k1"} {
			in, _ := f.rdb.SIsMember(ctx, keys.AppAccessKeys(a), "AKIARACE0000000000001").Result()
			if in != (a == owner) {
				t.Errorf("access key owned by %s, in %s's set: %v", owner, a, in)
			}
		}
		race(func(i int) result {
			return f.call(t, "PUT", "/api/v1/buckets/race-bucket", tok, map[string]any{"app_id": fmt.Sprintf("k%d", i%2)})
		})
		owner, _ = f.rdb.HGet(ctx, keys.Buckets(), "race-bucket").Result()
		for _, a := range []string{"k0", "k1"} {
			in, _ := f.rdb.SIsMember(ctx, keys.AppBuckets(a), "race-bucket").Result()
			if in != (a == owner) {
				t.Errorf("bucket owned by %s, in %s's set: %v", owner, a, in)
			}
		}
		rs = race(func(i int) result {
			return f.call(t, "POST", "/api/v1/rules", tok, map[string]any{"id": "race-rule", "scope": "global",
				"algorithm": "sliding_window", "limit": 100 + i, "window_seconds": 1})
		})
		if n := count(rs, 201); n != 1 {
			t.Fatalf("creates of one rule: %d × 201", n)
		}
		rs = race(func(i int) result {
			return f.call(t, "PUT", "/api/v1/breakers/race-breaker", tok, map[string]any{"failure_threshold": 5 + i})
		})
		if n := count(rs, 201); n != 1 || count(rs, 200) != writers-1 {
			t.Fatalf("puts of one new breaker: %d × 201, %d × 200", n, count(rs, 200))
		}
	})

	t.Run("partial cluster updates", func(t *testing.T) {
		ctx := context.Background()
		race(func(i int) result {
			if i%2 == 0 {
				return f.call(t, "PUT", "/api/v1/clusters/"+cl, tok, map[string]any{"capacity": 200000 + i})
			}
			return f.call(t, "PUT", "/api/v1/clusters/"+cl, tok, map[string]any{"reserved_ratio": 0.05 + float64(i)/1000})
		})
		res := f.call(t, "GET", "/api/v1/clusters/"+cl, tok, nil)
		l1, err := f.rdb.HMGet(ctx, keys.L1(cl), "capacity", "reserved_ratio").Result()
		if err != nil {
			t.Fatal(err)
		}
		capa, ratio := fmt.Sprint(res.get("data", "capacity")), fmt.Sprint(res.get("data", "reserved_ratio"))
		if capa != l1[0] || ratio != l1[1] {
			t.Fatalf("the API shows capacity %s ratio %s, L1 holds %v", capa, ratio, l1)
		}
		// every writer set one field: a write that put back a field it had read stale shows
		if n, _ := strconv.Atoi(capa); n < 200000 || ratio == "0.1" {
			t.Fatalf("a partial update was lost: capacity %s, reserved_ratio %s", capa, ratio)
		}
	})
}

// TestConfigBusy: a write that waits longer than the lock's wait (another replica holds it) is
// a 503 config_busy with Retry-After, and nothing is written.
func TestConfigBusy(t *testing.T) {
	f := newFixture(t)
	tok := f.admin(t)
	ctx := context.Background()
	f.store.SetWriteLockWait(200 * time.Millisecond)
	if err := f.rdb.Set(ctx, keys.ConfigWriteLock(), "another-replica", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r := f.call(t, "PUT", "/api/v1/clusters/busy", tok, map[string]any{"capacity": 1000})
	if r.code != 503 || r.errCode() != "config_busy" || r.hdr.Get("Retry-After") == "" {
		t.Fatalf("a write while another holds the lock: %d %v %s", r.code, r.hdr, r.raw)
	}
	if n, _ := f.rdb.Exists(ctx, keys.L1("busy")).Result(); n != 0 {
		t.Fatal("the refused write was written")
	}
	f.rdb.Del(ctx, keys.ConfigWriteLock())
	if r := f.call(t, "PUT", "/api/v1/clusters/busy", tok, map[string]any{"capacity": 1000}); r.code != 200 {
		t.Fatalf("once the lock is free: %d %s", r.code, r.raw)
	}
}
