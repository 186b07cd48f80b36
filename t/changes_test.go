package t

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"tollgate/internal/store"
)

// hscanCalls is Redis' count of HSCAN commands (INFO commandstats): a full config load walks the
// apps index with HSCAN; a change applied from the change log does not.
func (s *stack) hscanCalls() int64 {
	s.t.Helper()
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_hscan:calls=") {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.SplitN(line[len("cmdstat_hscan:calls="):], ",", 2)[0], "\r"), 10, 64)
			return v
		}
	}
	return 0
}

func manyApps(prefix string, n int) []store.App {
	apps := make([]store.App, 0, n)
	for i := 0; i < n; i++ {
		apps = append(apps, app(fmt.Sprintf("%s-%05d", prefix, i), 10, 100))
	}
	return apps
}

// Issue 20 item 2: with 5,000 apps configured, a new app and a changed one reach the node as
// those changes (the change log), not as a reload of every app: no HSCAN, no new full load;
// a change the log does not describe as one app (here a bare version bump) still loads
// everything.
func TestConfigChangeAppliedWithoutFullLoad(t *testing.T) {
	s := newStack(t, stackOptions{apps: manyApps("many", 5000)})
	g := s.gw()
	v0, err := s.store.ConfigVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0)
	loads, scans := g.Metric("ratelimit_config_full_loads_total"), s.hscanCalls()
	if r := g.Do("HEAD", "/bucket/obj", "late-app", nil, nil); r.Status != 403 {
		t.Fatalf("late-app before it exists: status %d, want 403", r.Status)
	}

	if _, err := s.store.PutApp(context.Background(), app("late-app", 10, 100)); err != nil {
		t.Fatal(err)
	}
	off := app("many-00042", 10, 100)
	off.Enabled = false
	if _, err := s.store.PutApp(context.Background(), off); err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0 + 2)
	if r := g.Do("HEAD", "/bucket/obj", "late-app", nil, nil); r.Status != 200 {
		t.Fatalf("late-app after its change: status %d, want 200", r.Status)
	}
	if r := g.Do("HEAD", "/bucket/obj", "many-00042", nil, nil); r.Status == 200 {
		t.Fatalf("many-00042 disabled: status %d", r.Status)
	}
	if got := g.Metric("ratelimit_config_full_loads_total"); got != loads {
		t.Errorf("full loads %v -> %v: the changes were applied by reloading everything", loads, got)
	}
	if got := s.hscanCalls(); got != scans {
		t.Errorf("HSCAN calls %d -> %d: the apps index was walked for two app changes", scans, got)
	}
	if got := g.Metric("ratelimit_config_changes_applied_total"); got < 2 {
		t.Errorf("changes applied: %v, want >= 2", got)
	}

	// a change that is not one app's: everything is loaded again
	if _, err := s.store.Bump(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0 + 3)
	eventually(t, "a full load for a change that is not an app's", func() bool {
		return g.Metric("ratelimit_config_full_loads_total") > loads && s.hscanCalls() > scans
	})
}

// Issue 20 item 2/3: a config_dict too small for the apps keeps serving every tenant (the apps it
// has no room for are looked up on demand), raises ratelimit_config_dict_partial, counts the
// entries that did not fit and shows the zone's fill (ratelimit_shm_*_bytes).
func TestFullConfigDictRefusesNoTenant(t *testing.T) {
	apps := manyApps("full", 3000)
	s := newStack(t, stackOptions{apps: apps, configDict: "256k"})
	g := s.gw()
	v0, err := s.store.ConfigVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0)
	if g.Metric("ratelimit_config_dict_partial") != 1 || g.Metric("ratelimit_config_dict_full_total") == 0 {
		t.Fatalf("config_dict of 256k holds 3,000 apps? partial %v, entries that did not fit %v",
			g.Metric("ratelimit_config_dict_partial"), g.Metric("ratelimit_config_dict_full_total"))
	}
	capacity := g.Metric(`ratelimit_shm_capacity_bytes{zone="config_dict"}`)
	free := g.Metric(`ratelimit_shm_free_bytes{zone="config_dict"}`)
	if capacity < 200<<10 || free > 0.05*capacity {
		t.Errorf("config_dict on /metrics: capacity %v bytes, %v free; want about 256k, under 5 %% free",
			capacity, free)
	}
	var mu sync.Mutex
	refused := map[int][]string{}
	var wg sync.WaitGroup
	ch := make(chan string)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ch {
				if st := g.Do("HEAD", "/bucket/obj", id, nil, nil).Status; st != 200 {
					mu.Lock()
					refused[st] = append(refused[st], id)
					mu.Unlock()
				}
			}
		}()
	}
	for _, a := range apps {
		ch <- a.AppID
	}
	close(ch)
	wg.Wait()
	for st, ids := range refused {
		t.Errorf("%d apps answered %d, e.g. %s", len(ids), st, ids[0])
	}
	if g.Metric("ratelimit_config_lookups_total") == 0 {
		t.Error("no app was looked up on demand")
	}
	if r := g.Do("HEAD", "/bucket/obj", "no-such-app", nil, nil); r.Status != 403 {
		t.Errorf("an unknown app on a partial node: status %d, want 403", r.Status)
	}
}
