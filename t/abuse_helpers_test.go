// Helpers of the abuse suite (t/abuse_test.go and the attacks of the other suites): one real
// stack — redis-server with the gateways' ACL user, the config written through the store as the
// control plane writes it, the demo S3 backend (gofakes3 with signature checks and real key
// pairs) behind a counter, and a real nginx gateway — a victim tenant under steady signed load
// whose goodput is counted, the charge of an app read before and after an attack, and the
// requests that reached the backend counted by who sent them.
package t

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	demo "tollgate/demo/s3"
	"tollgate/internal/store"
	"tollgate/t/harness"
)

// tenant is an app with a real key pair at the demo backend and a bucket of its own.
type tenant struct {
	app, key, secret, bucket string
}

var (
	victimTenant   = tenant{"victim", "AKIAVICTIM0000000001", "victim-secret-000000000000000000000001", "victim-bkt"}
	attackerTenant = tenant{"attacker", "AKIAATTACK0000000001", "attacker-secret-0000000000000000000001", "attacker-bkt"}
)

// abuseSource is the header the suite's clients tag their requests with, so the backend's
// counter knows who sent what reached it (an unsigned header: signatures stay valid).
const abuseSource = "X-Abuse-Source"

// abuseOptions configures an abuse stack; zero fields take the defaults.
type abuseOptions struct {
	env      map[string]string // TOLLGATE_* settings of the gateway
	victim   store.App         // default: 200 tokens/s, burst 400
	attacker store.App         // default: 200 tokens/s, burst 400
	workers  int               // nginx workers (default 2)
}

// abuseStack is one real stack under attack.
type abuseStack struct {
	*stack
	g       *harness.Gateway
	backend *demo.Server
	addr    string // the backend's host:port

	mu   sync.Mutex
	hits map[string]int64 // requests that reached the backend, by abuseSource
}

// newAbuseStack starts Redis, writes the cluster, the victim's and the attacker's apps, keys and
// buckets through the store, starts the demo backend with both key pairs and a gateway in front.
func newAbuseStack(t *testing.T, o abuseOptions) *abuseStack {
	t.Helper()
	if o.victim.AppID == "" {
		o.victim = app(victimTenant.app, 200, 400)
	}
	if o.attacker.AppID == "" {
		o.attacker = app(attackerTenant.app, 200, 400)
	}
	base := seededStack(t, o.victim, o.attacker)
	st, ctx := base.store, context.Background()
	for _, tn := range []tenant{victimTenant, attackerTenant} {
		if _, _, err := st.AddAccessKey(ctx, tn.app, tn.key); err != nil {
			t.Fatalf("access key of %s: %v", tn.app, err)
		}
		if _, _, err := st.PutBucket(ctx, tn.bucket, tn.app); err != nil {
			t.Fatalf("bucket of %s: %v", tn.app, err)
		}
	}
	s := &abuseStack{stack: base, hits: map[string]int64{}}
	s.backend = demo.New(demo.Options{Credentials: map[string]string{
		victimTenant.key: victimTenant.secret, attackerTenant.key: attackerTenant.secret}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.hits[r.Header.Get(abuseSource)]++
			s.mu.Unlock()
			s.backend.ServeHTTP(w, r)
		})}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	s.addr = l.Addr().String()
	env := map[string]string{"TOLLGATE_CONFIG_POLL": "0.2"}
	for k, v := range o.env {
		env[k] = v
	}
	s.g = harness.StartGateway(t, harness.GatewayOptions{RedisURL: s.gwURL, Backend: s.addr,
		Workers: o.workers, Env: env, NodeID: "node-1"})
	s.gws = []*harness.Gateway{s.g}
	for _, tn := range []tenant{victimTenant, attackerTenant} {
		tn := tn
		eventually(t, "the gateway knows "+tn.key, func() bool {
			return s.send(tn.sign(s.req("HEAD", "/"+tn.bucket+"/probe", nil))).Status != 403
		})
	}
	s.putObject(victimTenant, "steady", 1024)
	return s
}

// backendHits is the number of requests tagged source that reached the backend.
func (s *abuseStack) backendHits(source string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[source]
}

// req builds a request to the gateway (not signed) tagged by no one.
func (s *abuseStack) req(method, path string, body []byte) *http.Request {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequest(method, s.g.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// sign signs r with the tenant's key pair (SigV4, header form, UNSIGNED-PAYLOAD unless r has a
// body, whose hash it signs) and returns it.
func (tn tenant) sign(r *http.Request) *http.Request {
	payload := "UNSIGNED-PAYLOAD"
	if r.GetBody != nil {
		b, _ := r.GetBody()
		data, _ := io.ReadAll(b)
		h := sha256.Sum256(data)
		payload = hex.EncodeToString(h[:])
	}
	r.Header.Set("X-Amz-Content-Sha256", payload)
	err := v4.NewSigner().SignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: tn.key, SecretAccessKey: tn.secret}, r, payload, "s3", region, time.Now())
	if err != nil {
		panic(err) // only for programming mistakes: the signer fails on nothing a test builds
	}
	return r
}

// send sends r through the gateway's client and reads the whole answer.
func (s *abuseStack) send(r *http.Request) *harness.Response {
	s.t.Helper()
	resp, err := s.g.Client.Do(r)
	if err != nil {
		s.t.Fatalf("%s %s: %v", r.Method, r.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &harness.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// putObject stores an object of size bytes in the tenant's bucket through the gateway.
func (s *abuseStack) putObject(tn tenant, key string, size int) {
	s.t.Helper()
	r := tn.sign(s.req("PUT", "/"+tn.bucket+"/"+key, bytes.Repeat([]byte("v"), size)))
	if resp := s.send(r); resp.Status != 200 {
		s.t.Fatalf("put %s/%s: %d %s", tn.bucket, key, resp.Status, resp.Body)
	}
}

// steadyLoad is a tenant's steady traffic: one request per tick, counted by answer.
type steadyLoad struct {
	rate    float64 // requests per second offered
	start   time.Time
	stop    chan struct{}
	done    sync.WaitGroup
	sent    atomic.Int64
	ok      atomic.Int64
	refused atomic.Int64 // 429 and 503
	failed  atomic.Int64 // anything else (and transport errors)
	mu      sync.Mutex
	other   map[string]int // status or error -> count, for the failure message
}

// steadyResult is a finished load.
type steadyResult struct {
	Sent, OK, Refused, Failed int64
	Elapsed                   time.Duration
	Other                     map[string]int
}

// Goodput is the share of the requests sent that were served (the suite's victim sends within
// its guarantee, so this is its goodput against the guarantee; independent of how far a busy
// machine let the sender fall behind its rate).
func (r steadyResult) Goodput() float64 {
	if r.Sent == 0 {
		return 0
	}
	return float64(r.OK) / float64(r.Sent)
}

func (r steadyResult) String() string {
	return fmt.Sprintf("%d/%d served (%.1f %%) in %.1f s, %d refused, %d other %v", r.OK, r.Sent,
		100*r.Goodput(), r.Elapsed.Seconds(), r.Refused, r.Failed, r.Other)
}

// steady sends the request mk builds perSecond times a second (at most 32 in flight) until
// Stop. The victim's GETs of a small object cost 2 tokens (1 base + one bandwidth unit).
func (s *abuseStack) steady(perSecond float64, mk func() *http.Request) *steadyLoad {
	l := &steadyLoad{rate: perSecond, start: time.Now(), stop: make(chan struct{}), other: map[string]int{}}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	sem := make(chan struct{}, 32)
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		tick := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // 32 in flight: the gateway is this slow; the tick is not sent
			}
			l.sent.Add(1)
			l.done.Add(1)
			go func() {
				defer func() { <-sem; l.done.Done() }()
				resp, err := client.Do(mk())
				if err != nil {
					l.count(&l.failed, err.Error())
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					l.ok.Add(1)
				case 429, 503:
					l.count(&l.refused, fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("X-Tollgate-Reason")))
				default:
					l.count(&l.failed, fmt.Sprint(resp.StatusCode))
				}
			}()
		}
	}()
	return l
}

func (l *steadyLoad) count(c *atomic.Int64, what string) {
	c.Add(1)
	l.mu.Lock()
	l.other[what]++
	l.mu.Unlock()
}

// StopAfter ends the load once it has run for at least d (so that an attack over in a moment
// is measured against seconds of the victim's traffic).
func (l *steadyLoad) StopAfter(d time.Duration) steadyResult {
	time.Sleep(time.Until(l.start.Add(d)))
	return l.Stop()
}

// Stop ends the load and waits for its requests in flight.
func (l *steadyLoad) Stop() steadyResult {
	close(l.stop)
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return steadyResult{Sent: l.sent.Load(), OK: l.ok.Load(), Refused: l.refused.Load(),
		Failed: l.failed.Load(), Elapsed: time.Since(l.start), Other: l.other}
}

// victimLoad starts the victim's steady signed GETs of a 1 KiB object (2 tokens each) at
// perSecond requests a second (newAbuseStack stored the object).
func (s *abuseStack) victimLoad(perSecond float64) *steadyLoad {
	return s.steady(perSecond, func() *http.Request {
		r, _ := http.NewRequest("GET", s.g.URL+"/"+victimTenant.bucket+"/steady", nil)
		r.Header.Set(abuseSource, "victim")
		return victimTenant.sign(r)
	})
}

// charge is what an app has paid: tokens its nodes reported consumed (post-hoc charges the
// lease could not cover included: they are the node's local debt until a grant pays them) and
// the interest of its borrowing.
type charge struct {
	Consumed float64 // L2 stats total_consumed (the nodes' reports)
	Debt     float64 // L2 debt (borrowed tokens with interest)
	Borrowed float64 // L2 borrowed (the principal of the debt: consumed already)
	Local    float64 // the node's local debt (ratelimit_l3_debt: consumed already)
}

// Total is everything charged: consumed plus the interest owed.
func (c charge) Total() float64 { return c.Consumed + c.Debt - c.Borrowed }

// Minus is the charge since before.
func (c charge) Minus(before charge) charge {
	return charge{Consumed: c.Consumed - before.Consumed, Debt: c.Debt - before.Debt,
		Borrowed: c.Borrowed - before.Borrowed, Local: c.Local - before.Local}
}

func (c charge) String() string {
	return fmt.Sprintf("%.0f (consumed %.0f, L2 debt %.0f of which borrowed %.0f, local debt %.0f)",
		c.Total(), c.Consumed, c.Debt, c.Borrowed, c.Local)
}

// chargeOf reads an app's charge once.
func (s *abuseStack) chargeOf(app string) charge {
	s.t.Helper()
	l2 := s.l2(app)
	return charge{Consumed: s.stats(app)["total_consumed"], Debt: l2["debt"], Borrowed: l2["borrowed"],
		Local: seriesSum(s.t, s.g, "ratelimit_l3_debt", `app_id="`+app+`"`)}
}

// settledCharge reads an app's charge once the node has reported everything: no consumption
// pending or in flight on the node, and the same reading twice, 200 ms (two sync intervals)
// apart.
func (s *abuseStack) settledCharge(app string) charge {
	s.t.Helper()
	var last charge
	first := true
	eventually(s.t, "the charge of "+app+" settles", func() bool {
		st := s.g.State(app)
		if st.PendingCost != 0 || st.PendingCount != 0 || st.FailOpen != 0 || (st.Inflight != "" && st.Inflight != "0") {
			first = true
			time.Sleep(50 * time.Millisecond)
			return false
		}
		c := s.chargeOf(app)
		same := !first && c == last
		last, first = c, false
		if !same {
			time.Sleep(200 * time.Millisecond)
		}
		return same
	})
	return last
}

// abuseRow is one line of the suite's table (docs/security.md).
type abuseRow struct {
	attack         string
	victim         steadyResult
	victimCharge   float64 // charged to the victim beyond its own served requests
	attackerCharge float64
	backend        int64 // attacker requests that reached the backend
	attackerSent   int64
}

// log prints the row in the table's format.
func (r abuseRow) log(t *testing.T) {
	t.Helper()
	t.Logf("ABUSE | %s | %.1f %% (%d/%d) | %.0f | %.0f | %d of %d |", r.attack, 100*r.victim.Goodput(),
		r.victim.OK, r.victim.Sent, r.victimCharge, r.attackerCharge, r.backend, r.attackerSent)
}

// victimCostPerGet is what each of the victim's steady GETs costs (1 base + 1 KiB: one unit).
const victimCostPerGet = 2

// checkIsolation asserts the suite's promise for one attack: the victim kept >= 95 % of its
// goodput and paid exactly for what it was served, nothing for the attacker.
func checkIsolation(t *testing.T, row abuseRow) {
	t.Helper()
	row.log(t)
	if g := row.victim.Goodput(); g < 0.95 {
		t.Errorf("%s: the victim kept %.1f %% of its goodput, want >= 95 %%: %s", row.attack, 100*g, row.victim)
	}
	if row.victimCharge != 0 {
		t.Errorf("%s: the victim was charged %.0f tokens beyond its own %d requests", row.attack,
			row.victimCharge, row.victim.OK)
	}
}

// victimExtra is the victim's charge beyond its own served GETs.
func victimExtra(delta charge, res steadyResult) float64 {
	return delta.Total() - float64(res.OK*victimCostPerGet)
}

// hdr sets header fields on r and returns it.
func hdr(r *http.Request, kv ...string) *http.Request {
	for i := 0; i+1 < len(kv); i += 2 {
		if strings.EqualFold(kv[i], "Host") {
			r.Host = kv[i+1]
			continue
		}
		r.Header.Set(kv[i], kv[i+1])
	}
	return r
}

// burst sends n requests built by mk (i = 0..n-1), parallel at a time, and counts the answers by
// status (0: transport error).
func (s *abuseStack) burst(n, parallel int, mk func(i int) *http.Request) map[int]int {
	return s.burstFrom("", n, parallel, mk)
}

// clientFrom is an HTTP client whose connections come from the loopback address src ("" for
// any), with up to idle connections kept.
func (s *abuseStack) clientFrom(src string, idle int) *http.Client {
	d := &net.Dialer{}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: idle, DialContext: d.DialContext}}
}

// burstFrom is burst from the loopback address src ("" for any).
func (s *abuseStack) burstFrom(src string, n, parallel int, mk func(i int) *http.Request) map[int]int {
	client := s.clientFrom(src, parallel)
	var mu sync.Mutex
	out := map[int]int{}
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				status := 0
				if resp, err := client.Do(mk(i)); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				out[status]++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// rawConn opens a TCP connection to the gateway and writes head (a request line and header
// fields, "\r\n"-separated, without the blank line: rawConn ends the head), for requests no
// HTTP client sends (a body that trickles, a body that never comes).
func (s *abuseStack) rawConn(head string) net.Conn { return s.rawConnFrom("", head) }

// rawConnFrom is rawConn from the loopback address src (e.g. "127.0.0.2": another client
// address than the victim's 127.0.0.1; "" for any).
func (s *abuseStack) rawConnFrom(src, head string) net.Conn {
	s.t.Helper()
	d := net.Dialer{}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", strings.TrimPrefix(s.g.URL, "http://"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, strings.TrimRight(head, "\r\n")+"\r\n\r\n"); err != nil {
		s.t.Fatal(err)
	}
	return c
}
