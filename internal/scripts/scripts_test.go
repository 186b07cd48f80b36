package scripts_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	. "tollgate/internal/scripts" // an external test: testutil's Fixture imports scripts
	"tollgate/internal/testutil"
)

func newSet(t *testing.T) *Set {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// Every script of redis-scripts/ except _common.lua is in the set, in lexical order.
func TestNamesMatchDirectory(t *testing.T) {
	files, err := filepath.Glob("../../redis-scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "_common.lua" {
			want = append(want, b[:len(b)-len(".lua")])
		}
	}
	if got := newSet(t).Names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
}

// The SHA is that of _common.lua + "\n" + script, the same text the Lua gateway loads.
func TestSHAIsCommonPlusNewlinePlusScript(t *testing.T) {
	s := newSet(t)
	common, err := os.ReadFile("../../redis-scripts/_common.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range s.Names() {
		body, err := os.ReadFile("../../redis-scripts/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum([]byte(string(common) + "\n" + string(body)))
		got, err := s.SHA(name)
		if err != nil || got != hex.EncodeToString(sum[:]) {
			t.Errorf("SHA(%s) = %s, %v; want %x", name, got, err, sum)
		}
	}
}

func TestFromFSErrors(t *testing.T) {
	if _, err := FromFS(fstest.MapFS{"d/a.lua": {Data: []byte("return 1")}}, "d"); err == nil {
		t.Error("FromFS without _common.lua: want error")
	}
	if _, err := FromFS(fstest.MapFS{"d/_common.lua": {Data: []byte("")}}, "d"); err == nil {
		t.Error("FromFS without any script: want error")
	}
}

func TestUnknownScript(t *testing.T) {
	r := testutil.StartRedis(t)
	err := newSet(t).Run(ctx(t), r.Client(), "no_such_script", nil).Err()
	if !errors.Is(err, ErrUnknownScript) {
		t.Fatalf("Run(no_such_script) error = %v, want ErrUnknownScript", err)
	}
	if _, err := newSet(t).SHA("no_such_script"); !errors.Is(err, ErrUnknownScript) {
		t.Fatalf("SHA(no_such_script) error = %v, want ErrUnknownScript", err)
	}
}

func TestLoadAllPutsEveryScriptInTheCache(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb, s := r.Client(), newSet(t)
	if err := s.LoadAll(ctx(t), rdb); err != nil {
		t.Fatalf("LoadAll: %v", err)
	}
	for _, name := range s.Names() {
		sha, _ := s.SHA(name)
		ok, err := rdb.ScriptExists(ctx(t), sha).Result()
		if err != nil || !ok[0] {
			t.Errorf("script %s (%s) not in cache after LoadAll: %v %v", name, sha, ok, err)
		}
	}
}

// clusterConfigWorks runs a real script and checks its reply.
func clusterConfigWorks(t *testing.T, rdb redis.Scripter, s *Set) {
	t.Helper()
	got, err := s.Run(ctx(t), rdb, "cluster_config",
		[]string{keys.L1("c1"), keys.L1Apps("c1")}, 1000, "0.1").Int64Slice()
	if err != nil {
		t.Fatalf("cluster_config: %v", err)
	}
	if want := []int64{1000, 0, 1000}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cluster_config = %v, want %v", got, want)
	}
}

func TestRunSurvivesScriptFlush(t *testing.T) {
	r := testutil.StartRedis(t)
	s, rdb := newSet(t), r.Client()
	if err := s.LoadAll(ctx(t), rdb); err != nil {
		t.Fatal(err)
	}
	clusterConfigWorks(t, rdb, s)
	if err := rdb.ScriptFlush(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	clusterConfigWorks(t, rdb, s)
}

func TestRunSurvivesRestart(t *testing.T) {
	r := testutil.StartRedis(t)
	s, rdb := newSet(t), r.Client()
	if err := s.LoadAll(ctx(t), rdb); err != nil {
		t.Fatal(err)
	}
	clusterConfigWorks(t, rdb, s)
	r.Restart()
	if n, _ := rdb.DBSize(ctx(t)).Result(); n != 0 {
		t.Fatalf("restarted redis has %d keys, want empty", n)
	}
	clusterConfigWorks(t, rdb, s)
}

func TestEnsureReloadsMissingScripts(t *testing.T) {
	r := testutil.StartRedis(t)
	s, rdb := newSet(t), r.Client()
	n, err := s.Ensure(ctx(t), rdb)
	if err != nil || n != s.Len() {
		t.Fatalf("Ensure on empty cache = %d, %v; want %d", n, err, s.Len())
	}
	for _, name := range s.Names() {
		sha, _ := s.SHA(name)
		if ok, _ := rdb.ScriptExists(ctx(t), sha).Result(); !ok[0] {
			t.Errorf("script %s missing after Ensure", name)
		}
	}
}
