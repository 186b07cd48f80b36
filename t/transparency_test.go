package t

// S3 transparency on the real gateway: refusals answered before the body (no 100 Continue, the
// connection closed), retry hints in milliseconds, the raw request target classified and
// proxied unchanged, bodies streamed (a chunked body reaches the backend chunked), oversized
// bodies refused in S3's dialect, and a request the backend resets sent to it once.

import (
	"bufio"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"tollgate/t/harness"
)

// rawExchange sends the head of a request that announces a body and waits for 100 Continue,
// and returns the first status line and headers the gateway answers with, and whether the
// gateway then closed the connection.
func rawExchange(t *testing.T, g *harness.Gateway, head string) (status string, hdr http.Header, body string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Close { // net/http keeps "Connection: close" as resp.Close only
		resp.Header.Set("Connection", "close")
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = br.ReadByte()
	return resp.Status, resp.Header, string(b), err == io.EOF
}

func putHead(path string, hdr map[string]string, length int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\nExpect: 100-continue\r\n", path, length)
	for k, v := range hdr {
		fmt.Fprintf(&sb, "%s: %s\r\n", k, v)
	}
	sb.WriteString("\r\n")
	return sb.String()
}

// Every refusal of a request waiting for 100 Continue is its final answer, sent before any
// 100 Continue, on a connection the gateway closes: the client never sends the body.
func TestRefusalIsAnsweredBeforeTheBody(t *testing.T) {
	tiny := app("tiny", 1, 1)
	off := app("off", 1000, 1000)
	off.Enabled = false
	s := newStack(t, stackOptions{apps: appsOf(tiny, off)})
	g := s.gw()
	s.putAccessKey("AKIATINYTINYTINY", "tiny")
	s.putAccessKey("disabled-key", "off")
	eventually(t, "the keys loaded", func() bool {
		return g.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": sigV2("disabled-key")}).
			Header.Get("X-Tollgate-Reason") == "app_disabled"
	})
	cases := []struct {
		name, reason, code string
		status             int
		hdr                map[string]string
	}{
		{"unknown key", "unknown_access_key", "InvalidAccessKeyId", 403, map[string]string{"Authorization": sigV4("AKIANOBODYNOBODY")}},
		{"disabled app", "app_disabled", "AccessDenied", 403, map[string]string{"Authorization": sigV2("disabled-key")}},
		{"anonymous", "missing_app_id", "AccessDenied", 403, nil},
		{"tokens", "", "SlowDown", 503, map[string]string{"Authorization": sigV4("AKIATINYTINYTINY")}},
		{"tokens, app header (JSON)", "", "", 429, map[string]string{"X-App-Id": "tiny"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var status, body string
			var hdr http.Header
			var closed bool
			// a request costlier than the app's burst is admitted when its bucket is full (into
			// debt): a small request first takes the tiny app's one token, then the upload is refused
			for i := 0; i < 3; i++ {
				if c.status == 503 || c.status == 429 {
					g.Do("GET", "/bkt/k", "", nil, c.hdr)
				}
				status, hdr, body, closed = rawExchange(t, g, putHead("/bkt/obj", c.hdr, 3000000))
				if !strings.HasPrefix(status, "200") && !strings.HasPrefix(status, "100") {
					break
				}
			}
			if strings.HasPrefix(status, "100") || !strings.HasPrefix(status, strconv.Itoa(c.status)) {
				t.Fatalf("first answer %q (%s), want the final %d before any 100 Continue", status, body, c.status)
			}
			if !closed || !strings.EqualFold(hdr.Get("Connection"), "close") {
				t.Fatalf("connection closed %v (Connection: %q): a kept-alive connection would read the body "+
					"the client does not send as its next request", closed, hdr.Get("Connection"))
			}
			if c.code != "" && (!strings.Contains(body, "<Code>"+c.code+"</Code>") || hdr.Get("Content-Type") != "application/xml") {
				t.Fatalf("body %q (%s), want S3 error %s", body, hdr.Get("Content-Type"), c.code)
			}
			if c.reason != "" && hdr.Get("X-Tollgate-Reason") != c.reason {
				t.Fatalf("X-Tollgate-Reason %q, want %q", hdr.Get("X-Tollgate-Reason"), c.reason)
			}
			if c.status == 503 || c.status == 429 {
				checkRetryHints(t, hdr)
				if hdr.Get("X-RateLimit-Cost") != strconv.Itoa(5+(3000000+65535)/65536) {
					t.Fatalf("X-RateLimit-Cost %q, want the PUT's price %d", hdr.Get("X-RateLimit-Cost"), 5+(3000000+65535)/65536)
				}
			}
		})
	}
	// a refused presigned request: S3's Resource is the path (the signature stays out of answers
	// and events)
	r := g.Do("GET", "/bkt/../k?"+presignV4("AKIANOBODYNOBODY"), "", nil, nil)
	if e := parseS3Error(t, r); r.Status != 403 || e.Resource != "/bkt/../k" || strings.Contains(string(r.Body), "Signature") {
		t.Fatalf("refused presigned GET: %d %s", r.Status, r.Body)
	}
	// an admitted request waiting for 100 Continue gets it, and its body reaches the backend
	status, _, _, _ := rawExchange(t, g, putHead("/bkt/obj", map[string]string{"X-App-Id": "demo-p0"}, 10))
	if !strings.HasPrefix(status, "100") {
		t.Fatalf("admitted request: first answer %q, want 100 Continue", status)
	}
}

// checkRetryHints: Retry-After in whole seconds is the ceiling of x-amz-retry-after (ms).
func checkRetryHints(t *testing.T, hdr http.Header) {
	t.Helper()
	ms, err := strconv.Atoi(hdr.Get("X-Amz-Retry-After"))
	secs, err2 := strconv.Atoi(hdr.Get("Retry-After"))
	if err != nil || err2 != nil || ms < 1 || secs < 1 || secs != int(math.Max(1, math.Ceil(float64(ms)/1000))) {
		t.Fatalf("Retry-After %q, x-amz-retry-after %q: want whole seconds = ceil(ms / 1000)",
			hdr.Get("Retry-After"), hdr.Get("X-Amz-Retry-After"))
	}
}

// countingProxy forwards TCP connections to target and counts the bytes clients send.
func countingProxy(t *testing.T, target string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(c, u); c.Close() }()
				buf := make([]byte, 32<<10)
				for {
					k, err := c.Read(buf)
					n.Add(int64(k))
					if k > 0 {
						if _, werr := u.Write(buf[:k]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String(), &n
}

const botoPut = `
import sys, boto3, botocore
from botocore.config import Config
ep, key, path = sys.argv[1:4]
c = boto3.client("s3", endpoint_url=ep, aws_access_key_id=key, aws_secret_access_key="secret-0000000000",
                 region_name="us-east-1", config=Config(retries={"max_attempts": 1, "mode": "standard"},
                 s3={"addressing_style": "path"}))
try:
    with open(path, "rb") as f:
        c.put_object(Bucket="bkt", Key="obj", Body=f)
    print("200 OK")
except botocore.exceptions.ClientError as e:
    print(e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
`

// botocore and aws-cli, refused on a 3 MB PUT (an unknown key; an app out of tokens), send at
// most 64 KiB: they wait for 100 Continue, and the refusal comes first.
func TestRefusedUploadSendsNoBody(t *testing.T) {
	requireTools(t, "/usr/bin/aws", "/usr/bin/python3")
	tiny := app("tiny", 1, 1)
	s := newStack(t, stackOptions{apps: appsOf(tiny)})
	g := s.gw()
	s.putAccessKey("AKIATINYTINYTINY", "tiny")
	eventually(t, "the key loaded", func() bool {
		return g.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": sigV4("AKIATINYTINYTINY")}).
			Header.Get("X-Tollgate-Reason") != "unknown_access_key"
	})
	proxy, sent := countingProxy(t, strings.TrimPrefix(g.URL, "http://"))
	dir := t.TempDir()
	file := filepath.Join(dir, "3mb")
	if err := os.WriteFile(file, make([]byte, 3000000), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "aws-config")
	if err := os.WriteFile(cfg, []byte("[default]\nregion = us-east-1\nmax_attempts = 1\ns3 =\n  addressing_style = path\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clients := map[string]func(key string) string{
		"botocore": func(key string) string {
			out, _ := exec.Command("/usr/bin/python3", "-c", botoPut, "http://"+proxy, key, file).CombinedOutput()
			return strings.TrimSpace(string(out))
		},
		"aws-cli": func(key string) string {
			cmd := exec.Command("/usr/bin/aws", "--endpoint-url", "http://"+proxy, "s3api", "put-object",
				"--bucket", "bkt", "--key", "obj", "--body", file)
			cmd.Env = append(baseEnv(dir), "AWS_ACCESS_KEY_ID="+key, "AWS_SECRET_ACCESS_KEY=secret-0000000000",
				"AWS_CONFIG_FILE="+cfg, "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=")
			out, err := cmd.CombinedOutput()
			if err == nil {
				return "200 OK"
			}
			return strings.TrimSpace(string(out))
		},
	}
	for name, run := range clients {
		for _, key := range []string{"AKIANOBODYNOBODY", "AKIATINYTINYTINY"} {
			var out string
			var bytes int64
			for i := 0; i < 3; i++ {
				// a request costlier than the app's burst is admitted into a full bucket (and
				// into debt): a small request first takes the tiny app's one token
				g.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": sigV4(key)})
				sent.Store(0)
				out = run(key)
				bytes = sent.Load()
				if !strings.HasPrefix(out, "200") && !strings.Contains(out, "b'ok'") {
					break
				}
			}
			t.Logf("%s, %s: %q, %d bytes sent", name, key, tailBytes(out, 200), bytes)
			if !strings.Contains(out, "InvalidAccessKeyId") && !strings.Contains(out, "SlowDown") {
				t.Fatalf("%s with %s: %q, want a refusal", name, key, out)
			}
			if bytes > 64<<10 {
				t.Fatalf("%s with %s sent %d bytes for a refused 3 MB PUT, want <= 64 KiB", name, key, bytes)
			}
		}
	}
}

// The request target the backend receives is the one the client sent, and the operation, bucket
// and key are read from it as S3 servers read them (docs/s3.md, "The request target").
func TestRawTargetIsClassifiedAndProxiedUnchanged(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	cases := []struct {
		target string
		cost   int // the operation's base cost: GetObject 1, ListObjects / ListBuckets 3
	}{
		{"/bkt/../k", 1},      // key "../k" (nginx's $uri: "/k", a ListObjects)
		{"/bkt/..", 1},        // key ".." ($uri "/": a ListBuckets)
		{"/bkt/a/../../k", 1}, // key "a/../../k"
		{"/bkt//k", 1},        // key "/k"
		{"/bkt/a%2Fb", 1},     // key "a/b"
		{"/bkt/%2E%2E/k", 1},  // key "../k"
		{"/bkt/a;b=c", 1},     // key "a;b=c"
		{"/bkt/./k", 1},       // key "./k"
		{"/bkt/", 3},          // ListObjects
		{"/bkt", 3},           // ListObjects
		{"/", 3},              // ListBuckets
	}
	for _, c := range cases {
		r := g.Do("GET", c.target, "demo-p0", nil, nil)
		if r.Status != 200 || r.Header.Get("X-Test-Uri") != c.target || r.Cost() != c.cost {
			t.Errorf("GET %s: status %d, the backend received %q, cost %d; want 200, %q, cost %d",
				c.target, r.Status, r.Header.Get("X-Test-Uri"), r.Cost(), c.target, c.cost)
		}
	}
}

// Bodies stream: a chunked body reaches the backend chunked and intact (nginx's request
// buffering would re-frame it with a Content-Length), a large one byte-exact; the settled cost
// of a download is in the access log ($tg_s) while X-RateLimit-Cost is the request's price.
func TestBodiesStreamUnchanged(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	sum := md5.Sum(data)
	want := fmt.Sprintf("%d %s", len(data), hex.EncodeToString(sum[:]))
	// chunked: an io.Reader without a length
	req, _ := http.NewRequest("PUT", g.URL+"/bkt/chunked?digest=1", io.MultiReader(strings.NewReader(""), bytesReader(data)))
	req.Header.Set("X-App-Id", "demo-p0")
	req.ContentLength = -1
	resp, err := g.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Test-Body") != want || resp.Header.Get("X-Test-TE") != "chunked" {
		t.Fatalf("chunked PUT: %d, the backend got %q (Transfer-Encoding %q), want %q chunked", resp.StatusCode,
			resp.Header.Get("X-Test-Body"), resp.Header.Get("X-Test-TE"), want)
	}
	r := g.Do("PUT", "/bkt/plain?digest=1", "demo-p0", bytesReader(data), nil)
	if r.Status != 200 || r.Header.Get("X-Test-Body") != want {
		t.Fatalf("PUT: %d, the backend got %q, want %q", r.Status, r.Header.Get("X-Test-Body"), want)
	}
	// a GET of 4 units of 64 KiB: its price 1 on the answer; the settled cost (price and the
	// bytes sent) in the access log, the same the cost metric adds
	before := seriesSum(t, g, "ratelimit_s3_cost_total", `operation="GetObject"`)
	r = g.Do("GET", "/bkt/settled?size=262144", "demo-p0", nil, nil)
	if r.Status != 200 || r.Cost() != 1 {
		t.Fatalf("GET: %d cost %d, want 200 and the price 1", r.Status, r.Cost())
	}
	var settled float64
	eventually(t, "the GET in the cost metric", func() bool {
		settled = seriesSum(t, g, "ratelimit_s3_cost_total", `operation="GetObject"`) - before
		return settled > 0
	})
	logged := ""
	for _, l := range g.AccessLog() {
		if f := strings.Fields(l); len(f) >= 4 && f[2] == "/bkt/settled" {
			logged = f[3]
		}
	}
	if settled < 5 || logged != strconv.Itoa(int(settled)) {
		t.Fatalf("settled cost: access log %q, metric %v; want the same, at least 1 + 4", logged, settled)
	}
}

func bytesReader(b []byte) io.Reader { return &sliceReader{b: b} }

// sliceReader is a reader net/http cannot learn the length of (a chunked body).
type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// A body announced above TOLLGATE_MAX_BODY_SIZE is refused before it is sent: EntityTooLarge in
// S3's dialect (with S3's MaxSizeAllowed), 413 JSON for a request that names its app by header.
func TestOversizedBodyIsEntityTooLarge(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_MAX_BODY_SIZE": "1048576"}})
	g := s.gw()
	s.putAccessKey("AKIADEMODEMODEMO", "demo-p0")
	eventually(t, "the key loaded", func() bool {
		return g.Do("GET", "/bkt/k", "", nil, map[string]string{"Authorization": sigV4("AKIADEMODEMODEMO")}).Status == 200
	})
	status, hdr, body, closed := rawExchange(t, g, putHead("/bkt/big", map[string]string{"Authorization": sigV4("AKIADEMODEMODEMO")}, 1048577))
	if !strings.HasPrefix(status, "413") || !closed || !strings.Contains(body, "<Code>EntityTooLarge</Code>") ||
		!strings.Contains(body, "<MaxSizeAllowed>1048576</MaxSizeAllowed>") || hdr.Get("X-Tollgate-Reason") != "entity_too_large" {
		t.Fatalf("oversized PUT: %q closed %v %q", status, closed, body)
	}
	status, _, body, _ = rawExchange(t, g, putHead("/bkt/big", map[string]string{"X-App-Id": "demo-p0"}, 1048577))
	if !strings.HasPrefix(status, "413") || !strings.Contains(body, `"reason":"entity_too_large"`) {
		t.Fatalf("oversized PUT by header: %q %q", status, body)
	}
	if r := g.Do("PUT", "/bkt/fits?digest=1", "demo-p0", strings.NewReader(strings.Repeat("x", 1048576)), nil); r.Status != 200 {
		t.Fatalf("PUT of exactly the limit: %d %s", r.Status, r.Body)
	}
}

// resettingBackend answers GETs and resets the connection of every PUT after reading a little of
// it; it counts the PUTs it received.
func resettingBackend(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var puts atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.Method == "PUT" {
						puts.Add(1)
						_, _ = io.CopyN(io.Discard, req.Body, 1024)
						_ = c.(*net.TCPConn).SetLinger(0) // RST
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return l.Addr().String(), &puts
}

// A backend that resets the connection of a PUT sees that PUT once: nginx does not re-send it
// (neither on a new connection after a kept-alive one failed, nor to another try).
func TestResetPutIsNotResent(t *testing.T) {
	addr, puts := resettingBackend(t)
	s := newStack(t, stackOptions{})
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: s.gwURL, Backend: addr, Workers: 1})
	eventually(t, "the gateway admits", func() bool {
		return g.Do("GET", "/bkt/k", "demo-p0", nil, nil).Status == 200
	})
	for i := 0; i < 3; i++ {
		g.Do("GET", "/bkt/k", "demo-p0", nil, nil) // kept-alive connections to the backend
	}
	before := puts.Load()
	res := g.Do("PUT", "/bkt/k", "demo-p0", strings.NewReader(strings.Repeat("x", 256<<10)), nil)
	if n := puts.Load() - before; n != 1 || res.Status != 502 {
		t.Fatalf("the backend received the PUT %d times, the client got %d; want once and 502", n, res.Status)
	}
}

// Keys with dot-segments and double slashes work end to end with a real SDK and the S3 backend:
// charged as the object operations they are, and stored under the key the client named (where
// the backend accepts the key: a backend on a file system may refuse "..", as it would without
// the gateway).
func TestDotSegmentKeysEndToEnd(t *testing.T) {
	st := s3Stack(t, nil)
	c := s3clients()[5] // aws-sdk-go-v2
	st.addKey(t, "demo-p1", c.key)
	ctx := context.Background()
	cl := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(st.g.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(c.key, c.secret, "")})
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("dots")}); err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, key := range []string{"../up", "a/../b", "./here", "x//y", "..", "semi;colon"} {
		ops0, _ := opCounters(t, st.g)
		body := "object " + key
		if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("dots"), Key: aws.String(key),
			Body: strings.NewReader(body)}); err != nil {
			t.Logf("PUT %q: the backend refused it: %v", key, err)
			var ops map[string]float64
			eventually(t, "the gateway counted the PUT", func() bool {
				o, _ := opCounters(t, st.g)
				ops = delta(o, ops0)
				return sumOf(ops) >= 1
			})
			if ops["PutObject"] != 1 {
				t.Fatalf("key %q: the gateway counted %v, want one PutObject", key, ops)
			}
			continue
		}
		stored++
		out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("dots"), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("GET %q: %v", key, err)
		}
		got, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if string(got) != body {
			t.Fatalf("GET %q: %q, want %q", key, got, body)
		}
		var ops map[string]float64
		eventually(t, "the gateway counted the PUT and the GET", func() bool {
			o, _ := opCounters(t, st.g)
			ops = delta(o, ops0)
			return sumOf(ops) >= 2
		})
		if ops["PutObject"] != 1 || ops["GetObject"] != 1 {
			t.Fatalf("key %q: the gateway counted %v, want one PutObject and one GetObject", key, ops)
		}
	}
	list, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("dots")})
	if err != nil || len(list.Contents) != stored || stored < 2 {
		t.Fatalf("listing: %v, %d objects, %d stored", err, len(list.Contents), stored)
	}
}

// An open circuit breaker refuses an upload before its body too, with both retry hints.
func TestBreakerRefusalBeforeTheBody(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putAccessKey(akidP1, "demo-p1")
	waitKnown(t, g, akidP1)
	s.putBreaker("default", breakerCfg(map[string]any{"open_timeout_ms": 60000}))
	auth := map[string]string{"Authorization": sigV4(akidP1)}
	g.T("fail?status=503", nil)
	eventually(t, "the breaker refuses", func() bool {
		return g.Do("GET", "/bkt/k", "", nil, auth).Header.Get("X-Tollgate-Reason") == "circuit_open"
	})
	status, hdr, body, closed := rawExchange(t, g, putHead("/bkt/obj", auth, 3000000))
	if !strings.HasPrefix(status, "503") || !closed || !strings.Contains(body, "<Code>ServiceUnavailable</Code>") {
		t.Fatalf("breaker refusal of an upload: %q closed %v %q", status, closed, body)
	}
	checkRetryHints(t, hdr)
}

// silentBackend accepts connections and reads requests, and never answers.
func silentBackend(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	return l.Addr().String()
}

// checkNginxPage: an answer nginx made up itself, in S3's dialect: the status, the code, the
// resource (a trailing "*": a prefix of it) and a request id, never tollgate's reason header.
func checkNginxPage(t *testing.T, what string, status int, hdr http.Header, body []byte, wantStatus int,
	code, resource string) {
	t.Helper()
	var e s3Error
	if status != wantStatus || hdr.Get("Content-Type") != "application/xml" || xml.Unmarshal(body, &e) != nil ||
		e.Code != code || !(e.Resource == resource || strings.HasSuffix(resource, "*") &&
		strings.HasPrefix(e.Resource, strings.TrimSuffix(resource, "*"))) || e.RequestID == "" ||
		hdr.Get("X-Tollgate-Reason") != "" {
		t.Fatalf("%s: %d %s %q (X-Tollgate-Reason %q); want %d, S3 XML %s for %s with a request id", what, status,
			hdr.Get("Content-Type"), body, hdr.Get("X-Tollgate-Reason"), wantStatus, code, resource)
	}
}

// accessLogged is the $tg_s of the last access-log line of status and uri ("" when none).
func accessLogged(g *harness.Gateway, status int, uri string) (string, bool) {
	lines := g.AccessLog()
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) >= 4 && f[1] == strconv.Itoa(status) && f[2] == uri {
			return f[3], true
		}
	}
	return "", false
}

// Every answer nginx makes up itself on the S3 server is S3's XML error with nginx's status: a
// backend that is down (502) or silent (504), a request line or header nginx cannot parse
// (400, 414). An admitted request the backend failed still runs tollgate's log phase (refunded,
// counted), and the answers of tollgate and of the backend pass unchanged.
func TestNginxOwnAnswersAreS3XML(t *testing.T) {
	tiny := app("tiny", 1, 1)
	s := newStack(t, stackOptions{apps: appsOf(tiny)})
	g := s.gw()
	s.putAccessKey("AKIATINYTINYTINY", "tiny")
	down := harness.StartGateway(t, harness.GatewayOptions{RedisURL: s.gwURL, Workers: 1,
		Backend: "127.0.0.1:" + strconv.Itoa(harness.FreePort(t))})
	slow := harness.StartGateway(t, harness.GatewayOptions{RedisURL: s.gwURL, Workers: 1, Backend: silentBackend(t),
		ExtraHTTP: "proxy_read_timeout 1s;"})

	t.Run("backend down: 502", func(t *testing.T) {
		var r *harness.Response
		eventually(t, "an admitted GET answered 502", func() bool {
			r = down.Do("GET", "/bkt/k", "demo-p0", nil, nil)
			return r.Status == 502 && r.Header.Get("X-RateLimit-Cost") == "1"
		})
		checkNginxPage(t, "GET", r.Status, r.Header, r.Body, 502, "ServiceUnavailable", "/bkt/k")
		// the request's log phase ran: refunded ($tg_s 0, not "-") and counted
		eventually(t, "the 502 logged as refunded", func() bool {
			settled, ok := accessLogged(down, 502, "/bkt/k")
			return ok && settled == "0"
		}, func() { t.Logf("access log: %q", down.AccessLog()) })
		eventually(t, "the 502 counted", func() bool {
			return seriesSum(t, down, "ratelimit_requests_total", `app_id="demo-p0"`, `status="502"`) >= 1
		})
		if r := down.Do("HEAD", "/bkt/k", "demo-p0", nil, nil); r.Status != 502 || len(r.Body) != 0 {
			t.Fatalf("HEAD: %d %q, want 502 without a body", r.Status, r.Body)
		}
		r = down.Do("PUT", "/bkt/up", "demo-p0", strings.NewReader(strings.Repeat("x", 100000)),
			map[string]string{"Transfer-Encoding": "chunked"})
		checkNginxPage(t, "streamed PUT", r.Status, r.Header, r.Body, 502, "ServiceUnavailable", "/bkt/up")
	})

	t.Run("backend silent: 504", func(t *testing.T) {
		var r *harness.Response
		eventually(t, "an admitted GET answered 504", func() bool {
			r = slow.Do("GET", "/bkt/k", "demo-p0", nil, nil)
			return r.Status == 504 && r.Header.Get("X-RateLimit-Cost") == "1"
		})
		checkNginxPage(t, "GET", r.Status, r.Header, r.Body, 504, "RequestTimeout", "/bkt/k")
	})

	t.Run("requests nginx cannot parse", func(t *testing.T) {
		long := "/bkt/" + strings.Repeat("k", 9000)
		for _, c := range []struct {
			what, head     string
			status         int
			code, resource string
		}{
			{"dot-segments above the root", "GET /bkt/../../k HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, "InvalidURI", "/bkt/../../k"},
			{"encoded dot-segments above the root", "GET /bkt/%2E%2E/%2e%2e/k HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, "InvalidURI", "/bkt/%2E%2E/%2e%2e/k"},
			{"virtual-hosted, above the root", "PUT /../k HTTP/1.1\r\nHost: bkt.s3.localhost\r\nContent-Length: 0\r\n\r\n", 400, "InvalidURI", "/../k"},
			{"two Host headers", "GET /bkt/k HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "BadRequest", "/bkt/k"},
			{"header section too large", "GET /bkt/k HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 10000) + "\r\n\r\n", 400, "RequestHeaderSectionTooLarge", "/bkt/k"},
			{"request line too long", "GET " + long + " HTTP/1.1\r\nHost: a\r\n\r\n", 414, "InvalidURI", "/bkt/kkkk*"},
			{"unknown transfer coding", "PUT /bkt/k HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "NotImplemented", "/bkt/k"},
		} {
			status, hdr, body, _ := rawExchange(t, g, c.head)
			code, _ := strconv.Atoi(strings.Fields(status)[0])
			checkNginxPage(t, c.what, code, hdr, []byte(body), c.status, c.code, c.resource)
		}
	})

	t.Run("tollgate's and the backend's answers pass unchanged", func(t *testing.T) {
		// tollgate's JSON 400 and S3 413 (statuses nginx's error pages also cover)
		r := g.Do("GET", "/bkt/k", "bad id!", nil, nil)
		if r.Status != 400 || r.Header.Get("Content-Type") != "application/json" ||
			!strings.Contains(string(r.Body), `"reason":"invalid_app_id"`) {
			t.Fatalf("tollgate's JSON refusal: %d %s %q", r.Status, r.Header.Get("Content-Type"), r.Body)
		}
		// tollgate's SlowDown (503): the tiny app's one token taken first
		auth := map[string]string{"Authorization": sigV4("AKIATINYTINYTINY")}
		eventually(t, "a SlowDown of tollgate", func() bool {
			r = g.Do("GET", "/bkt/k", "", nil, auth)
			return r.Status == 503
		})
		if e := parseS3Error(t, r); e.Code != "SlowDown" || r.Header.Get("X-Tollgate-Reason") == "" {
			t.Fatalf("tollgate's SlowDown: %d %q", r.Status, r.Body)
		}
		for _, expect := range []string{"Connection: close\r\n", "Expect: 100-continue\r\n"} {
			status, _, body, closed := rawExchange(t, g, "PUT /bkt/big HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "+
				auth["Authorization"]+"\r\nContent-Length: 6000000000\r\n"+expect+"\r\n")
			if !strings.HasPrefix(status, "413") || !strings.Contains(body, "<ProposedSize>6000000000</ProposedSize>") {
				t.Fatalf("tollgate's EntityTooLarge (%q): %s %q", expect, status, body)
			}
			// the raw answer before 100 Continue is the connection's last: no error page after it
			if strings.HasPrefix(expect, "Expect") && !closed {
				t.Fatalf("tollgate's EntityTooLarge before 100 Continue: more bytes followed on the connection")
			}
		}
		// the backend's own 500 (nginx's HTML of the test backend) reaches the client as it is
		r = g.Do("GET", "/bkt/k?code=500", "demo-p0", nil, nil)
		if r.Status != 500 || !strings.Contains(r.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("the backend's 500: %d %s %q", r.Status, r.Header.Get("Content-Type"), r.Body)
		}
	})
}

// An S3 upload sent chunked without any length is refused 411 MissingContentLength by the
// gateway, before the body and before the backend (which would answer the same before reading
// the body, a race nginx now and then turned into a 502); an aws-chunked upload with its decoded
// length, and a chunked upload named by the app header, go through.
func TestChunkedUploadWithoutLengthIs411(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putAccessKey(akidP1, "demo-p1")
	waitKnown(t, g, akidP1)
	hits := func() int {
		var h struct{ Hits int }
		g.T("backend_hits", &h)
		return h.Hits
	}
	auth := sigV4(akidP1)
	before := hits()
	for _, path := range []string{"/bkt/k", "/bkt/k?partNumber=1&uploadId=u1"} {
		r := g.Do("PUT", path, "", strings.NewReader(strings.Repeat("x", 70000)),
			map[string]string{"Authorization": auth, "Transfer-Encoding": "chunked"})
		if e := parseS3Error(t, r); r.Status != 411 || e.Code != "MissingContentLength" ||
			r.Header.Get("X-Tollgate-Reason") != "missing_content_length" {
			t.Fatalf("chunked PUT %s without a length: %d %q", path, r.Status, r.Body)
		}
	}
	// waiting for 100 Continue: the answer comes first, on a connection then closed
	status, _, body, closed := rawExchange(t, g, "PUT /bkt/k HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "+auth+
		"\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n")
	if !strings.HasPrefix(status, "411") || !closed || !strings.Contains(body, "<Code>MissingContentLength</Code>") {
		t.Fatalf("chunked PUT waiting for 100 Continue: %q closed %v %q", status, closed, body)
	}
	if n := hits() - before; n != 0 {
		t.Fatalf("the backend saw %d of the refused uploads", n)
	}
	// an aws-chunked upload with its decoded length, and one named by the app header, pass
	r := g.Do("PUT", "/bkt/k2", "", strings.NewReader("5\r\nhello\r\n0\r\n\r\n"), map[string]string{
		"Authorization": auth, "Transfer-Encoding": "chunked", "X-Amz-Decoded-Content-Length": "5",
		"X-Amz-Content-Sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "Content-Encoding": "aws-chunked"})
	if r.Status != 200 {
		t.Fatalf("aws-chunked PUT with its decoded length: %d %q", r.Status, r.Body)
	}
	if r := g.Do("PUT", "/bkt/k3", "demo-p0", strings.NewReader("plain"),
		map[string]string{"Transfer-Encoding": "chunked"}); r.Status != 200 {
		t.Fatalf("chunked PUT named by the app header: %d %q", r.Status, r.Body)
	}
	if n := hits() - before; n != 2 {
		t.Fatalf("the backend saw %d uploads, want the 2 admitted", n)
	}
}

// A retry that waits exactly x-amz-retry-after is admitted, also when the deficit is a few
// milliseconds: the node remembers a refusal until its reset, never longer (a remembered
// refusal that outlived its reset refused the retry again, with a hint of a millisecond: 17 of
// 20 retries).
func TestRetryAfterTheHintIsAdmitted(t *testing.T) {
	// 300 tokens/s: a 6-token PUT refused on an empty bucket waits at most 20 ms
	s := newStack(t, stackOptions{apps: appsOf(app("fast", 300, 300)), workers: 1})
	g := s.gw()
	put := func() *harness.Response { return g.Do("PUT", "/bkt/k", "fast", strings.NewReader("x"), nil) }
	eventually(t, "the app admitted", func() bool { return put().Status == 200 })
	refused, again := 0, 0
	for i := 0; i < 20; i++ {
		var r *harness.Response
		for n := 0; n < 200; n++ { // the bucket emptied: PUTs until one is refused
			if r = put(); r.Status != 200 {
				break
			}
		}
		if r.Status != 429 {
			t.Fatalf("PUTs on an empty bucket: %d %q", r.Status, r.Body)
		}
		refused++
		ms, err := strconv.Atoi(r.Header.Get("X-Amz-Retry-After"))
		if err != nil || ms < 1 || ms > 40 {
			t.Fatalf("x-amz-retry-after %q for a deficit of at most 6 tokens at 300/s", r.Header.Get("X-Amz-Retry-After"))
		}
		time.Sleep(time.Duration(ms) * time.Millisecond)
		if r := put(); r.Status != 200 {
			again++
			t.Logf("the retry after %d ms: %d (x-amz-retry-after %s)", ms, r.Status, r.Header.Get("X-Amz-Retry-After"))
		}
	}
	// (the lease's view of the app's tokens lags its other nodes' and its own unreported use by
	// a sync: at most one in ten, the goal of 1.2 attempts per refusal)
	if again*10 > refused {
		t.Fatalf("%d of %d retries after the hinted wait were refused again", again, refused)
	}
}
