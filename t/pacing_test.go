package t

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tollgate/internal/store"
)

// Bandwidth pacing (docs/operations.md "Bandwidth pacing"): the downloads of an app whose lease
// cannot pay are slowed to the app's share of the node, never cut.
//
// The app: 16 tokens/s guaranteed with C_bw 1 = 16 units of 64 KiB a second = 1 MiB/s, a burst
// of 16 tokens (1 MiB). Nothing else runs on the node: its share is the whole guarantee.
const (
	paceRate  = 1 << 20 // bytes/s of the app's guarantee
	paceQuota = 16      // tokens/s
)

func pacedApp(id string) store.App {
	return app(id, paceQuota, paceQuota)
}

// fetch GETs size bytes from the test backend through the gateway as app id and returns the
// status, the bytes that arrived, how long the transfer took, and an error if it was cut (safe
// in any goroutine).
func fetch(url, id string, size int, query string) (int, int64, time.Duration, error) {
	req, err := http.NewRequest("GET", url+"/b/paced?size="+strconv.Itoa(size)+query, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("X-App-Id", id)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		err = fmt.Errorf("download cut after %d bytes: %w", n, err)
	}
	return resp.StatusCode, n, time.Since(start), err
}

// fetchResult is what fetch returned.
type fetchResult struct {
	status int
	n      int64
	took   time.Duration
	err    error
}

// fetchAsync runs fetch (no query) in the background; its result arrives on the channel.
func fetchAsync(url, id string, size int) <-chan fetchResult {
	done := make(chan fetchResult, 1)
	go func() {
		status, n, took, err := fetch(url, id, size, "")
		done <- fetchResult{status, n, took, err}
	}()
	return done
}

// download is fetch in the test's goroutine: a cut transfer fails the test.
func download(t *testing.T, url, id string, size int, query string) (int, int64, time.Duration) {
	t.Helper()
	status, n, took, err := fetch(url, id, size, query)
	if err != nil {
		t.Fatal(err)
	}
	return status, n, took
}

// A download costlier than the app can pay is slowed, not cut: every byte arrives with a 200,
// at about the app's guaranteed rate once its burst is spent. With TOLLGATE_PACING=off the same
// download runs at the speed of the loopback (the mutation that made this test fail: the body
// filter never setting $limit_rate).
func TestPacedDownloadIsSlowedNotCut(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{pacedApp("paced")}})
	g := s.gw()
	const size = 4 << 20
	status, n, took := download(t, g.URL, "paced", size, "")
	if status != 200 || n != size {
		t.Fatalf("status %d, %d of %d bytes: a paced download must arrive whole", status, n, size)
	}
	// the settlement: the chunks paid as the bytes left, plus the remainder the log phase
	// charged (as debt), are the request's price, GET 1 + ceil(body bytes / 64 KiB), nothing
	// paid twice (mutation: the log phase settling without the chunks paid in flight — the app
	// was charged them twice)
	g.SettleMetrics()
	out := g.Metric(`ratelimit_bytes_total{app_id="paced",direction="out"}`)
	price := 1 + float64(units(int(out)))
	eventually(t, "the download's price reported", func() bool {
		return s.stats("paced")["total_consumed"] == price
	}, func() { t.Logf("consumed %v, price %v", s.stats("paced")["total_consumed"], price) })
	// the burst (1 MiB) goes at once, the other 3 MiB at 1 MiB/s
	paced := float64(size-paceRate) / took.Seconds()
	t.Logf("4 MiB in %v: %.0f KiB/s after the burst (share %d KiB/s)", took, paced/1024, paceRate/1024)
	if took < 2*time.Second {
		t.Fatalf("4 MiB of an app with 1 MiB/s took %v: not paced", took)
	}
	if took > 6*time.Second {
		t.Fatalf("4 MiB of an app with 1 MiB/s took %v: paced below its share", took)
	}
	if v := g.Metric(`ratelimit_paced_seconds_total{app_id="paced"}`); v < 1 {
		g.SettleMetrics()
		if v = g.Metric(`ratelimit_paced_seconds_total{app_id="paced"}`); v < 1 {
			t.Fatalf("ratelimit_paced_seconds_total %v after a paced transfer", v)
		}
	}
	// the filter reads the bytes sent from nginx's connection struct, checked against
	// $bytes_sent at the worker's first paced read, and nginx took $tg_ra as limit_rate_after
	// (mutation: a field more before `sent` in the filter's declaration of the struct — the
	// worker logged the mismatch)
	if log := g.ErrorLog(); strings.Contains(log, "connection struct is not the expected one") ||
		strings.Contains(log, "invalid size") {
		t.Fatalf("the pacing filter's reads: %s", log)
	}
	// the body as it left ($body_bytes_sent: the test backend's answer is chunked, and the
	// chunks' framing counts)
	if v := g.Metric(`ratelimit_bytes_total{app_id="paced",direction="out"}`); v < size || v > size*1.01 {
		t.Fatalf("ratelimit_bytes_total out %v, want %d and the chunks' framing", v, size)
	}
}

// The share is divided among the app's transfers on the node: four parallel downloads together
// move at about the app's rate, not four times it (mutation: the share not divided by the
// node's count of the app's transfers — the four took about a quarter of the time).
func TestPacingSharesTheRateAmongTransfers(t *testing.T) {
	s := newStack(t, stackOptions{workers: 2, apps: []store.App{pacedApp("paced4")}})
	g := s.gw()
	// the node holds a lease before the four start together (a first grant is in flight while
	// they would otherwise race for it)
	eventually(t, "a lease of paced4", func() bool {
		g.Do("HEAD", "/bucket/warm", "paced4", nil, nil)
		return g.State("paced4").Tokens >= 4
	})
	const size, streams = 1 << 20, 4
	var wg sync.WaitGroup
	start := time.Now()
	errs := make(chan string, streams)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// the backend answers after 300 ms: the four are admitted (1 token each) before
			// the first one's bytes spend the burst
			status, n, _, err := fetch(g.URL, "paced4", size, "&ms=300")
			if err != nil || status != 200 || n != size {
				errs <- "status " + strconv.Itoa(status) + ", " + strconv.FormatInt(n, 10) + " bytes"
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for e := range errs {
		t.Fatalf("a paced download did not arrive whole: %s", e)
	}
	total := float64(streams*size-paceRate) / took.Seconds()
	t.Logf("%d x 1 MiB in %v: %.0f KiB/s together after the burst (share %d KiB/s)", streams, took,
		total/1024, paceRate/1024)
	if took < 2*time.Second {
		t.Fatalf("%d x 1 MiB of an app with 1 MiB/s took %v: the share is not divided", streams, took)
	}
	if took > 7*time.Second {
		t.Fatalf("%d x 1 MiB of an app with 1 MiB/s took %v: paced below its share", streams, took)
	}
}

// TOLLGATE_PACING=off: the earlier behaviour, the download at full speed and charged after it
// (mutation: the setting ignored — the download was paced).
func TestPacingOff(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{pacedApp("unpaced")},
		env: map[string]string{"TOLLGATE_PACING": "off"}})
	g := s.gw()
	const size = 4 << 20
	status, n, took := download(t, g.URL, "unpaced", size, "")
	if status != 200 || n != size {
		t.Fatalf("status %d, %d of %d bytes", status, n, size)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("4 MiB with pacing off took %v: paced anyway", took)
	}
}

// A paced transfer holds its connection slot for as long as it runs and its worker's heartbeat
// keeps the slot's tracking record fresh: the leak cleanup (every 0.2 s here, a record counts as
// leaked after 1 s without a heartbeat) never reclaims a slow but live transfer (mutation: the
// heartbeat not refreshing the records of live requests — the cleanup released the paced
// transfer's slot as leaked while it ran).
func TestPacedTransferKeepsItsSlot(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{pacedApp("slow")},
		env: map[string]string{"TOLLGATE_CONN_TIMEOUT": "1", "TOLLGATE_CONN_CLEANUP_INTERVAL": "0.2"}})
	g := s.gw()
	const size = 4 << 20
	done := fetchAsync(g.URL, "slow", size)
	held := 0
	var r fetchResult
wait:
	for {
		select {
		case r = <-done:
			break wait
		case <-time.After(200 * time.Millisecond):
			if st := connStateOf(g, "slow"); st.AppCurrent == 1 {
				held++
			}
		}
	}
	if r.err != nil || r.status != 200 || r.n != size {
		t.Fatalf("status %d, %d of %d bytes (%v)", r.status, r.n, size, r.err)
	}
	if r.took < 2*time.Second || held < 5 {
		t.Fatalf("the transfer took %v and was seen holding its slot %d times: not paced long enough to prove anything", r.took, held)
	}
	eventually(t, "the slot given back", func() bool { return connStateOf(g, "slow").AppCurrent == 0 })
	if st := connStateOf(g, "slow"); st.AppLeaked != 0 {
		t.Fatalf("a paced transfer of %v was reclaimed as leaked: %+v", r.took, st)
	}
}

// With Redis down a download admitted by the fail-open budget is paid, and paced, from that
// budget (TOLLGATE_FAIL_OPEN_RATE tokens/s per app and node: 16 here, 1 MiB/s) — slowed, not
// cut (mutation: bucket.pay admitting every fail-open chunk — the download ran at full speed).
func TestPacingFromTheFailOpenBudget(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{pacedApp("failopen")},
		env: map[string]string{"TOLLGATE_FAIL_OPEN_RATE": "16"}})
	g := s.gw()
	if r := g.Do("HEAD", "/b/k", "failopen", nil, nil); r.Status != 200 {
		t.Fatalf("HEAD with Redis up: %d", r.Status)
	}
	s.redis.Stop()
	// spend what the node's lease still holds: then requests are admitted in fail-open
	eventually(t, "admissions from the fail-open budget", func() bool {
		for i := 0; i < 20; i++ {
			g.Do("HEAD", "/b/k", "failopen", nil, nil)
		}
		g.SettleMetrics()
		return g.Metric(`ratelimit_fail_open_total{app_id="failopen"}`) > 0
	})
	before := g.Metric(`ratelimit_fail_open_total{app_id="failopen"}`)
	const size = 4 << 20
	var status int
	var n int64
	var took time.Duration
	// the HEADs may have spent this second's budget: the download is admitted in the next
	eventually(t, "the download admitted", func() bool {
		status, n, took = download(t, g.URL, "failopen", size, "")
		return status != 429
	})
	if status != 200 || n != size {
		t.Fatalf("status %d, %d of %d bytes: a paced download must arrive whole", status, n, size)
	}
	t.Logf("4 MiB with Redis down in %v (fail-open budget 1 MiB/s)", took)
	g.SettleMetrics()
	if v := g.Metric(`ratelimit_fail_open_total{app_id="failopen"}`); v != before+1 {
		t.Fatalf("the download was not admitted in fail-open: %v fail-open admissions, %v before", v, before)
	}
	if took < 2*time.Second {
		t.Fatalf("4 MiB from a 1 MiB/s fail-open budget took %v: not paced", took)
	}
	if took > 8*time.Second {
		t.Fatalf("4 MiB from a 1 MiB/s fail-open budget took %v: paced below the budget", took)
	}
}

// A download with a Content-Length (what S3 backends send) is paced the same way: the filter
// stops following only a body the access phase paid in full (mutation: it stopped following
// every body of a known length — the download ran at full speed).
func TestPacedDownloadOfKnownLength(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{pacedApp("pacedcl")}})
	g := s.gw()
	const size = 3 << 20
	status, n, took := download(t, g.URL, "pacedcl", size, "&cl=1")
	if status != 200 || n != size {
		t.Fatalf("status %d, %d of %d bytes: a paced download must arrive whole", status, n, size)
	}
	t.Logf("3 MiB (Content-Length) in %v", took)
	if took < 1500*time.Millisecond || took > 5*time.Second {
		t.Fatalf("3 MiB of an app with 1 MiB/s took %v", took)
	}
}

// A reload (SIGHUP) lets a paced transfer in flight finish in its old worker, paced, whole
// (mutation: the filter ending the body when its worker is exiting, ngx.arg[2] = true on
// ngx.worker.exiting() — the download was cut at the reload).
func TestPacedTransferSurvivesReload(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{pacedApp("reload")}})
	g := s.gw()
	const size = 4 << 20
	done := fetchAsync(g.URL, "reload", size)
	eventually(t, "the transfer paced", func() bool {
		return connStateOf(g, "reload").AppCurrent == 1
	})
	time.Sleep(500 * time.Millisecond) // into the paced part (the burst takes the first second)
	g.Signal(syscall.SIGHUP)
	r := <-done
	if r.err != nil || r.status != 200 || r.n != size {
		t.Fatalf("across a reload: status %d, %d of %d bytes (%v)", r.status, r.n, size, r.err)
	}
	if r.took < 2*time.Second {
		t.Fatalf("4 MiB took %v: not paced", r.took)
	}
}

// progress is a download whose bytes so far can be read while it runs.
type progress struct {
	got    atomic.Int64
	status atomic.Int64
	done   chan error
}

func (p *progress) Write(b []byte) (int, error) {
	p.got.Add(int64(len(b)))
	return len(b), nil
}

func startDownload(url, id string, size int) *progress {
	p := &progress{done: make(chan error, 1)}
	go func() {
		req, err := http.NewRequest("GET", url+"/b/paced?size="+strconv.Itoa(size), nil)
		if err != nil {
			p.done <- err
			return
		}
		req.Header.Set("X-App-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p.done <- err
			return
		}
		defer resp.Body.Close()
		p.status.Store(int64(resp.StatusCode))
		_, err = io.Copy(p, resp.Body)
		p.done <- err
	}()
	return p
}

// Emergency applies to pacing as to admission: a P3 app's share is 0 in an emergency, so its
// paced download stalls (nginx's smallest rate) while holding its slot, and resumes whole when
// the emergency ends (mutation: the share ignoring the emergency ratio — the download went on at
// 1 MiB/s through the emergency).
func TestPacedP3StallsInEmergency(t *testing.T) {
	a := pacedApp("p3paced")
	a.Priority = 3
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{a}})
	g := s.gw()
	const size = 6 << 20
	p := startDownload(g.URL, "p3paced", size)
	eventually(t, "the download paced", func() bool { return p.got.Load() > 2<<20 })
	s.activateEmergency(30 * time.Second)
	time.Sleep(time.Second) // the notice, and what nginx had already handed to the socket
	stalled := p.got.Load()
	time.Sleep(2 * time.Second)
	moved := p.got.Load() - stalled
	t.Logf("%d bytes moved in 2 s of emergency (%d before)", moved, stalled)
	if st := connStateOf(g, "p3paced"); st.AppCurrent != 1 {
		t.Fatalf("the stalled download does not hold its slot: %+v", st)
	}
	s.deactivateEmergency()
	if err := <-p.done; err != nil || p.status.Load() != 200 || p.got.Load() != size {
		t.Fatalf("after the emergency: status %d, %d of %d bytes (%v)", p.status.Load(), p.got.Load(), size, err)
	}
	if moved > 256<<10 {
		t.Fatalf("%d bytes moved in 2 s of emergency: a P3 download was not stalled", moved)
	}
}

// The nodes' shares follow the L3 leases: an app downloading through two nodes at once gets its
// guarantee in total, each node pacing its transfers to guaranteed / active nodes (mutation: the
// node's share not divided by the app's active nodes — the two downloads took about half the
// time).
func TestPacingSharesTheRateAmongNodes(t *testing.T) {
	s := newStack(t, stackOptions{nodes: 2, workers: 1, apps: []store.App{pacedApp("twonodes")}})
	const size = 3 << 20
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan string, 2)
	for _, g := range s.gws {
		wg.Add(1)
		go func(url string) {
			defer wg.Done()
			// the backend answers after 300 ms: both are admitted before the bytes move
			status, n, _, err := fetch(url, "twonodes", size, "&ms=300")
			if err != nil || status != 200 || n != size {
				errs <- fmt.Sprintf("status %d, %d bytes (%v)", status, n, err)
			}
		}(g.URL)
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for e := range errs {
		t.Fatalf("a paced download did not arrive whole: %s", e)
	}
	t.Logf("2 x 3 MiB over two nodes in %v (guarantee 1 MiB/s in total)", took)
	if took < 4200*time.Millisecond {
		t.Fatalf("2 x 3 MiB of an app with 1 MiB/s over two nodes took %v: each node paced to the whole guarantee", took)
	}
	if took > 9*time.Second {
		t.Fatalf("2 x 3 MiB of an app with 1 MiB/s over two nodes took %v: paced below the guarantee", took)
	}
}

// ratelimit_bytes_total counts upload bodies as direction "in": a known length and a chunked
// upload (its de-chunked size) (mutation: the known length counted only for failed uploads —
// the series stayed at the chunked upload's bytes).
func TestBytesInMetric(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1})
	g := s.gw()
	if r := g.Do("PUT", "/b/up", "demo-p0", strings.NewReader(strings.Repeat("u", 200000)), nil); r.Status != 200 {
		t.Fatalf("PUT: %d", r.Status)
	}
	if r := g.Do("PUT", "/b/upc", "demo-p0", strings.NewReader(strings.Repeat("c", 70000)),
		map[string]string{"Transfer-Encoding": "chunked"}); r.Status != 200 {
		t.Fatalf("chunked PUT: %d", r.Status)
	}
	eventually(t, "the upload bytes counted", func() bool {
		g.SettleMetrics()
		return g.Metric(`ratelimit_bytes_total{app_id="demo-p0",direction="in"}`) == 270000
	}, func() { t.Logf("in: %v", g.Metric(`ratelimit_bytes_total{app_id="demo-p0",direction="in"}`)) })
}
