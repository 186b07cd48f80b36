// Identity attacks against a real stack (real Redis with the gateways' ACL user, nginx with
// tollgate, the demo S3 backend with real key pairs checking every signature) while a victim app
// with a guarantee is under steady load. Each attack asserts that the victim keeps >= 95 % of its
// goodput, that the victim is charged nothing for the attacker's traffic and that the attacker's
// own account pays for what it does; each logs a row of the table in docs/security.md:
// attack | victim goodput | victim charge | attacker charge | backend requests.
package t

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	demo "tollgate/demo/s3"
	"tollgate/internal/keys"
	"tollgate/t/harness"
)

const (
	victimKey, victimSecret     = "AKIAVICTIM0000000001", "victim-secret-0000000000000000000000001"
	attackerKey, attackerSecret = "AKIAATTACKER00000001", "attacker-secret-00000000000000000000001"
	idVictimRate                = 10 // victim requests per second (its guarantee is 20 tokens/s)
	idVictimPhase               = 2 * time.Second
)

// abuse is a stack whose gateway proxies to the demo S3 backend, counting the requests that
// reach it.
type abuse struct {
	*stack
	backend *demo.Server
	hits    atomic.Int64
}

func newAbuse(t *testing.T, env map[string]string) *abuse {
	t.Helper()
	a := &abuse{stack: seededStack(t, app("victim", 20, 40), app("attacker", 1000, 2000))}
	a.backend = demo.New(demo.Options{Credentials: map[string]string{victimKey: victimSecret,
		attackerKey: attackerSecret}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			a.hits.Add(1)
			a.backend.ServeHTTP(w, r)
		})}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	a.gws = []*harness.Gateway{harness.StartGateway(t, harness.GatewayOptions{RedisURL: a.gwURL,
		NodeID: "node-1", Backend: l.Addr().String(), Env: env})}
	for app, key := range map[string]string{"victim": victimKey, "attacker": attackerKey} {
		_, v, err := a.store.AddAccessKey(context.Background(), app, key)
		if err != nil {
			t.Fatal(err)
		}
		a.waitVersion(v)
	}
	// the objects the victim reads and the attacker's presigned URLs name
	for _, o := range []struct{ key, secret, path string }{{victimKey, victimSecret, "/vbucket/obj"},
		{attackerKey, attackerSecret, "/abucket/obj"}} {
		if r := a.signed(o.key, o.secret, "PUT", o.path, []byte("0123456789")); r.Status != 200 {
			t.Fatalf("PUT %s: %d %s", o.path, r.Status, r.Body)
		}
	}
	// the setup's PUTs booked: what follows is the attacks' and the victim's load alone
	eventually(t, "the setup's requests in the ledger", func() bool {
		v, _ := a.ledger("victim")
		at, _ := a.ledger("attacker")
		return v >= 1 && at >= 1
	})
	return a
}

// victimClient is the victim's own connection pool (the attacker's connections are not its).
var victimClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

// signed sends a SigV4-signed request (header) to the gateway.
func (a *abuse) signed(key, secret, method, path string, body []byte) *harness.Response {
	a.t.Helper()
	return doSigned(a.t, a.gw(), key, secret, method, path, body, false)
}

// victimHead is one request of the victim's load, on its own connections.
func (a *abuse) victimHead() int {
	req, err := http.NewRequest("HEAD", a.gw().URL+"/vbucket/obj", nil)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: victimKey,
		SecretAccessKey: victimSecret}, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		a.t.Fatal(err)
	}
	resp, err := victimClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// doSigned sends method path with body, signed with SigV4 for key (UNSIGNED-PAYLOAD), the body
// chunked (Transfer-Encoding) when asked.
func doSigned(t *testing.T, g *harness.Gateway, key, secret, method, path string, body []byte,
	chunked bool) *harness.Response {
	t.Helper()
	return doSignedAs(t, g, key, secret, method, path, body, chunked, "UNSIGNED-PAYLOAD", nil)
}

// doSignedAs is doSigned with the payload hash the request declares and extra headers (signed).
func doSignedAs(t *testing.T, g *harness.Gateway, key, secret, method, path string, body []byte,
	chunked bool, payload string, extra map[string]string) *harness.Response {
	t.Helper()
	req, err := http.NewRequest(method, g.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", payload)
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: key,
		SecretAccessKey: secret}, req, payload, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if chunked {
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &harness.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// presignV4URL presigns GET path (whose query may carry extra parameters, signed with it) for
// key and returns the path and query as sent.
func presignV4URL(t *testing.T, base, key, secret, pathQuery string) string {
	t.Helper()
	u, err := url.Parse(base + pathQuery)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("X-Amz-Expires", "300")
	u.RawQuery = q.Encode()
	req, _ := http.NewRequest("GET", u.String(), nil)
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: key,
		SecretAccessKey: secret}, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := url.Parse(signed)
	return s.RequestURI()
}

// presignV2Query is a SigV2 presigned GET of path (path style) for key.
func presignV2Query(key, secret, path string) string {
	exp := strconv.FormatInt(time.Now().Add(5*time.Minute).Unix(), 10)
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte("GET\n\n\n" + exp + "\n" + path))
	return "AWSAccessKeyId=" + key + "&Expires=" + exp + "&Signature=" +
		url.QueryEscape(base64.StdEncoding.EncodeToString(m.Sum(nil)))
}

// figures of one attack (the row of docs/security.md's table)
type figures struct {
	attack                       string
	victimSent, victimOK         int
	victimCharge, attackerCharge float64 // tokens the ledger booked for the attacker's traffic
	backend                      int64   // the attacker's requests that reached the backend
	answers                      map[int]int
}

func (f figures) String() string {
	return fmt.Sprintf("ABUSE | %s | %d/%d (%.0f %%) | %.0f | %.0f | %d |", f.attack, f.victimOK, f.victimSent,
		100*float64(f.victimOK)/float64(f.victimSent), f.victimCharge, f.attackerCharge, f.backend)
}

// ledger is what an app was booked (requests, tokens) by the node's reports.
func (a *abuse) ledger(app string) (float64, float64) {
	st := a.stats(app)
	return st["total_requests"], st["total_consumed"]
}

// victimLoad sends the victim's signed HEADs at idVictimRate for idVictimPhase; returns sent, admitted.
func (a *abuse) victimLoad(done chan<- [2]int) {
	sent, ok := 0, 0
	tick := time.NewTicker(time.Second / idVictimRate)
	defer tick.Stop()
	end := time.Now().Add(idVictimPhase)
	for time.Now().Before(end) {
		<-tick.C
		sent++
		if a.victimHead() == 200 {
			ok++
		}
	}
	done <- [2]int{sent, ok}
}

// phase runs attack (which returns the statuses it got) beside the victim's load and measures it.
func (a *abuse) phase(name string, attack func() []int) figures {
	t := a.t
	t.Helper()
	vReq0, vTok0 := a.ledger("victim")
	_, aTok0 := a.ledger("attacker")
	hits0 := a.hits.Load()
	done := make(chan [2]int, 1)
	go a.victimLoad(done)
	statuses := attack()
	v := <-done
	f := figures{attack: name, victimSent: v[0], victimOK: v[1], answers: map[int]int{}}
	for _, s := range statuses {
		f.answers[s]++
	}
	// the victim's own admitted HEADs (cost 1 each) are what its ledger may book, nothing more
	eventually(t, "the victim's requests in its ledger", func() bool {
		r, _ := a.ledger("victim")
		return r >= vReq0+float64(f.victimOK)
	})
	vReq, vTok := a.ledger("victim")
	f.victimCharge = vTok - vTok0 - float64(f.victimOK)
	if vReq-vReq0 != float64(f.victimOK) {
		t.Errorf("%s: %v requests booked to the victim, it made %d admitted ones", name, vReq-vReq0, f.victimOK)
	}
	_, aTok := a.ledger("attacker")
	f.attackerCharge = aTok - aTok0
	f.backend = a.hits.Load() - hits0 - int64(f.victimOK)
	if float64(f.victimOK) < 0.95*float64(f.victimSent) {
		t.Errorf("%s: the victim got %d of %d requests through (< 95 %%)", name, f.victimOK, f.victimSent)
	}
	if f.victimCharge != 0 {
		t.Errorf("%s: the victim was charged %v tokens beyond its own requests", name, f.victimCharge)
	}
	t.Logf("%s  answers %v", f, f.answers)
	return f
}

// attackN sends n requests made by req (concurrently, 4 at a time) and returns their statuses.
func attackN(n int, req func(i int) *harness.Response) []int {
	var mu sync.Mutex
	var out []int
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			s := req(i).Status
			mu.Lock()
			out = append(out, s)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	return out
}

func allAre(t *testing.T, name string, got []int, want int) {
	t.Helper()
	for _, s := range got {
		if s != want {
			t.Errorf("%s: answers %v, want every one %d", name, got, want)
			return
		}
	}
}

const victimCred = "X-Amz-Credential=" + victimKey + "%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"

// Billing another tenant: an attacker who holds its own key and knows the victim's key id adds
// the victim's credential where the backend does not look. Every variant is refused 400 in S3's
// dialect before it is charged or reaches the backend; the attacker's own presigned URL is served
// and charged to the attacker. (More variants: t/lua/credentials_spec.lua.)
func TestAbuseBillAnotherTenant(t *testing.T) {
	a := newAbuse(t, nil)
	g := a.gw()
	get := func(pathQuery string) func(int) *harness.Response {
		return func(int) *harness.Response { return g.Do("GET", pathQuery, "", nil, nil) }
	}
	v2 := func() string { return presignV2Query(attackerKey, attackerSecret, "/abucket/obj") }
	form := func(fields [][2]string) func(int) *harness.Response {
		return func(int) *harness.Response {
			var b bytes.Buffer
			w := multipart.NewWriter(&b)
			for _, f := range fields {
				_ = w.WriteField(f[0], f[1])
			}
			fw, _ := w.CreateFormFile("file", "x.txt")
			_, _ = fw.Write([]byte("data"))
			_ = w.Close()
			return g.Do("POST", "/abucket", "", &b, map[string]string{"Content-Type": w.FormDataContentType()})
		}
	}
	var rows []figures
	// the control: the attacker's own presigned URL is served and charged to the attacker
	ctl := a.phase("control: the attacker's own presigned V2 URL", func() []int {
		return attackN(20, get("/abucket/obj?"+v2()))
	})
	allAre(t, "own presigned URL", mapKeys(ctl.answers), 200)
	if ctl.attackerCharge < 20 || ctl.backend != 20 {
		t.Errorf("own presigned URL: attacker charged %v for 20 GETs, backend saw %d", ctl.attackerCharge, ctl.backend)
	}
	rows = append(rows, ctl)

	attacks := []struct {
		name string
		req  func(int) *harness.Response
	}{
		{"attacker's presigned V2 URL + X-Amz-Credential=<victim>",
			get("/abucket/obj?" + v2() + "&" + victimCred)},
		{"presigned V4 with X-Amz-%43redential=<attacker> + signed AWSAccessKeyId=<victim>",
			get(strings.Replace(presignV4URL(t, g.URL, attackerKey, attackerSecret,
				"/abucket/obj?AWSAccessKeyId="+victimKey), "X-Amz-Credential=", "X-Amz-%43redential=", 1))},
		{"presigned V2 + a second AWSAccessKeyId=<victim>",
			get("/abucket/obj?" + v2() + "&AWSAccessKeyId=" + victimKey)},
		{"presigned V2 + x-amz-credential=<victim> (lower case)",
			get("/abucket/obj?" + v2() + "&x-amz-credential=" + victimKey + "%2Fd%2Fr%2Fs3%2Faws4_request")},
		{"anonymous + ;X-Amz-Credential=<victim> after a ';'",
			get("/abucket/obj?prefix=a;" + victimCred)},
		{"attacker's signed header + ?AWSAccessKeyId=<victim>", func(int) *harness.Response {
			return doSigned(t, g, attackerKey, attackerSecret, "GET", "/abucket/obj?AWSAccessKeyId="+victimKey, nil, false)
		}},
		{"POST form: AWSAccessKeyId=<attacker> + X-Amz-Credential=<victim>", form([][2]string{
			{"key", "up/x"}, {"AWSAccessKeyId", attackerKey}, {"policy", "eyJ9"}, {"signature", "x"},
			{"X-Amz-Credential", victimKey + "/20260101/us-east-1/s3/aws4_request"}})},
	}
	for _, at := range attacks {
		f := a.phase(at.name, func() []int { return attackN(20, at.req) })
		allAre(t, at.name, mapKeys(f.answers), 400)
		if f.attackerCharge != 0 || f.backend != 0 {
			t.Errorf("%s: attacker charged %v, backend saw %d: refused after it was charged or proxied",
				at.name, f.attackerCharge, f.backend)
		}
		rows = append(rows, f)
	}
	// the refusal is S3's: InvalidArgument, with the reason
	r := g.Do("GET", "/abucket/obj?"+v2()+"&"+victimCred, "", nil, nil)
	e := parseS3Error(t, r)
	if r.Status != 400 || e.Code != "InvalidArgument" || r.Header.Get("X-Tollgate-Reason") != "ambiguous_credentials" {
		t.Errorf("refusal: %d %+v reason %q", r.Status, e, r.Header.Get("X-Tollgate-Reason"))
	}
	logTable(t, rows)
}

// mapKeys expands a status histogram back into a list (for allAre).
func mapKeys(m map[int]int) []int {
	var out []int
	for s, n := range m {
		for i := 0; i < n; i++ {
			out = append(out, s)
		}
	}
	return out
}

func logTable(t *testing.T, rows []figures) {
	t.Helper()
	var b strings.Builder
	b.WriteString("\n| attack | victim goodput | victim charge | attacker charge | backend requests |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString(r.String() + "\n")
	}
	t.Log(b.String())
}

// deleteBody is a DeleteObjects body of n keys whose <Object> tags are written as tag.
func deleteBody(n int, open, close string, pad int) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><Delete>`)
	b.WriteString(strings.Repeat(" ", pad))
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s<Key>k%04d</Key>%s", open, i, close)
	}
	b.WriteString("</Delete>")
	return b.Bytes()
}

// Under-paying for DeleteObjects (the tenant itself is the attacker): every way of writing 100
// keys is charged 100 keys to the attacker's own account; a body over the bound is refused
// MaxMessageLengthExceeded, malformed XML MalformedXML, neither charged nor proxied.
func TestAbuseDeleteObjectsUnderpay(t *testing.T) {
	a := newAbuse(t, nil)
	g := a.gw()
	del := func(body []byte, chunked bool) func(int) *harness.Response {
		return func(int) *harness.Response {
			return doSigned(t, g, attackerKey, attackerSecret, "POST", "/abucket?delete", body, chunked)
		}
	}
	// an aws-chunked body (unsigned chunks of 37 bytes, a checksum trailer), as current SDKs send
	awsChunked := func(doc []byte) func(int) *harness.Response {
		var b bytes.Buffer
		for i := 0; i < len(doc); i += 37 {
			c := doc[i:min(i+37, len(doc))]
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(c), c)
		}
		b.WriteString("0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n")
		return func(int) *harness.Response {
			return doSignedAs(t, g, attackerKey, attackerSecret, "POST", "/abucket?delete", b.Bytes(), false,
				"STREAMING-UNSIGNED-PAYLOAD-TRAILER", map[string]string{"Content-Encoding": "aws-chunked",
					"X-Amz-Decoded-Content-Length": strconv.Itoa(len(doc)), "X-Amz-Trailer": "x-amz-checksum-crc32"})
		}
	}
	var rows []figures
	paying := []struct {
		name                string
		body                []byte
		chunked, awsChunked bool
	}{
		{"DeleteObjects, 100 keys as <Object >", deleteBody(100, "<Object >", "</Object >", 0), false, false},
		{"DeleteObjects, 100 keys as <s3:Object a=\"x>y\">", []byte(strings.Replace(string(deleteBody(100,
			`<s3:Object a="x>y">`, "</s3:Object>", 0)), "<Delete>", `<Delete xmlns:s3="urn:s3">`, 1)), false, false},
		{"DeleteObjects, 100 keys chunked after 1 MiB of padding", deleteBody(100, "<Object>", "</Object>", 1<<20), true, false},
		{"DeleteObjects, 100 keys as <Object > in aws-chunked 37-byte chunks",
			deleteBody(100, "<Object >", "</Object >", 0), false, true},
	}
	for _, p := range paying {
		req := del(p.body, p.chunked)
		if p.awsChunked {
			req = awsChunked(p.body)
		}
		f := a.phase(p.name, func() []int { return attackN(5, req) })
		// the attacker's own bucket may run dry (503 SlowDown): what it got through, it pays
		if f.answers[200] == 0 || f.answers[200]+f.answers[503] != 5 {
			t.Errorf("%s: answers %v, want 200s (and the attacker's own SlowDowns)", p.name, f.answers)
		}
		// 100 keys x base 2, plus the body's bandwidth, per request admitted
		if f.attackerCharge < float64(200*f.answers[200]) {
			t.Errorf("%s: the attacker paid %v for %d x 100 keys", p.name, f.attackerCharge, f.answers[200])
		}
		rows = append(rows, f)
	}
	refused := []struct {
		name    string
		body    []byte
		chunked bool
	}{
		{"DeleteObjects chunked, 100 keys after 2 MiB of padding", deleteBody(100, "<Object>", "</Object>", 2<<20), true},
		{"DeleteObjects, 1001 keys", deleteBody(1001, "<Object>", "</Object>", 0), false},
		{"DeleteObjects, a comment hiding the end tag", []byte("<Delete><Object><Key>a</Key><!-- </Object></Delete>"), false},
	}
	for _, p := range refused {
		f := a.phase(p.name, func() []int { return attackN(5, del(p.body, p.chunked)) })
		allAre(t, p.name, mapKeys(f.answers), 400)
		if f.attackerCharge != 0 || f.backend != 0 {
			t.Errorf("%s: attacker charged %v, backend saw %d", p.name, f.attackerCharge, f.backend)
		}
		rows = append(rows, f)
	}
	logTable(t, rows)
}

// Sprayed ids on a node whose config_dict holds part of the config: made-up app ids, access keys
// and buckets cost at most TOLLGATE_LOOKUP_RATE Redis lookups a second, a repeated one none (the
// negative cache), and during a Redis freeze they are admitted only from the one fail-open budget
// of unverified requests: no budget, active-set entry or metric series of their own. The victim
// (an app the dict may not hold) keeps its goodput throughout.
func TestAbuseSprayedIDs(t *testing.T) {
	apps := append(manyApps("spray", 1500), app("victim", 20, 40))
	s := newStack(t, stackOptions{apps: apps, configDict: "128k", env: map[string]string{
		"TOLLGATE_LOOKUP_RATE": "50", "TOLLGATE_FAIL_OPEN_RATE": "20"}})
	g := s.gw()
	ctx := context.Background()
	v0, _ := s.store.ConfigVersion(ctx)
	s.waitVersion(v0)
	if g.Metric("ratelimit_config_dict_partial") != 1 {
		t.Fatal("config_dict of 128k holds 1,500 apps: not partial")
	}
	victim := func(done chan<- [2]int, d time.Duration) {
		sent, ok := 0, 0
		refused := map[string]int{}
		tick := time.NewTicker(time.Second / idVictimRate)
		defer tick.Stop()
		for end := time.Now().Add(d); time.Now().Before(end); {
			<-tick.C
			sent++
			r := g.Do("HEAD", "/b/o", "victim", nil, nil)
			if r.Status == 200 {
				ok++
			} else {
				refused[fmt.Sprintf("%d %s", r.Status, r.Header.Get("X-Tollgate-Reason"))]++
			}
		}
		if len(refused) > 0 {
			t.Logf("victim refusals: %v", refused)
		}
		done <- [2]int{sent, ok}
	}
	spray := func(round string, kinds ...string) map[int]int {
		out := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, kind := range kinds {
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func(kind string, w int) {
					defer wg.Done()
					for i := w; i < 100; i += 4 {
						id := fmt.Sprintf("made-up-%s%s-%03d", round, kind, i)
						var r *harness.Response
						switch kind {
						case "app":
							r = g.Do("GET", "/b/o", id, nil, nil)
						case "key":
							r = g.Do("HEAD", "/b/o", "", nil, map[string]string{"Authorization": sigV4("AKIA" + strings.ToUpper(strings.ReplaceAll(id, "-", "")))})
						case "bucket":
							r = g.Do("HEAD", "/"+id+"/o", "", nil, nil)
						}
						mu.Lock()
						out[r.Status]++
						mu.Unlock()
					}
				}(kind, w)
			}
		}
		wg.Wait()
		return out
	}
	hget := func() int64 { return s.cmdCalls("hget") }

	// the victim is a tenant with steady traffic: the node has looked it up before the attack
	eventually(t, "the victim served", func() bool { return g.Do("HEAD", "/b/o", "victim", nil, nil).Status == 200 })
	// once per node: each worker's first request (new connections reach both) finds the id known
	l0 := g.Metric("ratelimit_config_lookups_total")
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ { // concurrent new connections: both workers accept some
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				g.Do("HEAD", "/b/o", "victim", nil, map[string]string{"Connection": "close"})
			}
		}()
	}
	wg.Wait()
	if n := g.Metric("ratelimit_config_lookups_total") - l0; n != 0 {
		t.Errorf("the victim, known to the node, was looked up %v more times on new connections", n)
	}

	// 1. a spray of 300 made-up ids: bounded lookups, none admitted
	done := make(chan [2]int, 1)
	go victim(done, idVictimPhase)
	h0, start := hget(), time.Now()
	answers := spray("", "app", "key", "bucket")
	lookups, secs := hget()-h0, time.Since(start).Seconds()
	v := <-done
	t.Logf("ABUSE | sprayed ids (300 made-up app ids, keys, buckets), config_dict partial | %d/%d | 0 | - | 0 |  Redis lookups %d in %.1f s, answers %v",
		v[1], v[0], lookups, secs, answers)
	if answers[200] != 0 {
		t.Errorf("made-up ids admitted: %v", answers)
	}
	if max := int64(50 * (secs + 2)); lookups > max {
		t.Errorf("%d Redis lookups in %.1f s, want <= %d (TOLLGATE_LOOKUP_RATE=50)", lookups, secs, max)
	}
	if g.Metric("ratelimit_config_lookups_refused_total") == 0 {
		t.Error("no lookup refused for want of budget")
	}
	if float64(v[1]) < 0.95*float64(v[0]) {
		t.Errorf("victim: %d of %d", v[1], v[0])
	}

	// 2. the same ids again, after the budget's second: the negative cache answers, no Redis call
	time.Sleep(1100 * time.Millisecond) // a new second of lookup budget (a window, not a state to poll)
	h1, neg1 := hget(), g.Metric("ratelimit_config_lookup_negative_hits_total")
	again := spray("", "app")
	if n, hits := hget()-h1, g.Metric("ratelimit_config_lookup_negative_hits_total")-neg1; hits == 0 || n > 50 {
		t.Errorf("repeated made-up app ids: %d Redis lookups, %v negative-cache hits", n, hits)
	}
	if again[403] == 0 {
		t.Errorf("repeated made-up ids: answers %v, want 403 unknown_app among them", again)
	}

	// 3. Redis frozen: made-up ids are admitted, if at all, from the one unverified budget
	time.Sleep(1100 * time.Millisecond) // a new second of lookup budget
	go victim(done, idVictimPhase)
	s.redis.Freeze()
	start = time.Now()
	frozen := spray("frozen-", "app") // ids never seen: each one a lookup Redis does not answer
	secs = time.Since(start).Seconds()
	s.redis.Thaw()
	v = <-done
	admitted := frozen[200]
	t.Logf("ABUSE | sprayed ids during a Redis freeze | %d/%d | 0 | - | %d |  answers %v in %.1f s",
		v[1], v[0], admitted, frozen, secs)
	if max := int(20 * (secs + 1)); admitted > max {
		t.Errorf("%d made-up ids admitted in %.1f s of freeze, want <= %d (the one budget of 20/s)",
			admitted, secs, max)
	}
	if float64(v[1]) < 0.95*float64(v[0]) {
		t.Errorf("victim during the freeze: %d of %d", v[1], v[0])
	}
	g.SettleMetrics()
	if got := g.Metric(`ratelimit_fail_open_total{app_id="_unverified"}`); got != float64(admitted) {
		t.Errorf("the unverified budget admitted %v, the spray got %d 200s", got, admitted)
	}
	if m := metricsText(t, g); strings.Contains(m, "made-up-") {
		for _, l := range strings.Split(m, "\n") {
			if strings.Contains(l, "made-up-") {
				t.Errorf("a metric series of a made-up id: %s", l)
				break
			}
		}
	}
	active, err := s.rdb.ZRange(ctx, keys.Active("default"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range active {
		if strings.HasPrefix(id, "made-up-") {
			t.Errorf("made-up id %s in the active set", id)
		}
	}

	// a change of an id the node remembers as known reaches it at once, not after 60 s
	off := app("victim", 20, 40)
	off.Enabled = false
	if _, err := s.store.PutApp(ctx, off); err != nil {
		t.Fatal(err)
	}
	v1, err := s.store.ConfigVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v1)
	if r := g.Do("HEAD", "/b/o", "victim", nil, nil); r.Status == 200 {
		t.Errorf("the victim disabled, config version %d on the node: still served", v1)
	}
}
