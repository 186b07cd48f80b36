package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

func sample() Document {
	return Document{Kind: Kind,
		Clusters: []Cluster{{ID: "c1", Capacity: 1000, ReservedRatio: 0.1, Connections: &ClusterConn{MaxConnections: 50, ReservedRatio: 0.2}}},
		Apps: []App{{App: store.App{AppID: "a1", ClusterID: "c1", GuaranteedQuota: 500, BurstQuota: 900, Priority: 1, CBw: 1, Enabled: true},
			Connections: &validate.ConnLimits{MaxConnections: 5, BurstConnections: 6}}}}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	d := sample()
	for _, f := range []string{"json", "yaml"} {
		b, err := Encode(d, f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", f, err, b)
		}
		again, _ := Encode(got, f)
		if string(again) != string(b) {
			t.Fatalf("%s: not stable:\n%s\n%s", f, b, again)
		}
	}
}

func TestDecodeIsStrict(t *testing.T) {
	for _, bad := range []string{"", "{", `{"kind":"tollgate-config/v1","x":1}`, `{"kind":"other"}`,
		`{"kind":"tollgate-config/v1"} {}`, "kind: [", `{"kind":"tollgate-config/v1","apps":[{"app_id":1}]}`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}

func TestCheckFindsEveryViolation(t *testing.T) {
	if vs := Check(sample()); len(vs) != 0 {
		t.Fatalf("a good document: %v", vs)
	}
	d := sample()
	d.Apps = append(d.Apps, App{App: store.App{AppID: "a2", ClusterID: "c1", GuaranteedQuota: 500, BurstQuota: 100, Priority: 9}},
		App{App: store.App{AppID: "a3", ClusterID: "nope", GuaranteedQuota: 1, BurstQuota: 1}})
	codes := map[string]bool{}
	for _, v := range Check(d) {
		codes[v.Code] = true
	}
	for _, want := range []string{"burst_below_guaranteed", "invalid_priority", "unknown_cluster", "over_allocation"} {
		if !codes[want] {
			t.Errorf("no %s in %v", want, codes)
		}
	}
}

func TestDiffHidesSecrets(t *testing.T) {
	a, b := sample(), sample()
	b.Apps[0].BurstQuota = 950
	b.JWTSecret = strings.Repeat("ab", 32)
	d := Diff(a, b)
	if len(d) != 2 || d[0].Path != "apps[a1].burst_quota" || d[1].Path != "jwt_secret" {
		t.Fatalf("diff %+v", d)
	}
	if s, _ := d[1].New.(string); strings.Contains(s, "abab") {
		t.Fatalf("the diff shows the secret: %v", s)
	}
}

func TestBackupsArePrivateAndRotated(t *testing.T) {
	b := &Backups{Dir: filepath.Join(t.TempDir(), "bk"), Keep: 3}
	var last string
	for i := int64(1); i <= 5; i++ {
		n, err := b.Write(Snapshot{Epoch: "e", Version: i, Config: sample()})
		if err != nil {
			t.Fatal(err)
		}
		last = n
	}
	names, _ := b.List()
	if len(names) != 3 || names[0] != last {
		t.Fatalf("kept %v, want the 3 newest (newest %s first)", names, last)
	}
	for _, n := range names {
		fi, _ := os.Stat(filepath.Join(b.Dir, n))
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v", n, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(b.Dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", fi.Mode().Perm())
	}
	s, _, err := b.Latest()
	if err != nil || s.Version != 5 {
		t.Fatalf("latest %+v %v", s, err)
	}
	if _, err := b.Load("../etc/passwd"); err == nil {
		t.Fatal("Load took a path")
	}
}

// A Redis that forbids CONFIG (as managed services do) reads as unknown, not as an error.
func TestProbeReadsPersistence(t *testing.T) {
	aof := testutil.StartRedisArgs(t, "--appendonly", "yes")
	if p := Probe(context.Background(), aof.Client()); p.Persists != "aof" || p.AppendFsync != "everysec" {
		t.Fatalf("aof: %+v", p)
	}
	none := testutil.StartRedis(t)
	if p := Probe(context.Background(), none.Client()); p.Persists != "no" {
		t.Fatalf("no persistence: %+v", p)
	}
	managed := testutil.StartRedisArgs(t, "--rename-command", "CONFIG", "")
	if p := Probe(context.Background(), managed.Client()); p.Persists != "unknown" {
		t.Fatalf("CONFIG forbidden: %+v", p)
	}
}

// A snapshot judges only the store it was taken of: an empty Redis is lost for the control
// plane whose newest snapshot names it, new for one whose snapshot is of another Redis.
func TestInitJudgesOnlyTheSnapshotsRedis(t *testing.T) {
	r := testutil.StartRedis(t)
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(r.Client(), set)
	b := &Backups{Dir: t.TempDir(), Keep: 5}
	if _, err := b.Write(Snapshot{Epoch: "e1", Version: 7, Redis: "redis://this:1/0", Config: sample()}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		lost bool
	}{{"redis://this:1/0", true}, {"redis://other:2/0", false}} {
		g := New(Options{Redis: r.Client(), Store: st, Backups: b, RedisID: c.id})
		if err := g.Init(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := g.Status(); g.Lost() != c.lost || (c.lost && st.Reason != ReasonEpochMissing) {
			t.Fatalf("%s: status %+v, want lost=%v", c.id, st, c.lost)
		}
	}
}

// A config write right after the store was wiped (before the periodic check saw it) is refused.
func TestWriteIntoAJustWipedStoreIsRefused(t *testing.T) {
	r := testutil.StartRedis(t)
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := store.New(r.Client(), set)
	g := New(Options{Redis: r.Client(), Store: st, Check: time.Hour})
	if err := g.Init(ctx); err != nil {
		t.Fatal(err)
	}
	st.SetHooks(g.Hooks())
	if _, err := st.PutCluster(ctx, store.Cluster{ID: "c", Capacity: 100}); err != nil {
		t.Fatal(err)
	}
	if err := r.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutCluster(ctx, store.Cluster{ID: "c", Capacity: 100}); !errors.Is(err, store.ErrStoreLost) {
		t.Fatalf("write into the wiped store: %v, want ErrStoreLost", err)
	}
	if n, _ := r.Client().DBSize(ctx).Result(); n != 0 {
		t.Fatalf("%d keys written into the wiped store", n)
	}
	if s := g.Status(); s.State != "lost" || s.Reason != ReasonEpochMissing {
		t.Fatalf("status %+v", s)
	}
}

// A stream of writes is snapshotted in a few exports, not one per write, and the last snapshot
// holds the last write: nothing written is left out.
func TestSnapshotsCoalesceAStreamOfWrites(t *testing.T) {
	r := testutil.StartRedis(t)
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := set.LoadAll(context.Background(), r.Client()); err != nil {
		t.Fatal(err)
	}
	st := store.New(r.Client(), set)
	b := &Backups{Dir: t.TempDir(), Keep: 1000}
	g := New(Options{Redis: r.Client(), Store: st, Backups: b, RedisID: "redis://this:1/0", Wait: 0,
		SnapshotGap: 300 * time.Millisecond})
	if err := g.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.SetHooks(g.Hooks())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx, Reader{Redis: r.Client(), Store: st}) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := st.PutCluster(ctx, store.Cluster{ID: "c1", Capacity: 1_000_000, ReservedRatio: 0.1}); err != nil {
		t.Fatal(err)
	}
	const writes = 200
	var last int64
	start := time.Now()
	for i := 0; i < writes; i++ {
		if _, err := st.PutApp(ctx, store.App{AppID: fmt.Sprintf("a%03d", i), ClusterID: "c1", GuaranteedQuota: 1,
			BurstQuota: 2, Priority: 1, Enabled: true}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // a stream, not a burst
	}
	if last, err = st.ConfigVersion(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		s, _, err := b.Latest()
		return err == nil && s != nil && s.Version == last && len(s.Config.Apps) == writes
	}, "the last write in the newest snapshot")
	names, _ := b.List()
	if most := int(time.Since(start)/(300*time.Millisecond)) + 2; len(names) > most {
		t.Fatalf("%d snapshots for %d writes in %v: not coalesced (at most %d)", len(names), writes, time.Since(start), most)
	}
	t.Logf("%d snapshots for %d writes", len(names), writes)
}
