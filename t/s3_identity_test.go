// S3 front door through the real gateway: identity from each credential form, identity
// sources, the bucket map, both addressing styles, DeleteObjects per key, S3 error bodies and
// refunds of requests the backend refuses as unauthenticated. Credentials are hand-written
// (tollgate reads the access key id and never checks a signature: the backend does).
package t

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"tollgate/internal/keys"
	"tollgate/t/harness"
)

const (
	akidP1 = "AKIAIOSFODNN7EXAMPLE" // AWS-style key of demo-p1
	akidP2 = "minio-user_2"         // MinIO-style key of demo-p2
)

// bumpConfig announces a config change the way the control plane does.
func (s *stack) bumpConfig() {
	ctx := context.Background()
	v, err := s.rdb.Incr(ctx, keys.ConfigVersion()).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.rdb.Publish(ctx, keys.ConfigChannel(), v).Err(); err != nil {
		s.t.Fatal(err)
	}
}

// putAccessKey maps access key id akid to app in Redis (as the control plane's API does).
func (s *stack) putAccessKey(akid, app string) {
	ctx := context.Background()
	if err := s.rdb.HSet(ctx, keys.AccessKeys(), akid, app).Err(); err != nil {
		s.t.Fatal(err)
	}
	if err := s.rdb.SAdd(ctx, keys.AppAccessKeys(app), akid).Err(); err != nil {
		s.t.Fatal(err)
	}
	s.bumpConfig()
}

func (s *stack) putBucket(bucket, app string) {
	if err := s.rdb.HSet(context.Background(), keys.Buckets(), bucket, app).Err(); err != nil {
		s.t.Fatal(err)
	}
	s.bumpConfig()
}

func sigV4(akid string) string {
	return "AWS4-HMAC-SHA256 Credential=" + akid + "/20260126/us-east-1/s3/aws4_request, " +
		"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=" + strings.Repeat("5d", 32)
}

func sigV2(akid string) string { return "AWS " + akid + ":frJIUN8DYpKDtOLCwo//yllqDzg=" }

func presignV4(akid string) string {
	return "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + akid +
		"%2F20260126%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260126T000000Z&X-Amz-Expires=60" +
		"&X-Amz-SignedHeaders=host&X-Amz-Signature=" + strings.Repeat("a1", 32)
}

func presignV2(akid string) string {
	return "AWSAccessKeyId=" + akid + "&Expires=1893456000&Signature=vjbyPxybdZaNmGa%2ByT272YEAiv4%3D"
}

// postForm is a browser POST upload body with the credential field `field` set to value.
func postForm(t *testing.T, field, value string) (string, string) {
	var b strings.Builder
	w := multipart.NewWriter(&b)
	for _, kv := range [][2]string{{"key", "uploads/${filename}"}, {"Policy", "eyJleHBpcmF0aW9uIjoi"},
		{field, value}, {"X-Amz-Signature", strings.Repeat("0f", 32)}} {
		if err := w.WriteField(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := w.CreateFormFile("file", "photo.jpg")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(fw, strings.Repeat("j", 100000))
	_ = w.Close()
	return b.String(), w.FormDataContentType()
}

// served is the number of requests of app with method and status the node has counted.
func served(g *harness.Gateway, app, method string, status int) float64 {
	return g.Metric(fmt.Sprintf(`ratelimit_requests_total{app_id="%s",method="%s",status="%d"}`,
		app, method, status))
}

// waitCharged polls until app's count of (method, 200) reaches want.
func waitCharged(t *testing.T, g *harness.Gateway, app, method string, want float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s %s requests of %s", fmt.Sprint(want), method, app), func() bool {
		return served(g, app, method, 200) >= want
	}, func() { t.Logf("%s: %v", app, served(g, app, method, 200)) })
}

type s3Error struct {
	Code      string `xml:"Code"`
	Message   string `xml:"Message"`
	Resource  string `xml:"Resource"`
	RequestID string `xml:"RequestId"`
	AccessKey string `xml:"AWSAccessKeyId"`
}

func parseS3Error(t *testing.T, r *harness.Response) s3Error {
	t.Helper()
	var e s3Error
	if ct := r.Header.Get("Content-Type"); ct != "application/xml" {
		t.Fatalf("Content-Type %q, want application/xml (body %q)", ct, r.Body)
	}
	if err := xml.Unmarshal(r.Body, &e); err != nil {
		t.Fatalf("not an S3 error body (%v): %q", err, r.Body)
	}
	return e
}

func waitKnown(t *testing.T, g *harness.Gateway, akid string) {
	t.Helper()
	eventually(t, "the gateway knows "+akid, func() bool {
		return g.Do("HEAD", "/bkt/probe", "", nil, map[string]string{"Authorization": sigV4(akid)}).Status == 200
	})
}

// Every credential form names the app of its key; an X-App-Id beside credentials is ignored.
func TestS3CredentialFormsIdentifyTheApp(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putAccessKey(akidP1, "demo-p1")
	s.putAccessKey(akidP2, "demo-p2")
	waitKnown(t, g, akidP1)
	waitKnown(t, g, akidP2)

	type form struct {
		name   string
		method string
		path   string
		hdr    func(akid string) map[string]string
		body   func(akid string) (string, string)
	}
	forms := []form{
		{"sigv4 header", "GET", "/bkt/k", func(a string) map[string]string {
			return map[string]string{"Authorization": sigV4(a), "X-Amz-Date": "20260126T000000Z"}
		}, nil},
		{"sigv2 header", "GET", "/bkt/k", func(a string) map[string]string {
			return map[string]string{"Authorization": sigV2(a)}
		}, nil},
		{"presigned v4", "GET", "/bkt/k?" + "%s", nil, nil},
		{"presigned v2", "GET", "/bkt/k?" + "%s", nil, nil},
		{"post form v4", "POST", "/bkt", nil, func(a string) (string, string) {
			return postForm(t, "X-Amz-Credential", a+"/20260126/us-east-1/s3/aws4_request")
		}},
		{"post form v2", "POST", "/bkt", nil, func(a string) (string, string) {
			return postForm(t, "AWSAccessKeyId", a)
		}},
	}
	for _, f := range forms {
		for _, c := range []struct{ akid, app string }{{akidP1, "demo-p1"}, {akidP2, "demo-p2"}} {
			t.Run(f.name+" "+c.app, func(t *testing.T) {
				before := served(g, c.app, f.method, 200)
				spoofed := served(g, "demo-p0", f.method, 200)
				path := f.path
				switch f.name {
				case "presigned v4":
					path = fmt.Sprintf(path, presignV4(c.akid))
				case "presigned v2":
					path = fmt.Sprintf(path, presignV2(c.akid))
				}
				hdr := map[string]string{}
				if f.hdr != nil {
					hdr = f.hdr(c.akid)
				}
				var body io.Reader
				if f.body != nil {
					b, ct := f.body(c.akid)
					hdr["Content-Type"] = ct
					body = strings.NewReader(b)
				}
				// the spoofed header names another app: the credentials win
				r := g.Do(f.method, path, "demo-p0", body, hdr)
				if r.Status != 200 {
					t.Fatalf("status %d: %s", r.Status, r.Body)
				}
				waitCharged(t, g, c.app, f.method, before+1)
				if got := served(g, "demo-p0", f.method, 200); got != spoofed {
					t.Fatalf("demo-p0 (the spoofed X-App-Id) was charged: %v -> %v", spoofed, got)
				}
			})
		}
	}
}

// An unknown key gets InvalidAccessKeyId in S3's XML, a malformed one too; with
// TOLLGATE_DEFAULT_APP both known-format unknown keys are charged to that app.
func TestS3UnknownAccessKey(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	r := g.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": sigV4("AKIANOBODYHASTHIS1")})
	if r.Status != 403 {
		t.Fatalf("status %d, want 403: %s", r.Status, r.Body)
	}
	e := parseS3Error(t, r)
	if e.Code != "InvalidAccessKeyId" || e.AccessKey != "AKIANOBODYHASTHIS1" || e.Resource != "/bkt/k" ||
		e.RequestID == "" {
		t.Fatalf("error %+v", e)
	}
	if reason := r.Header.Get("X-Tollgate-Reason"); reason != "unknown_access_key" {
		t.Fatalf("X-Tollgate-Reason %q", reason)
	}
	r = g.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": "AWS bad key:sig"})
	if r.Status != 403 || parseS3Error(t, r).Code != "InvalidAccessKeyId" ||
		r.Header.Get("X-Tollgate-Reason") != "invalid_access_key" {
		t.Fatalf("malformed key: %d %s", r.Status, r.Body)
	}

	d := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_DEFAULT_APP": "demo-p3"}})
	dg := d.gw()
	before := served(dg, "demo-p3", "GET", 200)
	r = dg.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": sigV4("AKIANOBODYHASTHIS1")})
	if r.Status != 200 {
		t.Fatalf("default app: status %d %s", r.Status, r.Body)
	}
	waitCharged(t, dg, "demo-p3", "GET", before+1)
}

// TOLLGATE_APP_HEADER_FROM=trusted: the header counts only from trusted proxies; a var:<name>
// source takes the app from an nginx variable.
func TestS3IdentitySources(t *testing.T) {
	untrusted := newStack(t, stackOptions{env: map[string]string{
		"TOLLGATE_APP_HEADER_FROM": "trusted", "TOLLGATE_TRUSTED_PROXIES": "10.0.0.0/8"}})
	r := untrusted.gw().Do("GET", "/bkt/k", "demo-p1", nil, nil)
	// the header is ignored: an anonymous S3 request without an owner, refused as S3 does
	if r.Status != 403 || r.Header.Get("X-Tollgate-Reason") != "missing_app_id" ||
		parseS3Error(t, r).Code != "AccessDenied" {
		t.Fatalf("header from an untrusted client: %d %s", r.Status, r.Body)
	}
	trusted := newStack(t, stackOptions{env: map[string]string{
		"TOLLGATE_APP_HEADER_FROM": "trusted", "TOLLGATE_TRUSTED_PROXIES": "127.0.0.1/32"}})
	if r := trusted.gw().Do("GET", "/bkt/k", "demo-p1", nil, nil); r.Status != 200 {
		t.Fatalf("header from a trusted proxy: %d %s", r.Status, r.Body)
	}

	v := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_APP_SOURCES": "var:http_x_tenant"}})
	g := v.gw()
	before := served(g, "demo-p2", "GET", 200)
	if r := g.Do("GET", "/bkt/k", "", nil, map[string]string{"X-Tenant": "demo-p2"}); r.Status != 200 {
		t.Fatalf("var source: %d %s", r.Status, r.Body)
	}
	waitCharged(t, g, "demo-p2", "GET", before+1)
	if r := g.Do("GET", "/bkt/k", "demo-p2", nil, nil); r.Status != 403 || parseS3Error(t, r).Code != "AccessDenied" {
		t.Fatalf("X-App-Id is not a source here (an anonymous request): %d %s", r.Status, r.Body)
	}
}

// Anonymous requests to a bucket of the bucket map are charged to its owner; to other buckets
// they are refused as S3 refuses them (403 AccessDenied).
func TestS3AnonymousRequestsChargeTheBucketOwner(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_S3_DOMAINS": "s3.localhost"}})
	g := s.gw()
	s.putBucket("public-data", "demo-p2")
	eventually(t, "bucket map loaded", func() bool {
		return g.Do("GET", "/public-data/a.txt", "", nil, nil).Status == 200
	})
	before := served(g, "demo-p2", "GET", 200)
	if r := g.Do("GET", "/public-data/b.txt", "", nil, nil); r.Status != 200 {
		t.Fatalf("path style: %d %s", r.Status, r.Body)
	}
	if r := vhostDo(t, g, "GET", "public-data.s3.localhost", "/c.txt", nil, nil); r.Status != 200 {
		t.Fatalf("virtual-hosted: %d %s", r.Status, r.Body)
	}
	waitCharged(t, g, "demo-p2", "GET", before+2)
	if r := g.Do("GET", "/private/b.txt", "", nil, nil); r.Status != 403 || parseS3Error(t, r).Code != "AccessDenied" ||
		r.Header.Get("X-Tollgate-Reason") != "missing_app_id" {
		t.Fatalf("bucket outside the map: %d %s", r.Status, r.Body)
	}
}

// vhostDo sends a request with its own Host header.
func vhostDo(t *testing.T, g *harness.Gateway, method, host, path string, body io.Reader,
	hdr map[string]string) *harness.Response {
	t.Helper()
	req, err := http.NewRequest(method, g.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &harness.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Path style and virtual-hosted style yield the same operation and cost.
func TestS3AddressingStylesPriceTheSame(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_S3_DOMAINS": "s3.localhost,s3.example.test"}})
	g := s.gw()
	s.putAccessKey(akidP1, "demo-p1")
	waitKnown(t, g, akidP1)
	auth := map[string]string{"Authorization": sigV4(akidP1)}
	cases := []struct {
		method, path, host, vpath, op string
		want                          int
	}{
		{"GET", "/bkt/dir/k.txt", "bkt.s3.localhost", "/dir/k.txt", "GetObject", 1},
		{"GET", "/bkt", "bkt.s3.localhost", "/", "ListObjects", 3},
		{"GET", "/bkt?list-type=2&prefix=a", "bkt.s3.example.test:8080", "/?list-type=2&prefix=a", "ListObjectsV2", 3},
		{"GET", "/bkt?acl", "bkt.s3.localhost", "/?acl", "GetBucketMetadata", 1},
		{"HEAD", "/bkt/k", "BKT.S3.LOCALHOST", "/k", "HeadObject", 1},
		{"PUT", "/bkt/k", "bkt.s3.localhost", "/k", "PutObject", 5},
		{"PUT", "/bkt", "bkt.s3.localhost", "/", "CreateBucket", 5},
		{"DELETE", "/bkt/k?uploadId=9", "bkt.s3.localhost", "/k?uploadId=9", "AbortMultipartUpload", 3},
		{"GET", "/", "s3.localhost", "/", "ListBuckets", 3},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			ops := `ratelimit_s3_operations_total{operation="` + c.op + `"}`
			before := g.Metric(ops)
			p := g.Do(c.method, c.path, "", nil, auth)
			v := vhostDo(t, g, c.method, c.host, c.vpath, nil, auth)
			if p.Status != 200 || v.Status != 200 {
				t.Fatalf("status path %d, vhost %d", p.Status, v.Status)
			}
			if p.Cost() != c.want || v.Cost() != c.want {
				t.Fatalf("cost path %d, vhost %d, want %d", p.Cost(), v.Cost(), c.want)
			}
			eventually(t, "two "+c.op, func() bool { return g.Metric(ops) >= before+2 })
		})
	}
}

// DeleteObjects is charged per key it deletes: base x keys + the body's bandwidth.
func TestS3DeleteObjectsChargedPerKey(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("bulk", 1000, 50000))})
	g := s.gw()
	s.putAccessKey(akidP1, "bulk")
	waitKnown(t, g, akidP1)
	costSeries := `ratelimit_s3_cost_total{operation="DeleteObjects"}`
	for _, n := range []int{1, 3, 1000} {
		var b strings.Builder
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><Delete><Quiet>true</Quiet>`)
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "<Object><Key>logs/2026/01/object-%05d.json</Key></Object>", i)
		}
		b.WriteString("</Delete>")
		body := b.String()
		want := 2*n + (len(body)+65535)/65536
		before := g.Metric(costSeries)
		r := g.Do("POST", "/bkt?delete", "", strings.NewReader(body),
			map[string]string{"Authorization": sigV4(akidP1), "Content-Type": "application/xml"})
		if r.Status != 200 {
			t.Fatalf("%d keys: status %d %s", n, r.Status, r.Body)
		}
		if r.Cost() != want {
			t.Fatalf("%d keys: cost %d, want %d", n, r.Cost(), want)
		}
		eventually(t, "DeleteObjects cost in /metrics", func() bool {
			return g.Metric(costSeries) == before+float64(want)
		}, func() { t.Logf("%v, want %v", g.Metric(costSeries), before+float64(want)) })
	}
}

// Refusals of credential-identified requests are S3 errors (503 SlowDown by default, 429 with
// TOLLGATE_S3_THROTTLE_STATUS=429), with Retry-After, the X-RateLimit headers and the reason;
// header-identified requests keep the JSON; TOLLGATE_ERROR_FORMAT=s3 makes every refusal S3's.
func TestS3ErrorDialect(t *testing.T) {
	for _, status := range []int{503, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			tiny := app("tiny", 1, 1)
			off := app("off", 1000, 1000)
			off.Enabled = false
			s := newStack(t, stackOptions{apps: appsOf(tiny, off),
				env: map[string]string{"TOLLGATE_S3_THROTTLE_STATUS": fmt.Sprint(status)}})
			g := s.gw()
			s.putAccessKey("AKIATINYTINYTINY", "tiny")
			s.putAccessKey("disabled-key", "off")
			auth := map[string]string{"Authorization": sigV4("AKIATINYTINYTINY")}
			var r *harness.Response
			eventually(t, "a throttled credential request", func() bool {
				r = g.Do("PUT", "/bkt/big", "", strings.NewReader(strings.Repeat("x", 100)), auth)
				return r.Status == status
			})
			e := parseS3Error(t, r)
			if e.Code != "SlowDown" || e.Resource != "/bkt/big" || e.RequestID == "" {
				t.Fatalf("error %+v", e)
			}
			for _, h := range []string{"Retry-After", "X-RateLimit-Cost", "X-RateLimit-Remaining",
				"X-RateLimit-Reset", "X-Tollgate-Reason"} {
				if r.Header.Get(h) == "" {
					t.Fatalf("no %s header: %v", h, r.Header)
				}
			}
			eventually(t, "request_blocked event naming the access key", func() bool {
				entries, err := s.rdb.XRange(context.Background(), keys.EventsStream(), "-", "+").Result()
				if err != nil {
					return false
				}
				for _, e := range entries {
					if e.Values["event_type"] == "request_blocked" && e.Values["access_key_id"] == "AKIATINYTINYTINY" {
						return true
					}
				}
				return false
			})
			// the same app by header: today's JSON 429
			j := g.Do("PUT", "/bkt/big", "tiny", strings.NewReader(strings.Repeat("x", 100)), nil)
			if j.Status != 429 || j.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("header-identified: %d %s %s", j.Status, j.Header.Get("Content-Type"), j.Body)
			}
			eventually(t, "disabled app's key loaded", func() bool {
				r = g.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": sigV2("disabled-key")})
				return r.Status == 403
			})
			if e := parseS3Error(t, r); e.Code != "AccessDenied" || r.Header.Get("X-Tollgate-Reason") != "app_disabled" {
				t.Fatalf("disabled app: %+v %v", e, r.Header)
			}
		})
	}
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_ERROR_FORMAT": "s3"}})
	g := s.gw()
	r := g.Do("GET", "/bkt/k", "", nil, nil)
	if r.Status != 403 || parseS3Error(t, r).Code != "AccessDenied" ||
		r.Header.Get("X-Tollgate-Reason") != "missing_app_id" {
		t.Fatalf("TOLLGATE_ERROR_FORMAT=s3, anonymous: %d %s", r.Status, r.Body)
	}
	r = g.Do("PROPFIND", "/bkt/k", "demo-p1", nil, nil)
	if r.Status != 405 || parseS3Error(t, r).Code != "MethodNotAllowed" {
		t.Fatalf("TOLLGATE_ERROR_FORMAT=s3, unsupported method: %d %s", r.Status, r.Body)
	}
	// a key whose app is gone: AccessDenied, as S3 answers a key without permissions
	s.putAccessKey("AKIAGHOSTAPPKEY00001", "ghost")
	eventually(t, "the ghost app's key loaded", func() bool {
		r = g.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": sigV4("AKIAGHOSTAPPKEY00001")})
		return r.Header.Get("X-Tollgate-Reason") == "unknown_app"
	})
	if r.Status != 403 || parseS3Error(t, r).Code != "AccessDenied" {
		t.Fatalf("key of an unknown app: %d %s", r.Status, r.Body)
	}
}

// A request the backend refuses as unauthenticated (401, 403) is refunded to the app it was
// charged to, counted by app and reported in an auth_failed event with the client IP and key;
// other refusals (404) stay charged.
func TestS3BackendAuthFailuresAreRefunded(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putAccessKey(akidP1, "demo-p1")
	waitKnown(t, g, akidP1)
	auth := map[string]string{"Authorization": sigV4(akidP1)}
	failures := `ratelimit_auth_failures_total{app_id="demo-p1"}`
	for i, code := range []int{403, 401} {
		before := g.State("demo-p1").RollbackCount
		r := g.Do("PUT", fmt.Sprintf("/bkt/forged?code=%d", code), "", strings.NewReader("payload"), auth)
		if r.Status != code {
			t.Fatalf("status %d, want the backend's %d", r.Status, code)
		}
		eventually(t, fmt.Sprintf("refund of the %d", code), func() bool {
			return g.State("demo-p1").RollbackCount == before+1
		})
		eventually(t, "auth failure counted", func() bool { return g.Metric(failures) == float64(i+1) })
	}
	before := g.State("demo-p1").RollbackCount
	if r := g.Do("GET", "/bkt/missing?code=404", "", nil, auth); r.Status != 404 {
		t.Fatalf("status %d", r.Status)
	}
	if r := g.Do("GET", "/bkt/ok", "", nil, auth); r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	if got := g.State("demo-p1").RollbackCount; got != before {
		t.Fatalf("a 404 was refunded: rollbacks %d -> %d", before, got)
	}
	eventually(t, "auth_failed event in the stream", func() bool {
		entries, err := s.rdb.XRange(context.Background(), keys.EventsStream(), "-", "+").Result()
		if err != nil {
			return false
		}
		for _, e := range entries {
			// current_usage: the client IP's refusals in the last minute (1 at the first)
			if e.Values["event_type"] == "auth_failed" && e.Values["access_key_id"] == akidP1 &&
				e.Values["ip_address"] == "127.0.0.1" && e.Values["app_id"] == "demo-p1" &&
				e.Values["current_usage"] == "1" {
				return true
			}
		}
		return false
	})
}

// An open circuit breaker refuses credential-identified requests with S3's ServiceUnavailable.
func TestS3BreakerRefusalIsServiceUnavailable(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putAccessKey(akidP1, "demo-p1")
	waitKnown(t, g, akidP1)
	s.putBreaker("default", breakerCfg(map[string]any{"open_timeout_ms": 60000}))
	auth := map[string]string{"Authorization": sigV4(akidP1)}
	g.T("fail?status=503", nil)
	var r *harness.Response
	eventually(t, "the breaker refuses", func() bool {
		r = g.Do("GET", "/bkt/k", "", nil, auth)
		return r.Header.Get("X-Tollgate-Reason") == "circuit_open"
	})
	e := parseS3Error(t, r)
	if r.Status != 503 || e.Code != "ServiceUnavailable" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("breaker refusal: %d %+v %v", r.Status, e, r.Header)
	}
}

// ratelimit_s3_cost_total counts what a request was charged in the end: GetObject's base and
// the download bandwidth charged after the response.
func TestS3OperationCostIncludesDownload(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putAccessKey(akidP1, "demo-p1")
	waitKnown(t, g, akidP1)
	series := `ratelimit_s3_cost_total{operation="GetObject"}`
	before := g.Metric(series)
	r := g.Do("GET", "/bkt/blob?size=300000", "", nil, map[string]string{"Authorization": sigV4(akidP1)})
	if r.Status != 200 || len(r.Body) != 300000 || r.Cost() != 1 {
		t.Fatalf("status %d len %d cost %d", r.Status, len(r.Body), r.Cost())
	}
	eventually(t, "GetObject cost 1 + 5 units", func() bool { return g.Metric(series) == before+6 },
		func() { t.Logf("%v, want %v", g.Metric(series), before+6) })
}

// TOLLGATE_COSTS sets base costs by operation or by class (an operation over its class).
func TestS3CostsAreConfigurable(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_COSTS": "GetObject=2,LIST=4,ListParts=9"}})
	g := s.gw()
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/bkt/k", 2}, {"GET", "/bkt?list-type=2", 4}, {"GET", "/", 4},
		{"GET", "/bkt/k?uploadId=1", 9}, {"HEAD", "/bkt/k", 1}, {"DELETE", "/bkt/k", 2},
	} {
		if r := g.Do(c.method, c.path, "demo-p1", nil, nil); r.Status != 200 || r.Cost() != c.want {
			t.Fatalf("%s %s: status %d cost %d, want %d", c.method, c.path, r.Status, r.Cost(), c.want)
		}
	}
}

// SigV4 streaming uploads (aws-chunked, signed chunks or unsigned with a checksum trailer) are
// PutObject, charged on the bytes they send.
func TestS3StreamingPutIsPutObject(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putAccessKey(akidP1, "demo-p1")
	waitKnown(t, g, akidP1)
	ops := `ratelimit_s3_operations_total{operation="PutObject"}`
	before := g.Metric(ops)
	payload := strings.Repeat("p", 70000)
	signed := fmt.Sprintf("%x;chunk-signature=%s\r\n%s\r\n0;chunk-signature=%s\r\n\r\n",
		len(payload), strings.Repeat("a", 64), payload, strings.Repeat("b", 64))
	unsigned := fmt.Sprintf("%x\r\n%s\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n", len(payload), payload)
	for _, c := range []struct{ sha, body, trailer string }{
		{"STREAMING-AWS4-HMAC-SHA256-PAYLOAD", signed, ""},
		{"STREAMING-UNSIGNED-PAYLOAD-TRAILER", unsigned, "x-amz-checksum-crc32"},
	} {
		hdr := map[string]string{"Authorization": sigV4(akidP1), "Content-Encoding": "aws-chunked",
			"X-Amz-Content-Sha256": c.sha, "X-Amz-Decoded-Content-Length": fmt.Sprint(len(payload))}
		if c.trailer != "" {
			hdr["X-Amz-Trailer"] = c.trailer
		}
		r := g.Do("PUT", "/bkt/streamed", "", strings.NewReader(c.body), hdr)
		want := 5 + (len(c.body)+65535)/65536
		if r.Status != 200 || r.Cost() != want {
			t.Fatalf("%s: status %d cost %d, want 200 and %d", c.sha, r.Status, r.Cost(), want)
		}
	}
	eventually(t, "two PutObject", func() bool { return g.Metric(ops) == before+2 })
}
