package t

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tollgate/t/harness"
)

// genView is /_t/generation: the config generation as one worker sees it.
type genView struct {
	PID  int      `json:"pid"`
	Page *float64 `json:"page"` // the mirror page the request path reads
	Dict *float64 `json:"dict"` // config_dict, the authority
	Addr string   `json:"addr"` // where the page is mapped
}

// workers lists the worker pids of a gateway's nginx master.
func workers(t *testing.T, g *harness.Gateway) []int {
	t.Helper()
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(g.PID())).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// A worker sees a config generation the moment another worker moved it: the request path
// reads it from a page the master mapped before forking, not from config_dict. So it stays
// after a worker was killed and replaced, and after reloads, which find the page they mapped
// before instead of mapping one each.
func TestConfigGenerationReachesEveryWorker(t *testing.T) {
	s := newStack(t, stackOptions{workers: 2})
	g := s.gw()
	fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	view := func(action string) genView {
		t.Helper()
		resp, err := fresh.Get(g.TestURL + "/_t/" + action)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v genView
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.PID == 0 || v.Dict == nil {
			t.Fatalf("/_t/%s: %+v %v", action, v, err)
		}
		return v
	}
	var addr string
	check := func(stage string) {
		t.Helper()
		for round := 0; round < 5; round++ {
			b := view("bump")
			var other genView
			for i := 0; i < 64 && other.PID == 0; i++ {
				if v := view("generation"); v.PID != b.PID {
					other = v
				}
			}
			if other.PID == 0 {
				t.Fatalf("%s: 64 new connections all reached worker %d", stage, b.PID)
			}
			if other.Page == nil || other.Addr == "" {
				t.Fatalf("%s: worker %d has no generation page", stage, other.PID)
			}
			if *other.Page < *b.Dict {
				t.Fatalf("%s: worker %d moved the generation to %v, worker %d still sees %v",
					stage, b.PID, *b.Dict, other.PID, *other.Page)
			}
			if addr == "" {
				addr = other.Addr
			} else if other.Addr != addr {
				t.Fatalf("%s: page at %s, was at %s: a page mapped for each cycle", stage,
					other.Addr, addr)
			}
		}
	}
	check("at start")

	before := workers(t, g)
	if len(before) != 2 {
		t.Fatalf("workers %v, want 2", before)
	}
	if err := syscall.Kill(before[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new worker in place of the killed one", func() bool {
		now := workers(t, g)
		return len(now) == 2 && !slices.Contains(now, before[0])
	})
	check("after a worker was killed")

	for i := 0; i < 2; i++ {
		old := workers(t, g) // with the old workers of an earlier reload that are still exiting
		g.Signal(syscall.SIGHUP)
		// new connections reach only the new workers (the old ones stop listening at once)
		eventually(t, "the workers of the reload", func() bool {
			fresh := 0
			for _, pid := range workers(t, g) {
				if !slices.Contains(old, pid) {
					fresh++
				}
			}
			return fresh == 2
		})
	}
	check("after two reloads")
}
