// The abuse suite: attacks on tenant isolation against a real stack (t/abuse_helpers_test.go)
// while a victim app with a guarantee is under steady load. Each attack asserts that the
// victim keeps >= 95 % of its goodput, that it pays nothing for the attacker's traffic and that
// the attacker's own account pays for what the attacker does; each prints a row of the table
// in docs/security.md (go test -v -run TestAbuse ./t/ | grep ABUSE).
package t

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tollgate/t/harness"
)

// The victim's steady load: 50 GETs/s of 2 tokens, half its guarantee of 200 tokens/s.
const victimRate = 50

// forgedV4 is a SigV4 Authorization with key's id and a signature nobody computed.
func forgedV4(key string) string {
	return "AWS4-HMAC-SHA256 Credential=" + key + "/" + time.Now().UTC().Format("20060102") +
		"/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=" +
		strings.Repeat("5d", 32)
}

// forged tags r as the attacker's and gives it the victim's key id with a forged signature.
func forged(r *http.Request) *http.Request {
	return hdr(r, abuseSource, "attacker", "Authorization", forgedV4(victimTenant.key),
		"X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"), "X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
}

// Lock-out: GETs priced up to the cap from their own headers (a Range of a terabyte) in the
// victim's name — with its key id and a forged signature, with its app header, and anonymous to
// its bucket. The price is capped at what the app can hold, a refusal of such a request is
// remembered only for requests as costly, and the forged ones are refunded when the backend
// refuses them: the victim's own small requests go on.
func TestAbuseLockOutByHugePricedRequests(t *testing.T) {
	s := newAbuseStack(t, abuseOptions{env: map[string]string{"TOLLGATE_IDLE_RETURN": "0.1"}})
	huge := "bytes=0-1099511627775"
	attacks := []struct {
		name string
		mk   func() *http.Request
		// forged: refused by the backend and refunded (the victim pays nothing); otherwise the
		// request is the victim's by its identity and pays what it really moved
		forged bool
	}{
		{"lock-out: forged key id, Range 1 TiB", func() *http.Request {
			return forged(hdr(s.req("GET", "/"+victimTenant.bucket+"/steady", nil), "Range", huge))
		}, true},
		{"lock-out: forged key id, decoded length 64 GB", func() *http.Request {
			r := forged(s.req("PUT", "/"+victimTenant.bucket+"/x", []byte("tiny")))
			r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
			return hdr(r, "X-Amz-Decoded-Content-Length", "65536000000")
		}, true},
		{"lock-out: app header, Range 1 TiB", func() *http.Request {
			return hdr(s.req("GET", "/"+victimTenant.bucket+"/steady", nil), abuseSource, "attacker",
				"X-App-Id", victimTenant.app, "Range", huge)
		}, false},
		{"lock-out: anonymous to the victim's bucket, Range 1 TiB", func() *http.Request {
			return hdr(s.req("GET", "/"+victimTenant.bucket+"/steady", nil), abuseSource, "attacker", "Range", huge)
		}, false},
	}
	for _, at := range attacks {
		t.Run(at.name, func(t *testing.T) {
			s.t = t
			before := s.settledCharge(victimTenant.app)
			attackerBefore := s.settledCharge(attackerTenant.app)
			hits := s.backendHits("attacker")
			// 10 requests a second, each after its lease went back to L2 (idle for 0.1 s): each
			// asks L2, as a node's first request of an app does, while the node remembers the
			// attacker's refusals
			l := s.victimLoad(10)
			statuses := map[int]int{}
			for i := 0; i < 20; i++ { // 10 a second for 2 s, from another address
				for k, v := range s.burstFrom("127.0.0.2", 1, 1, func(int) *http.Request { return at.mk() }) {
					statuses[k] += v
				}
				time.Sleep(100 * time.Millisecond)
			}
			res := l.Stop()
			delta := s.settledCharge(victimTenant.app).Minus(before)
			extra := victimExtra(delta, res)
			row := abuseRow{attack: at.name, victim: res, victimCharge: extra,
				attackerCharge: s.settledCharge(attackerTenant.app).Minus(attackerBefore).Total(),
				backend:        s.backendHits("attacker") - hits, attackerSent: 20}
			t.Logf("attacker answers %v; victim %s", statuses, delta)
			if at.forged {
				checkIsolation(t, row)
				return
			}
			// the victim's own identity: it pays what the requests moved (a 1 KiB object: base 1
			// + one unit each), never the terabyte they announced
			row.log(t)
			if g := res.Goodput(); g < 0.95 {
				t.Errorf("the victim kept %.1f %% of its goodput: %s", 100*g, res)
			}
			served := int64(statuses[200] + statuses[206])
			if extra != float64(2*served) {
				t.Errorf("the victim paid %.0f for %d requests in its name that moved 1 KiB each, want %d",
					extra, served, 2*served)
			}
		})
	}
}

// signedPut is a PUT of size bytes to the tenant's bucket, signed with its key pair.
func (s *abuseStack) signedPut(tn tenant, key string, size int) *http.Request {
	r := s.req("PUT", "/"+tn.bucket+"/"+key, bytes.Repeat([]byte("u"), size))
	r.Header.Set(abuseSource, tn.app)
	return tn.sign(r)
}

// A small app (burst 40) uploads 5 MiB parts with an honest client: each PUT (cost 85) is
// admitted when its bucket is full, the 45 tokens above the burst are its debt, repaid by its
// refill before it is admitted again — so its average rate stays its guarantee — while the
// victim keeps its goodput and pays nothing.
func TestAbuseSmallAppUploadsPartsAboveItsBurst(t *testing.T) {
	small := app(attackerTenant.app, 40, 40)
	s := newAbuseStack(t, abuseOptions{attacker: small})
	const size, uploads = 5 << 20, 2
	price := 5 + size/65536 // PutObject: base 5 + 80 units
	before := s.settledCharge(victimTenant.app)
	smallBefore := s.settledCharge(attackerTenant.app)
	hits := s.backendHits(attackerTenant.app)
	l := s.victimLoad(victimRate)
	start := time.Now()
	refusals := 0
	for i := 0; i < uploads; {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d of %d uploads done after %s (%d refusals)", i, uploads, time.Since(start), refusals)
		}
		r := s.send(s.signedPut(attackerTenant, "part"+strconv.Itoa(i), size))
		switch r.Status {
		case 200:
			i++
		case 503:
			refusals++
			secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
			if err != nil || secs < 1 || secs > 5 {
				t.Fatalf("upload %d refused with Retry-After %q (the debt is repaid in about 1 s): %s",
					i, r.Header.Get("Retry-After"), r.Body)
			}
			time.Sleep(time.Duration(secs) * time.Second)
		default:
			t.Fatalf("upload %d: %d %s", i, r.Status, r.Body)
		}
	}
	elapsed := time.Since(start)
	res := l.Stop()
	spent := s.settledCharge(attackerTenant.app).Minus(smallBefore)
	row := abuseRow{attack: "small app (burst 40) uploads 5 MiB parts", victim: res,
		victimCharge:   victimExtra(s.settledCharge(victimTenant.app).Minus(before), res),
		attackerCharge: spent.Total(), backend: s.backendHits(attackerTenant.app) - hits, attackerSent: int64(uploads + refusals)}
	checkIsolation(t, row)
	// the app paid for every byte, and no faster than its guarantee: all but the first bucket
	// had to be refilled at 40 tokens/s
	if spent.Total() < float64(uploads*price) {
		t.Errorf("the small app paid %s for %d uploads of cost %d", spent, uploads, price)
	}
	if min := time.Duration(float64(uploads*price-40) / 40 * float64(time.Second)); elapsed < min {
		t.Errorf("%d uploads of cost %d in %s: faster than the guarantee of 40 tokens/s allows (%s)",
			uploads, price, elapsed, min)
	}
	t.Logf("%d uploads in %.1f s, %d refusals; paid %s", uploads, elapsed.Seconds(), refusals, spent)
}

// Forged and aborted uploads in the victim's name: bodies announced and never sent (the client
// goes away), and complete forged bodies the backend refuses. Nothing stays charged to the
// victim: no consumption, no local debt, no L2 debt.
func TestAbuseForgedAndAbortedUploadsLeaveNoDebt(t *testing.T) {
	s := newAbuseStack(t, abuseOptions{})
	before := s.settledCharge(victimTenant.app)
	hits := s.backendHits("attacker")
	l := s.victimLoad(victimRate)
	const n = 15
	for i := 0; i < n; i++ {
		// 5 MiB announced, 1 KiB sent, then the client is gone (from another address than the
		// victim's: its failures spend that address's budget of forgeries, not the victim's)
		c := s.rawConnFrom("127.0.0.2", fmt.Sprintf("PUT /%s/aborted%d HTTP/1.1\r\nHost: %s\r\n%s: attacker\r\n"+
			"Authorization: %s\r\nX-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\nContent-Length: %d",
			victimTenant.bucket, i, strings.TrimPrefix(s.g.URL, "http://"), abuseSource, forgedV4(victimTenant.key), 5<<20))
		_, _ = c.Write(bytes.Repeat([]byte("a"), 1024))
		time.Sleep(20 * time.Millisecond)
		_ = c.Close()
	}
	statuses := s.burstFrom("127.0.0.2", n, 3, func(i int) *http.Request {
		return forged(s.req("PUT", "/"+victimTenant.bucket+"/forged"+strconv.Itoa(i), bytes.Repeat([]byte("f"), 300000)))
	})
	// the gateway's log phase of the aborted ones has run once they are counted
	eventually(t, "the aborted uploads are logged", func() bool {
		return seriesSum(t, s.g, "ratelimit_requests_total", `app_id="victim"`, `method="PUT"`) >= 2*n
	})
	res := l.StopAfter(2 * time.Second)
	delta := s.settledCharge(victimTenant.app).Minus(before)
	row := abuseRow{attack: "forged and aborted uploads (5 MiB announced)", victim: res,
		victimCharge: victimExtra(delta, res), backend: s.backendHits("attacker") - hits, attackerSent: 2 * n}
	t.Logf("forged complete uploads: %v; victim %s", statuses, delta)
	checkIsolation(t, row)
	if after := s.settledCharge(victimTenant.app); after.Debt != 0 || after.Local != 0 {
		t.Errorf("the victim owes after the attack: %s", after)
	}
}

// trickle opens a forged PUT in the victim's name from src announcing 1000 bytes and sends its
// body one byte every 200 ms in the background; the returned channel receives the gateway's
// answer (its first line; "" when the connection was ended without one) once it is over.
func (s *abuseStack) trickle(src string, i int) <-chan string {
	c := s.rawConnFrom(src, fmt.Sprintf("PUT /%s/trickle%d HTTP/1.1\r\nHost: gw\r\n%s: attacker\r\n"+
		"Authorization: %s\r\nX-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\nContent-Length: 1000",
		victimTenant.bucket, i, abuseSource, forgedV4(victimTenant.key)))
	done := make(chan string, 1)
	go func() {
		buf := make([]byte, 512)
		n, _ := c.Read(buf) // an answer, or the end of the connection
		done <- strings.SplitN(string(buf[:n]), "\r\n", 2)[0]
		_ = c.Close()
	}()
	go func() {
		for k := 0; k < 1000; k++ {
			if _, err := c.Write([]byte("t")); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return done
}

// Slot holding: 12 forged uploads from one address trickle their bodies to hold the victim's
// 12 slots. That address gets at most half of them (TOLLGATE_CONN_CLIENT_SHARE's default, 0.5),
// and the body deadline (1 s of grace + 1000 bytes at 8 KiB/s here) ends each within seconds:
// the victim keeps its goodput and pays nothing.
func TestAbuseSlowTrickleHoldsNoSlot(t *testing.T) {
	s := newAbuseStack(t, abuseOptions{env: map[string]string{"TOLLGATE_BODY_GRACE": "1"}})
	s.appLimits(victimTenant.app, 12, 12)
	before := s.settledCharge(victimTenant.app)
	hits := s.backendHits("attacker")
	l := s.victimLoad(victimRate)
	start := time.Now()
	var answers []<-chan string
	for i := 0; i < 12; i++ {
		answers = append(answers, s.trickle("127.0.0.2", i))
	}
	got := map[string]int{}
	for i, a := range answers {
		select {
		case line := <-a:
			got[line]++
		case <-time.After(15 * time.Second):
			t.Fatalf("trickle %d still holds its connection after %s", i, time.Since(start))
		}
	}
	held := time.Since(start)
	time.Sleep(time.Second) // the victim's load after the attack too
	res := l.Stop()
	delta := s.settledCharge(victimTenant.app).Minus(before)
	row := abuseRow{attack: "slow trickle: 12 uploads hold slots (1 byte / 200 ms)", victim: res,
		victimCharge: victimExtra(delta, res), backend: s.backendHits("attacker") - hits, attackerSent: 12}
	t.Logf("trickles answered %v, all over after %.1f s; victim %s", got, held.Seconds(), delta)
	checkIsolation(t, row)
	if got[""] == 0 || got[""] > 6 {
		t.Errorf("%d trickles were ended by the body deadline, want 1..6 (one address holds at most half of 12 slots): %v",
			got[""], got)
	}
	if n := seriesSum(t, s.g, "connlimit_body_deadline_total", `app_id="victim"`); n != float64(got[""]) {
		t.Errorf("connlimit_body_deadline_total %v, want %d", n, got[""])
	}
	if n := seriesSum(t, s.g, "connlimit_rejected_total", `reason="client_limit_exceeded"`); n < 6 {
		t.Errorf("%v requests refused for their address's share, want >= 6", n)
	}
	eventually(t, "the victim's slots are free", func() bool {
		return seriesSum(t, s.g, "connlimit_active_connections", `app_id="victim"`) == 0
	})
}

// Forged-signature flood: 300 requests in the victim's name with a forged signature from one
// address. The backend refuses each as unauthenticated (refunded); once the (key, address)
// budget is spent the gateway refuses the rest itself, in S3's dialect, without a backend
// round trip, until the window passes. The victim's own signed requests from its address go on.
func TestAbuseForgedSignatureFlood(t *testing.T) {
	s := newAbuseStack(t, abuseOptions{})
	before := s.settledCharge(victimTenant.app)
	hits := s.backendHits("attacker")
	l := s.victimLoad(victimRate)
	const n = 300
	statuses := s.burstFrom("127.0.0.2", n, 8, func(i int) *http.Request {
		return forged(s.req("GET", "/"+victimTenant.bucket+"/steady", nil))
	})
	// the gateway's answer to the spent budget: SlowDown with the window's rest
	resp, err := s.clientFrom("127.0.0.2", 1).Do(forged(s.req("GET", "/"+victimTenant.bucket+"/steady", nil)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := &harness.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
	res := l.StopAfter(2 * time.Second)
	delta := s.settledCharge(victimTenant.app).Minus(before)
	backend := s.backendHits("attacker") - hits
	row := abuseRow{attack: "forged-signature flood (300 from one address)", victim: res,
		victimCharge: victimExtra(delta, res), backend: backend, attackerSent: n}
	t.Logf("flood answers %v; victim %s", statuses, delta)
	checkIsolation(t, row)
	if backend > 20+8 { // the key budget, plus what was in flight when it was spent
		t.Errorf("%d forged requests reached the backend, want <= 28 (budget 20)", backend)
	}
	if statuses[403] < 20 || statuses[503] < n-28 {
		t.Errorf("flood answers %v: want >= 20 refused by the backend (403), the rest by the gateway (503)", statuses)
	}
	e := parseS3Error(t, r)
	if r.Status != 503 || e.Code != "SlowDown" || r.Header.Get("X-Tollgate-Reason") != "auth_failure_budget" {
		t.Errorf("a forgery past the budget: %d %s %q", r.Status, e.Code, r.Header.Get("X-Tollgate-Reason"))
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want the rest of the 60 s window", r.Header.Get("Retry-After"))
	}
	if v := seriesSum(t, s.g, "ratelimit_rejected_total", `app_id="victim"`, `reason="auth_failure_budget"`); v < n-28 {
		t.Errorf("ratelimit_rejected_total{reason=auth_failure_budget} %v", v)
	}
}

// Fail-open: while Redis is down, a GET of a 110-byte object priced up front at the app's
// average download (3 MiB: 49 tokens) is admitted from a fail-open budget of 20 tokens/s — a
// request costlier than the budget when the second's budget is untouched — and settled against
// the bytes it sent, which gives the rest back to that second's budget.
func TestAbuseFailOpenAdmitsRequestsPricedAboveItsBudget(t *testing.T) {
	s := newAbuseStack(t, abuseOptions{workers: 1, env: map[string]string{"TOLLGATE_FAIL_OPEN_RATE": "20"}})
	s.putObject(victimTenant, "big", 3<<20)
	s.putObject(victimTenant, "small", 110)
	for i := 0; i < 3; i++ { // the app's average download: 3 MiB
		if r := s.send(victimTenant.sign(s.req("GET", "/"+victimTenant.bucket+"/big", nil))); r.Status != 200 {
			t.Fatalf("GET big: %d", r.Status)
		}
	}
	s.redis.Kill()
	s.g.T("set?app=victim&tokens=0", nil) // the node's lease is spent: the next grant fails
	get := func() *harness.Response {
		return s.send(victimTenant.sign(s.req("GET", "/"+victimTenant.bucket+"/small", nil)))
	}
	// priced 1 + 48 units up front (the average), above the whole budget: admitted
	if r := get(); r.Status != 200 {
		t.Fatalf("GET small priced above the fail-open budget: %d %s %s", r.Status,
			r.Header.Get("X-Tollgate-Reason"), r.Body)
	}
	eventually(t, "a fail-open admission counted", func() bool {
		return seriesSum(t, s.g, "ratelimit_fail_open_total", `app_id="victim"`) == 1
	})
	// and settled at 2 tokens (1 base + 1 unit): 7 a second fit the budget of 20
	for i := 0; i < 10; i++ {
		time.Sleep(150 * time.Millisecond)
		if r := get(); r.Status != 200 {
			t.Fatalf("GET %d with Redis down: %d %s", i, r.Status, r.Header.Get("X-Tollgate-Reason"))
		}
	}
}

// The node remembers L2's refusal of a huge request only for requests that need as much: right
// after a forged GET priced at the cap (a full bucket, 400) is refused — the node's lease holds
// about half the bucket, L2 the rest — the victim's own GET priced 251 (a Range of 16 MB, more
// than its lease holds) asks L2 and is served, not refused from the node's memory of the
// refusal.
func TestAbuseRefusalRememberedOnlyForCostlierRequests(t *testing.T) {
	s := newAbuseStack(t, abuseOptions{env: map[string]string{"TOLLGATE_IDLE_RETURN": "0.2"}})
	get := func(rng string) *harness.Response {
		r := s.req("GET", "/"+victimTenant.bucket+"/steady", nil)
		if rng != "" {
			r.Header.Set("Range", rng)
		}
		return s.send(victimTenant.sign(r))
	}
	for i := 0; i < 3; i++ {
		eventually(t, "the idle lease back in L2", func() bool { return s.g.State("victim").Tokens == 0 })
		if r := get(""); r.Status != 200 { // a lease of about half the bucket
			t.Fatalf("GET: %d", r.Status)
		}
		huge := s.burstFrom("127.0.0.2", 1, 1, func(int) *http.Request {
			return forged(hdr(s.req("GET", "/"+victimTenant.bucket+"/steady", nil), "Range", "bytes=0-1099511627775"))
		})
		if huge[503] != 1 {
			t.Fatalf("a GET priced at the cap with half the bucket on the lease: %v, want L2's refusal (503)", huge)
		}
		if r := get("bytes=0-16383999"); r.Status != 200 && r.Status != 206 {
			t.Fatalf("round %d: the victim's GET priced 251 after the refusal of one priced 400: %d %s %s", i,
				r.Status, r.Header.Get("X-Tollgate-Reason"), r.Body)
		}
	}
}

// With the request body streamed to the backend (proxy_request_buffering off), the body
// deadline ends an upload that trickles as well: a PUT correctly signed by the attacker's own
// key, which the backend accepts and waits for, announcing 1000 bytes and sending one every
// 200 ms, ends after the deadline (1 s + 1000 bytes at 8 KiB/s), its slot comes back and its
// charge is refunded (the backend never answered).
func TestAbuseBodyDeadlineEndsAStreamedUpload(t *testing.T) {
	s := newAbuseStack(t, abuseOptions{env: map[string]string{"TOLLGATE_BODY_GRACE": "1"}})
	conf := s.g.Prefix + "/conf/nginx.conf"
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	streamed := strings.Replace(string(b), "client_max_body_size 64m;",
		"client_max_body_size 64m;\n    proxy_request_buffering off;", 1)
	if err := os.WriteFile(conf, []byte(streamed), 0o644); err != nil {
		t.Fatal(err)
	}
	starts := strings.Count(s.g.ErrorLog(), "start worker process")
	s.g.Signal(syscall.SIGHUP)
	eventually(t, "nginx reloaded with streamed bodies", func() bool {
		return strings.Count(s.g.ErrorLog(), "start worker process") >= starts+2
	})
	before := s.settledCharge(attackerTenant.app)
	pr, pw := io.Pipe()
	r, _ := http.NewRequest("PUT", s.g.URL+"/"+attackerTenant.bucket+"/streamed", pr)
	r.ContentLength = 1000
	r.Header.Set(abuseSource, "attacker")
	attackerTenant.sign(r)
	go func() {
		for i := 0; i < 1000; i++ {
			if _, err := pw.Write([]byte("s")); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	start := time.Now()
	resp, err := s.clientFrom("", 1).Do(r)
	if err == nil {
		resp.Body.Close()
		t.Logf("answer %d", resp.StatusCode)
	}
	_ = pw.Close()
	took := time.Since(start)
	t.Logf("the streamed trickle ended after %.1f s (%v)", took.Seconds(), err)
	if took > 5*time.Second || err == nil && resp.StatusCode < 400 {
		t.Fatalf("the streamed trickle: %v after %s, want the connection ended by the deadline", err, took)
	}
	if s.backendHits("attacker") != 1 {
		t.Fatalf("%d requests reached the backend, want the one streamed", s.backendHits("attacker"))
	}
	eventually(t, "the deadline counted and the slot free", func() bool {
		return seriesSum(t, s.g, "connlimit_body_deadline_total", `app_id="attacker"`) == 1 &&
			seriesSum(t, s.g, "connlimit_active_connections", `app_id="attacker"`) == 0
	})
	if d := s.settledCharge(attackerTenant.app).Minus(before); d.Total() != 0 {
		t.Fatalf("the ended upload left a charge of %s", d)
	}
}
