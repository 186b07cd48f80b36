package t

import (
	"io"
	"net/http"
	"strconv"
	"sync"
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

// download GETs size bytes from the test backend through the gateway as app id and returns the
// status, the bytes that arrived and how long the transfer took.
func download(t *testing.T, url, id string, size int, query string) (int, int64, time.Duration) {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/b/paced?size="+strconv.Itoa(size)+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-App-Id", id)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		t.Fatalf("download cut after %d bytes: %v", n, err)
	}
	return resp.StatusCode, n, time.Since(start)
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
			status, n, _ := download(t, g.URL, "paced4", size, "&ms=300")
			if status != 200 || n != size {
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

// TOLLGATE_PACING=off: today's behaviour, the download at full speed and charged after it.
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
