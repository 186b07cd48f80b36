package t

import (
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tollgate/t/harness"
)

// sumSeries adds the values of every /metrics line of a metric (all label sets).
func sumSeries(t *testing.T, g *harness.Gateway, name string) float64 {
	t.Helper()
	resp, err := g.Client.Get(g.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// Ten `nginx -s reload` under load: only 2xx and 429 answers, and once the load stops every
// connection counter is exactly 0 and the lease ledger balances.
func TestTenReloadsUnderLoad(t *testing.T) {
	s := newStack(t, stackOptions{env: nil})
	g := s.gw()
	stop := make(chan struct{})
	done := make(chan *measuredLoad)
	go func() { done <- runMeasured(g, "demo-p1", 8, stop) }()
	for i := 0; i < 10; i++ {
		time.Sleep(300 * time.Millisecond)
		g.Signal(syscall.SIGHUP)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	m := <-done
	t.Logf("admitted %d, rejected %d, 5xx %d, errors %d", m.admitted.Load(), m.rejected.Load(),
		m.server5xx.Load(), m.errors.Load())
	if bad := m.unexpected(); bad != "" || m.admitted.Load() == 0 {
		t.Fatalf("reloads under load: %s; %d admitted", bad, m.admitted.Load())
	}
	if sumSeries(t, g, "connlimit_peak_connections") == 0 {
		t.Fatalf("no connection was ever counted: the limiter is not in the path")
	}
	eventually(t, "connection counters back to 0", func() bool {
		return sumSeries(t, g, "connlimit_active_connections") == 0 &&
			sumSeries(t, g, "connlimit_cluster_active_connections") == 0
	})
	eventually(t, "balanced lease ledger", func() bool {
		l := s.leases("demo-p1")
		st := g.State("demo-p1")
		return st.PendingCost == 0 && st.Inflight == "" &&
			l["node-1:granted"] == l["node-1:consumed"]+l["node-1:returned"]+l["node-1:held"]
	})
	if n := strings.Count(g.ErrorLog(), "reconfiguring"); n < 10 {
		t.Fatalf("nginx logged %d reconfigurations, want 10", n)
	}
}
