package t

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 20 item 1: a worker whose event loop stalls (here 250 ms CPU spins, back to back, in
// the workers serving the test location) resumes its Redis calls late; that lateness is the
// worker's own, not Redis' (which answers at once), so the node never degrades for it.
func TestWorkerStallIsNotRedisLatency(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var spins, reqs atomic.Int64
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if resp, err := g.Client.Get(g.TestURL + "/_t/spin?ms=250"); err == nil {
					resp.Body.Close()
					spins.Add(1)
				}
			}
		}()
	}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				g.Do("HEAD", "/bucket/obj", "demo-p1", nil, nil)
				reqs.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	maxLevel := 0
	for time.Now().Before(deadline) {
		if l := healthOf(t, g).DegradationLevel; l > maxLevel {
			maxLevel = l
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d spins of 250 ms, %d requests", spins.Load(), reqs.Load())
	if spins.Load() < 10 {
		t.Fatalf("only %d spins: the workers were not stalled", spins.Load())
	}
	if maxLevel > 0 || strings.Contains(g.ErrorLog(), "degradation level 0 (normal) ->") {
		t.Errorf("the node degraded (level up to %d) though Redis answered at once", maxLevel)
	}
}
