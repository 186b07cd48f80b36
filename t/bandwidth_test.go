package t

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/internal/store"
	"tollgate/t/harness"
)

// Bandwidth in the control plane (docs/operations.md "Bandwidth in the console and the API"):
// the bytes an app moves through two gateways reach the API as bytes/s while they move, and
// the last hour's bytes are every byte the gateways counted, in each direction.
//
// Mutations that made this test fail: the node report without the byte counts (metrics.
// node_totals leaving out bytes_in/bytes_out: no live figure, the hour's bytes 0); the live
// figure taken from the cumulative counters instead of their growth (it never went back to 0).
func TestBandwidthReachesTheAPI(t *testing.T) {
	s := newStack(t, stackOptions{nodes: 2, workers: 2, apps: []store.App{app("bw", 2000, 20000)},
		env: map[string]string{"TOLLGATE_REPORT_INTERVAL": "1"}})
	// both nodes known to the control plane before the traffic: their first reports are the
	// baselines, so every byte after them counts
	api := bandwidthAPI(t, s)
	type appView struct {
		Data struct {
			App struct {
				In  float64 `json:"bytes_in_rate"`
				Out float64 `json:"bytes_out_rate"`
			} `json:"app"`
			In1h     int64 `json:"bytes_in_1h"`
			Out1h    int64 `json:"bytes_out_1h"`
			InSeries []struct {
				Value float64 `json:"value"`
			} `json:"bytes_in_rate"`
			OutSeries []struct {
				Value float64 `json:"value"`
			} `json:"bytes_out_rate"`
		} `json:"data"`
	}
	view := func() appView {
		var v appView
		if code := api.do("GET", "/api/v1/metrics/apps/bw", nil, &v); code != 200 {
			t.Fatalf("GET /api/v1/metrics/apps/bw: %d", code)
		}
		return v
	}

	// known transfers on both nodes: 3 uploads of 1 MiB and one of 512 KiB, downloads of
	// 2 MiB, 2 MiB and 1 MiB (the test backend's answer is chunked: the framing counts, as in
	// $body_bytes_sent)
	const mib = 1 << 20
	// transfer moves n bytes up (PUT) or down (GET) through gateway g (safe in any goroutine)
	transfer := func(g *harness.Gateway, method string, n int) error {
		req, err := http.NewRequest(method, g.URL+"/b/x?size="+strconv.Itoa(n), nil)
		if method == "PUT" {
			req, err = http.NewRequest(method, g.URL+"/b/up", strings.NewReader(strings.Repeat("u", n)))
		}
		if err != nil {
			return err
		}
		req.Header.Set("X-App-Id", "bw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		got, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != 200 || (method == "GET" && got != int64(n)) {
			return fmt.Errorf("%s of %d bytes: %d, %d bytes back, %v", method, n, resp.StatusCode, got, err)
		}
		return nil
	}
	put := func(g *harness.Gateway, n int) {
		if err := transfer(g, "PUT", n); err != nil {
			t.Fatal(err)
		}
	}
	get := func(g *harness.Gateway, n int) {
		if err := transfer(g, "GET", n); err != nil {
			t.Fatal(err)
		}
	}
	g1, g2 := s.gws[0], s.gws[1]
	put(g1, mib)
	put(g1, mib)
	put(g2, mib)
	put(g2, mib/2)
	get(g1, 2*mib)
	get(g2, 2*mib)
	get(g1, mib)

	// while a transfer runs on each node the API's live figures are above 0 in both directions
	var stop atomic.Bool
	var wg sync.WaitGroup
	failed := make(chan error, len(s.gws))
	for _, g := range s.gws {
		wg.Add(1)
		go func(g *harness.Gateway) {
			defer wg.Done()
			for !stop.Load() {
				for _, m := range []string{"PUT", "GET"} {
					if err := transfer(g, m, 64<<10); err != nil {
						failed <- err
						return
					}
				}
			}
		}(g)
	}
	var live appView
	eventuallyAPI(t, 15*time.Second, "bytes/s in and out above 0 in the API while traffic flows", func() bool {
		live = view()
		return live.Data.App.In > 0 && live.Data.App.Out > 0
	})
	// and so does the control plane's Prometheus view, by direction
	prom := controlPlaneMetrics(t, api)
	for _, dir := range []string{"in", "out"} {
		series := `tollgate_app_bytes_rate{app_id="bw",cluster_id="default",direction="` + dir + `"} `
		if !strings.Contains(prom, "\n"+series) {
			t.Errorf("the control plane's /metrics has no %s", series)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	t.Logf("live while transfers ran: %.0f B/s in, %.0f B/s out", live.Data.App.In, live.Data.App.Out)

	// the last hour's bytes are every byte the two gateways counted
	var in, out float64
	for _, g := range s.gws {
		g.SettleMetrics()
		in += g.Metric(`ratelimit_bytes_total{app_id="bw",direction="in"}`)
		out += g.Metric(`ratelimit_bytes_total{app_id="bw",direction="out"}`)
	}
	if in < 3.5*mib || out < 5*mib {
		t.Fatalf("the gateways counted %.0f in, %.0f out", in, out)
	}
	var v appView
	ok := pollAPI(15*time.Second, func() bool {
		v = view()
		return float64(v.Data.In1h) == in && float64(v.Data.Out1h) == out && v.Data.App.In == 0 && v.Data.App.Out == 0
	})
	if !ok {
		t.Fatalf("the API's last hour: %d in, %d out, live %+v; the gateways counted %.0f in, %.0f out (want the same, live 0)",
			v.Data.In1h, v.Data.Out1h, v.Data.App, in, out)
	}
	// the history's series carry the same bytes: a point above 0 in each direction
	peak := func(ps []struct {
		Value float64 `json:"value"`
	}) (m float64) {
		for _, p := range ps {
			m = max(m, p.Value)
		}
		return m
	}
	if peak(v.Data.InSeries) <= 0 || peak(v.Data.OutSeries) <= 0 {
		t.Fatalf("history series without bandwidth: in %v, out %v", v.Data.InSeries, v.Data.OutSeries)
	}
	// the dashboard's top apps and totals agree
	var d struct {
		Data struct {
			Overview struct {
				In  int64 `json:"total_bytes_in_1h"`
				Out int64 `json:"total_bytes_out_1h"`
			} `json:"overview"`
			TopApps []struct {
				AppID string `json:"app_id"`
				In1h  int64  `json:"bytes_in_1h"`
				Out1h int64  `json:"bytes_out_1h"`
			} `json:"top_apps"`
		} `json:"data"`
	}
	api.do("GET", "/api/v1/metrics", nil, &d)
	if float64(d.Data.Overview.In) != in || float64(d.Data.Overview.Out) != out {
		t.Fatalf("dashboard totals %+v, want %.0f in, %.0f out", d.Data.Overview, in, out)
	}
	found := false
	for _, a := range d.Data.TopApps {
		if a.AppID == "bw" {
			found = float64(a.In1h) == in && float64(a.Out1h) == out
		}
	}
	if !found {
		t.Fatalf("top apps %+v: bw with %.0f in, %.0f out", d.Data.TopApps, in, out)
	}
}

// A paced download's bytes count as they leave: while it runs at its app's share (1 MiB/s),
// the API's live figure shows about that share, before the transfer is over (mutation that
// made it fail: the body filter not counting the bytes it lets out — the figure stayed 0 until
// the end, then showed the whole body at once).
func TestBandwidthOfAPacedDownloadShowsWhileItRuns(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{pacedApp("pacedbw")},
		env: map[string]string{"TOLLGATE_REPORT_INTERVAL": "1"}})
	g := s.gw()
	api := bandwidthAPI(t, s)
	const size = 8 << 20 // the 1 MiB burst at once, then about 7 s at 1 MiB/s
	var done atomic.Bool
	result := make(chan error, 1)
	go func() {
		status, n, _, err := fetch(g.URL, "pacedbw", size, "")
		if err == nil && (status != 200 || n != size) {
			err = fmt.Errorf("status %d, %d of %d bytes", status, n, size)
		}
		done.Store(true)
		result <- err
	}()
	var rates []float64
	for !done.Load() {
		var v struct {
			Data struct {
				App struct {
					Out float64 `json:"bytes_out_rate"`
				} `json:"app"`
			} `json:"data"`
		}
		if code := api.do("GET", "/api/v1/metrics/apps/pacedbw", nil, &v); code == 200 && !done.Load() {
			rates = append(rates, v.Data.App.Out)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := <-result; err != nil {
		t.Fatal(err)
	}
	var peak float64
	seen := 0
	for _, r := range rates {
		peak = max(peak, r)
		if r > 0 {
			seen++
		}
	}
	t.Logf("live bytes/s out while the paced download ran (shared machine): %.0f", rates)
	if seen < 2 {
		t.Fatalf("the live figure was above 0 in %d of %d reads while the download ran: its bytes did not count as they left", seen, len(rates))
	}
	// about the share, never the loopback's speed (the burst's MiB may fall in one report)
	if peak > 3*paceRate {
		t.Fatalf("live figure %.0f B/s above 3x the app's share of %d B/s", peak, paceRate)
	}
}

// controlPlaneMetrics is the control plane's /metrics as the signed-in admin reads it.
func controlPlaneMetrics(t *testing.T, api *adminAPI) string {
	t.Helper()
	req, err := http.NewRequest("GET", api.url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+api.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("control plane /metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// pollAPI calls cond every 200 ms (the API's per-user rate limit allows that) until it holds or
// timeout passes, and says whether it held.
func pollAPI(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// eventuallyAPI is pollAPI that fails the test when cond never holds.
func eventuallyAPI(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !pollAPI(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// bandwidthAPI starts a control plane (live figures every 500 ms, no jobs) on the stack's Redis,
// signs in, and waits until it knows every gateway of the stack (their first reports are the
// baselines of the byte rates).
func bandwidthAPI(t *testing.T, s *stack) *adminAPI {
	t.Helper()
	cp := harness.StartControlPlane(t, s.redis.URL(), map[string]string{
		"TOLLGATE_ADMIN_PASSWORD": adminPassword, "TOLLGATE_CP_JOBS": "false", "TOLLGATE_LIVE_INTERVAL": "500ms"})
	api := loginAdmin(t, cp)
	var nodes struct {
		Data []struct {
			NodeID string `json:"node_id"`
		} `json:"data"`
	}
	eventuallyAPI(t, 15*time.Second, fmt.Sprintf("%d gateways in /api/v1/nodes", len(s.gws)), func() bool {
		api.do("GET", "/api/v1/nodes", nil, &nodes)
		return len(nodes.Data) == len(s.gws)
	})
	return api
}
