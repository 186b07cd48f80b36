// The differential S3 conformance suite: every case is a sequence of raw, signed HTTP requests
// run twice, once straight against a versitygw and once through a gateway (generous quota) in
// front of a second, identical versitygw. The two transcripts must be the same: status, every
// header S3 defines (ETag, Content-Range, Content-Length, Content-Type, Last-Modified's form,
// x-amz-*, CORS headers, …) and the body, after normalising what differs between two servers by
// nature (request ids, dates, upload and version ids, the Host inside signature diagnostics).
// The gateway's own headers (X-RateLimit-*, X-Connection-*, RateLimit*, X-Tollgate-*) and the
// hop-by-hop ones (Date, Server, Connection, Keep-Alive) are not compared. A case that differs
// names the request and the difference.
package t

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"tollgate/t/harness"
)

const (
	confKey    = "AKIACONFORMANCE00001"
	confSecret = "conformance-secret-000000000000000000001"
	confApp    = "demo-p1" // 10,000 tokens/s guaranteed, 50,000 burst: nothing here is throttled
)

// confTarget is one side of the comparison: where requests go and how ids are normalised.
type confTarget struct {
	name string
	base string // http://127.0.0.1:port
	hc   *http.Client
	ids  map[string]string // an upload or version id -> its normalised name (id1, id2, …)
}

// exchange is one request's normalised answer.
type exchange struct {
	label  string
	status int
	header map[string]string
	body   string
	// codeOnly: a request the gateway answers itself by design (no app to charge it to, a key
	// it does not know): only the status, Content-Type and S3 error code must agree
	codeOnly bool
}

// cc runs one case against one target and keeps the transcript.
type cc struct {
	t      *testing.T
	tg     *confTarget
	bucket string
	log    []exchange
	last   *http.Response // the last raw answer (for ids the case reuses)
	body   []byte         // its raw body
}

// req describes one request; path and query are sent byte for byte as given.
type req struct {
	label, method, path, query string
	header                     map[string]string
	body                       []byte
	anonymous                  bool   // no signature at all
	payload                    string // x-amz-content-sha256 ("": the body's SHA-256)
	chunked                    bool   // Transfer-Encoding: chunked (no Content-Length)
	codeOnly                   bool   // see exchange.codeOnly
	// early: the backend may answer before it reads the body and close the connection while the
	// client still sends it (the client then sees a transport error, not the answer): sent again,
	// at most three times in all, after a transport error
	early bool
}

func newConfTarget(name, base string) *confTarget {
	return &confTarget{name: name, base: base, ids: map[string]string{},
		hc: &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4,
				ExpectContinueTimeout: 5 * time.Second},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var confCreds = aws.Credentials{AccessKeyID: confKey, SecretAccessKey: confSecret}

func sha256hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// build makes the http.Request of r: the raw path in URL.Opaque, so that neither Go nor the
// signer rewrites it.
func (c *cc) build(r req) *http.Request {
	c.t.Helper()
	hr, err := http.NewRequest(r.method, c.tg.base+"/", bytes.NewReader(r.body))
	if err != nil {
		c.t.Fatal(err)
	}
	hr.URL.Opaque = r.path
	hr.URL.RawQuery = r.query
	if r.body == nil {
		hr.Body, hr.ContentLength = http.NoBody, 0
	}
	if r.chunked {
		hr.ContentLength = -1
		hr.TransferEncoding = []string{"chunked"}
	}
	for k, v := range r.header {
		if strings.EqualFold(k, "Host") {
			// {port}: the side's own port (virtual-hosted requests name it like path-style ones)
			hr.Host = strings.ReplaceAll(v, "{port}", c.tg.base[strings.LastIndexByte(c.tg.base, ':')+1:])
			continue
		}
		hr.Header.Set(k, v)
	}
	return hr
}

// s3CanonicalPath is the canonical URI S3 signs for a raw path: each byte of the decoded path
// percent-encoded except the unreserved characters and '/' (no dot-segment removal, '//' kept).
func s3CanonicalPath(raw string) string {
	dec, err := url.PathUnescape(raw)
	if err != nil {
		dec = raw
	}
	var b strings.Builder
	for i := 0; i < len(dec); i++ {
		ch := dec[i]
		if ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' ||
			strings.IndexByte("-._~/", ch) >= 0 {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	return b.String()
}

// sign signs hr as an SDK would for its raw target: over the canonical form of the path, while
// the request line keeps the raw one.
func (c *cc) sign(hr *http.Request, payload string, at time.Time) {
	c.t.Helper()
	hr.Header.Set("X-Amz-Content-Sha256", payload)
	raw := hr.URL.Opaque
	hr.URL.Opaque = s3CanonicalPath(raw)
	err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).
		SignHTTP(context.Background(), confCreds, hr, payload, "s3", region, at)
	hr.URL.Opaque = raw
	if err != nil {
		c.t.Fatal(err)
	}
}

// do sends r (signed unless anonymous) and records its answer.
func (c *cc) do(r req) int {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		hr := c.build(r)
		if !r.anonymous {
			p := r.payload
			if p == "" {
				p = sha256hex(r.body)
			}
			c.sign(hr, p, time.Now().UTC())
		}
		n := c.send(r.label, hr)
		c.log[len(c.log)-1].codeOnly = r.codeOnly
		if n != -1 || !r.early || attempt == 3 {
			return n
		}
		c.t.Logf("%s (%s): %s; sent again", r.label, c.tg.name, c.log[len(c.log)-1].body)
		c.log = c.log[:len(c.log)-1]
	}
}

func (c *cc) send(label string, hr *http.Request) int {
	c.t.Helper()
	resp, err := c.tg.hc.Do(hr)
	if err != nil {
		c.log = append(c.log, exchange{label: label, status: -1, body: "transport error: " + err.Error()})
		c.last, c.body = nil, nil
		return -1
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		body = append(body, []byte("\n(read error: "+err.Error()+")")...)
	}
	c.last, c.body = resp, body
	c.log = append(c.log, c.normalise(label, resp, body))
	return resp.StatusCode
}

// presigned sends a presigned request (SigV4 query auth) signed at `at`, valid for `expires`.
func (c *cc) presigned(label, method, path string, body []byte, at time.Time, expires time.Duration, tamper bool) int {
	c.t.Helper()
	hr := c.build(req{method: method, path: path, body: body})
	q := hr.URL.Query()
	q.Set("X-Amz-Expires", strconv.Itoa(int(expires.Seconds())))
	hr.URL.RawQuery = q.Encode()
	u, _, err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).
		PresignHTTP(context.Background(), confCreds, hr, "UNSIGNED-PAYLOAD", "s3", region, at)
	if err != nil {
		c.t.Fatal(err)
	}
	pu, err := url.Parse(u)
	if err != nil {
		c.t.Fatal(err)
	}
	raw := pu.RawQuery
	if tamper {
		raw = regexp.MustCompile(`X-Amz-Signature=[0-9a-f]`).ReplaceAllStringFunc(raw, func(s string) string {
			if strings.HasSuffix(s, "0") {
				return s[:len(s)-1] + "1"
			}
			return s[:len(s)-1] + "0"
		})
	}
	hr2 := c.build(req{method: method, path: path, query: raw, body: body})
	return c.send(label, hr2)
}

// streaming sends a PUT with a SigV4 streaming body (aws-chunked, every chunk signed), as
// Transfer-Encoding: chunked when chunked, else with the encoded Content-Length.
func (c *cc) streaming(label, path string, data []byte, chunkSize int, chunked bool) int {
	c.t.Helper()
	at := time.Now().UTC()
	hr := c.build(req{method: "PUT", path: path, body: []byte{}})
	hr.Header.Set("Content-Encoding", "aws-chunked")
	hr.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(len(data)))
	var chunks [][]byte
	for off := 0; off < len(data); off += chunkSize {
		chunks = append(chunks, data[off:min(off+chunkSize, len(data))])
	}
	chunks = append(chunks, nil)
	encLen := 0
	for _, ch := range chunks {
		encLen += len(strconv.FormatInt(int64(len(ch)), 16)) + len(";chunk-signature=") + 64 + 2 + len(ch) + 2
	}
	if !chunked {
		hr.ContentLength = int64(encLen)
	} else {
		hr.ContentLength = -1
		hr.TransferEncoding = []string{"chunked"}
	}
	const payload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	c.sign(hr, payload, at)
	m := regexp.MustCompile(`Signature=([0-9a-f]{64})`).FindStringSubmatch(hr.Header.Get("Authorization"))
	if m == nil {
		c.t.Fatalf("no seed signature in %q", hr.Header.Get("Authorization"))
	}
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	date := at.Format("20060102")
	key := mac(mac(mac(mac([]byte("AWS4"+confSecret), date), region), "s3"), "aws4_request")
	scope := date + "/" + region + "/s3/aws4_request"
	prev := m[1]
	var enc bytes.Buffer
	for _, ch := range chunks {
		sts := strings.Join([]string{"AWS4-HMAC-SHA256-PAYLOAD", at.Format("20060102T150405Z"), scope, prev,
			sha256hex(nil), sha256hex(ch)}, "\n")
		prev = hex.EncodeToString(mac(key, sts))
		fmt.Fprintf(&enc, "%x;chunk-signature=%s\r\n", len(ch), prev)
		enc.Write(ch)
		enc.WriteString("\r\n")
	}
	if enc.Len() != encLen {
		c.t.Fatalf("aws-chunked body of %d bytes, announced %d", enc.Len(), encLen)
	}
	hr.Body = io.NopCloser(bytes.NewReader(enc.Bytes()))
	return c.send(label, hr)
}

// trailing sends a PUT with an unsigned aws-chunked body and a CRC32 checksum trailer
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER, what current AWS SDKs send by default), the header signed.
func (c *cc) trailing(label, path string, data []byte, chunked bool, badChecksum bool) int {
	c.t.Helper()
	sum := crc32.ChecksumIEEE(data)
	if badChecksum {
		sum++
	}
	crc := base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	var enc bytes.Buffer
	fmt.Fprintf(&enc, "%x\r\n", len(data))
	enc.Write(data)
	fmt.Fprintf(&enc, "\r\n0\r\nx-amz-checksum-crc32:%s\r\n\r\n", crc)
	hr := c.build(req{method: "PUT", path: path, body: enc.Bytes()})
	hr.Header.Set("Content-Encoding", "aws-chunked")
	hr.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(len(data)))
	hr.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
	if chunked {
		hr.ContentLength = -1
		hr.TransferEncoding = []string{"chunked"}
	}
	c.sign(hr, "STREAMING-UNSIGNED-PAYLOAD-TRAILER", time.Now().UTC())
	return c.send(label, hr)
}

// header names never compared: the transport's and the gateway's own
var confIgnored = regexp.MustCompile(`(?i)^(date|server|connection|keep-alive|x-amz-request-id|x-amz-id-2|` +
	`x-ratelimit-.*|x-connection-.*|ratelimit|ratelimit-policy|x-tollgate-.*)$`)

var (
	confTimeTags = regexp.MustCompile(`<(LastModified|Initiated|CreationDate|ServerTime|Expires|RequestId|HostId)>[^<]*</`)
	confIDTags   = regexp.MustCompile(`<(UploadId|VersionId|NextUploadIdMarker|UploadIdMarker|NextVersionIdMarker|VersionIdMarker)>([^<]*)</`)
	confTagSet   = regexp.MustCompile(`<TagSet>(?:<Tag>.*?</Tag>)*</TagSet>`)
	confTag      = regexp.MustCompile(`<Tag>.*?</Tag>`)
	confDiag     = regexp.MustCompile(`<(StringToSign|StringToSignBytes|CanonicalRequest|CanonicalRequestBytes|SignatureProvided)>[^<]*</`)
)

// id gives an upload or version id its normalised name: the n-th distinct id of this target.
func (tg *confTarget) id(v string) string {
	if v == "" || v == "null" {
		return v
	}
	if n, ok := tg.ids[v]; ok {
		return n
	}
	n := "id" + strconv.Itoa(len(tg.ids)+1)
	tg.ids[v] = n
	return n
}

func (c *cc) normalise(label string, resp *http.Response, body []byte) exchange {
	e := exchange{label: label, status: resp.StatusCode, header: map[string]string{}}
	host := strings.TrimPrefix(c.tg.base, "http://") // the side's own address (in Location)
	vhost := "s3.localhost:" + host[strings.LastIndexByte(host, ':')+1:]
	hosts := strings.NewReplacer(host, "<host>", vhost, "s3.localhost:<port>")
	for k, vs := range resp.Header {
		if confIgnored.MatchString(k) {
			continue
		}
		v := hosts.Replace(strings.Join(vs, ", "))
		switch strings.ToLower(k) {
		case "last-modified", "expires", "x-amz-mp-parts-count-date":
			if _, err := http.ParseTime(v); err == nil {
				v = "<http-date>"
			}
		case "x-amz-version-id", "x-amz-copy-source-version-id":
			v = c.tg.id(v)
		}
		e.header[strings.ToLower(k)] = v
	}
	if len(resp.TransferEncoding) > 0 {
		e.header[":transfer-encoding"] = strings.Join(resp.TransferEncoding, ",")
	}
	s := hosts.Replace(string(body))
	s = confTimeTags.ReplaceAllString(s, "<$1>~</")
	s = confDiag.ReplaceAllString(s, "<$1>~</")
	s = confIDTags.ReplaceAllStringFunc(s, func(m string) string {
		p := confIDTags.FindStringSubmatch(m)
		return "<" + p[1] + ">" + c.tg.id(p[2]) + "</"
	})
	// a tag set has no order (versitygw keeps tags in a map): its tags sorted
	s = confTagSet.ReplaceAllStringFunc(s, func(m string) string {
		tags := confTag.FindAllString(m, -1)
		sort.Strings(tags)
		return "<TagSet>" + strings.Join(tags, "") + "</TagSet>"
	})
	if s != string(body) || confTagSet.MatchString(s) {
		// ids and times of other lengths, tags in another order: the length is checked against
		// the body, which is compared normalised
		if cl, ok := e.header["content-length"]; ok {
			if cl == strconv.Itoa(len(body)) {
				e.header["content-length"] = "(the body's length)"
			} else {
				e.header["content-length"] = cl + " (the body has " + strconv.Itoa(len(body)) + " bytes)"
			}
		}
	}
	e.body = s
	return e
}

// xmlValue is the first <tag>…</tag> of the last answer's body.
func (c *cc) xmlValue(tag string) string {
	m := regexp.MustCompile(`<` + tag + `>([^<]*)</` + tag + `>`).FindSubmatch(c.body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// confCase is one scenario; it works in its own bucket (c.bucket), created before it runs.
type confCase struct {
	name string
	run  func(c *cc)
}

func md5b64(b []byte) string {
	h := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(h[:])
}

func confCases() []confCase {
	obj := []byte("0123456789abcdefghijklmnopqrstuvwxyz") // 36 bytes
	return []confCase{
		{"buckets", func(c *cc) {
			b := "/" + c.bucket
			c.do(req{label: "head bucket", method: "HEAD", path: b})
			c.do(req{label: "create again", method: "PUT", path: b})
			c.do(req{label: "location", method: "GET", path: b, query: "location"})
			c.do(req{label: "head missing bucket", method: "HEAD", path: b + "-none"})
			c.do(req{label: "list missing bucket", method: "GET", path: b + "-none", query: "list-type=2"})
			c.do(req{label: "invalid bucket name", method: "PUT", path: "/Bad_Bucket"})
			c.do(req{label: "delete non-empty prep", method: "PUT", path: b + "/k", body: obj})
			c.do(req{label: "delete non-empty bucket", method: "DELETE", path: b})
			c.do(req{label: "ListBuckets", method: "GET", path: "/"})
			c.do(req{label: "create with us-east-1 named", method: "PUT", path: b + "-fresh",
				body: []byte(`<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>`)})
			c.do(req{label: "create a fresh bucket", method: "PUT", path: b + "-fresh"})
			c.do(req{label: "delete the fresh bucket", method: "DELETE", path: b + "-fresh"})
			c.do(req{label: "delete it again", method: "DELETE", path: b + "-fresh"})
		}},
		{"objects", func(c *cc) {
			p := "/" + c.bucket + "/dir/obj.txt"
			c.do(req{label: "put with metadata", method: "PUT", path: p, body: obj, header: map[string]string{
				"Content-Type": "text/plain", "Cache-Control": "max-age=60", "Content-Disposition": "inline",
				"Content-Language": "en", "X-Amz-Meta-Color": "blue", "X-Amz-Meta-Unicode": "caf%C3%A9",
				"Content-MD5": md5b64(obj)}})
			c.do(req{label: "get", method: "GET", path: p})
			c.do(req{label: "head", method: "HEAD", path: p})
			c.do(req{label: "get with response overrides", method: "GET", path: p,
				query: "response-content-type=application%2Fjson&response-cache-control=no-cache&response-content-disposition=attachment"})
			c.do(req{label: "put with a wrong Content-MD5", method: "PUT", path: p, body: obj,
				header: map[string]string{"Content-MD5": md5b64([]byte("other"))}})
			c.do(req{label: "put with a wrong payload hash", method: "PUT", path: p, body: obj,
				payload: sha256hex([]byte("other"))})
			c.do(req{label: "get missing", method: "GET", path: "/" + c.bucket + "/none"})
			c.do(req{label: "head missing", method: "HEAD", path: "/" + c.bucket + "/none"})
			c.do(req{label: "put empty", method: "PUT", path: "/" + c.bucket + "/empty", body: []byte{}})
			c.do(req{label: "get empty", method: "GET", path: "/" + c.bucket + "/empty"})
			c.do(req{label: "unsigned payload put", method: "PUT", path: "/" + c.bucket + "/unsigned", body: obj,
				payload: "UNSIGNED-PAYLOAD"})
			c.do(req{label: "list v2", method: "GET", path: "/" + c.bucket, query: "list-type=2"})
			c.do(req{label: "list v1 delimiter", method: "GET", path: "/" + c.bucket, query: "delimiter=%2F"})
			c.do(req{label: "list v2 prefix max-keys", method: "GET", path: "/" + c.bucket,
				query: "list-type=2&max-keys=1&prefix=" + url.QueryEscape("")})
			if tok := c.xmlValue("NextContinuationToken"); tok != "" {
				c.do(req{label: "list v2 continuation", method: "GET", path: "/" + c.bucket,
					query: "continuation-token=" + url.QueryEscape(tok) + "&list-type=2&max-keys=1"})
			}
			c.do(req{label: "list v2 start-after", method: "GET", path: "/" + c.bucket, query: "list-type=2&start-after=e"})
			c.do(req{label: "put with Expect: 100-continue", method: "PUT", path: "/" + c.bucket + "/expect", body: obj,
				header: map[string]string{"Expect": "100-continue"}})
			c.do(req{label: "restore (not archived)", method: "POST", path: p, query: "restore",
				body: []byte(`<RestoreRequest><Days>1</Days></RestoreRequest>`)})
			c.do(req{label: "PATCH", method: "PATCH", path: p, body: obj})
			c.do(req{label: "delete", method: "DELETE", path: p})
			c.do(req{label: "delete missing", method: "DELETE", path: p})
			c.do(req{label: "get deleted", method: "GET", path: p})
		}},
		{"conditional", func(c *cc) {
			p := "/" + c.bucket + "/cond"
			c.do(req{label: "put", method: "PUT", path: p, body: obj})
			etag := c.last.Header.Get("ETag")
			past, future := "Sat, 01 Jan 2000 00:00:00 GMT", "Fri, 01 Jan 2100 00:00:00 GMT"
			for _, h := range []map[string]string{
				{"If-Match": etag}, {"If-Match": `"0000"`}, {"If-Match": "*"},
				{"If-None-Match": etag}, {"If-None-Match": `"0000"`}, {"If-None-Match": "*"},
				{"If-Modified-Since": past}, {"If-Modified-Since": future},
				{"If-Unmodified-Since": past}, {"If-Unmodified-Since": future},
				{"If-Match": etag, "If-Unmodified-Since": past}, {"If-None-Match": `"0000"`, "If-Modified-Since": future},
				{"If-Modified-Since": "not a date"},
			} {
				keys := make([]string, 0, len(h))
				for k := range h {
					keys = append(keys, k+": "+h[k])
				}
				sort.Strings(keys)
				c.do(req{label: "GET " + strings.Join(keys, ", "), method: "GET", path: p, header: h})
				c.do(req{label: "HEAD " + strings.Join(keys, ", "), method: "HEAD", path: p, header: h})
			}
			c.do(req{label: "conditional put If-None-Match *", method: "PUT", path: p, body: obj,
				header: map[string]string{"If-None-Match": "*"}})
			c.do(req{label: "conditional put If-Match wrong", method: "PUT", path: p, body: obj,
				header: map[string]string{"If-Match": `"0000"`}})
		}},
		{"ranges", func(c *cc) {
			p := "/" + c.bucket + "/ranged"
			c.do(req{label: "put", method: "PUT", path: p, body: obj})
			for _, r := range []string{"bytes=0-9", "bytes=10-", "bytes=-5", "bytes=30-100", "bytes=35-35",
				"bytes=36-", "bytes=100-200", "bytes=-100", "bytes=5-2", "bytes=0-1,3-4", "bytes=abc", "items=0-1",
				"bytes=-0"} {
				c.do(req{label: "GET Range " + r, method: "GET", path: p, header: map[string]string{"Range": r}})
				c.do(req{label: "HEAD Range " + r, method: "HEAD", path: p, header: map[string]string{"Range": r}})
			}
			c.do(req{label: "range with If-Match", method: "GET", path: p,
				header: map[string]string{"Range": "bytes=1-2", "If-Match": `"0000"`}})
			c.do(req{label: "part number 1", method: "GET", path: p, query: "partNumber=1"})
			c.do(req{label: "part number 2", method: "GET", path: p, query: "partNumber=2"})
		}},
		{"copy", func(c *cc) {
			b := "/" + c.bucket
			c.do(req{label: "put source", method: "PUT", path: b + "/src", body: obj, header: map[string]string{
				"Content-Type": "text/plain", "X-Amz-Meta-Color": "blue", "Cache-Control": "max-age=60"}})
			etag := c.last.Header.Get("ETag")
			cp := func(label, dst string, h map[string]string) {
				hh := map[string]string{"X-Amz-Copy-Source": c.bucket + "/src"}
				for k, v := range h {
					hh[k] = v
				}
				c.do(req{label: label, method: "PUT", path: b + "/" + dst, header: hh})
				c.do(req{label: label + ": head", method: "HEAD", path: b + "/" + dst})
			}
			cp("copy (default COPY)", "c1", nil)
			cp("copy COPY with new metadata ignored", "c2", map[string]string{"X-Amz-Metadata-Directive": "COPY",
				"X-Amz-Meta-Color": "red", "Content-Type": "application/json"})
			cp("copy REPLACE", "c3", map[string]string{"X-Amz-Metadata-Directive": "REPLACE",
				"X-Amz-Meta-Shape": "round", "Content-Type": "application/json"})
			cp("copy bad directive", "c4", map[string]string{"X-Amz-Metadata-Directive": "MERGE"})
			cp("copy if-match ok", "c5", map[string]string{"X-Amz-Copy-Source-If-Match": etag})
			cp("copy if-match fails", "c6", map[string]string{"X-Amz-Copy-Source-If-Match": `"0000"`})
			cp("copy if-none-match fails", "c7", map[string]string{"X-Amz-Copy-Source-If-None-Match": etag})
			cp("copy leading slash source", "c8", map[string]string{"X-Amz-Copy-Source": "/" + c.bucket + "/src"})
			cp("copy missing source", "c9", map[string]string{"X-Amz-Copy-Source": c.bucket + "/none"})
			cp("copy onto itself without REPLACE", "src", nil)
			cp("copy onto itself with REPLACE", "src", map[string]string{"X-Amz-Metadata-Directive": "REPLACE",
				"X-Amz-Meta-Color": "green"})
			cp("copy tagging REPLACE", "c10", map[string]string{"X-Amz-Tagging-Directive": "REPLACE",
				"X-Amz-Tagging": "a=1&b=2"})
			c.do(req{label: "tags of the copy", method: "GET", path: b + "/c10", query: "tagging"})
		}},
		{"multipart", func(c *cc) {
			b := "/" + c.bucket
			part1 := bytes.Repeat([]byte("p"), 5<<20)
			part2 := []byte("the last part")
			c.do(req{label: "create", method: "POST", path: b + "/mp", query: "uploads",
				header: map[string]string{"Content-Type": "text/plain", "X-Amz-Meta-Kind": "multipart"}})
			up := c.xmlValue("UploadId")
			c.do(req{label: "create another", method: "POST", path: b + "/mp2", query: "uploads"})
			up2 := c.xmlValue("UploadId")
			c.do(req{label: "create a third", method: "POST", path: b + "/small", query: "uploads"})
			up3 := c.xmlValue("UploadId")
			q := func(n int, id string) string {
				return "partNumber=" + strconv.Itoa(n) + "&uploadId=" + url.QueryEscape(id)
			}
			c.do(req{label: "part 1", method: "PUT", path: b + "/mp", query: q(1, up), body: part1})
			e1 := c.last.Header.Get("ETag")
			c.do(req{label: "part 2", method: "PUT", path: b + "/mp", query: q(2, up), body: part2})
			e2 := c.last.Header.Get("ETag")
			c.do(req{label: "part 2 again (replaces)", method: "PUT", path: b + "/mp", query: q(2, up), body: part2})
			c.do(req{label: "part 0", method: "PUT", path: b + "/mp", query: q(0, up), body: part2})
			c.do(req{label: "part 10001", method: "PUT", path: b + "/mp", query: q(10001, up), body: part2})
			c.do(req{label: "part of an unknown upload", method: "PUT", path: b + "/mp", query: q(1, "nope"), body: part2})
			c.do(req{label: "part copy", method: "PUT", path: b + "/mp2", query: q(1, up2),
				header: map[string]string{"X-Amz-Copy-Source": c.bucket + "/mp-src", "X-Amz-Copy-Source-Range": "bytes=0-1"}})
			c.do(req{label: "small parts", method: "PUT", path: b + "/small", query: q(1, up3), body: []byte("a")})
			es := c.last.Header.Get("ETag")
			c.do(req{label: "small parts 2", method: "PUT", path: b + "/small", query: q(2, up3), body: []byte("b")})
			es2 := c.last.Header.Get("ETag")
			c.do(req{label: "list parts", method: "GET", path: b + "/mp", query: "uploadId=" + url.QueryEscape(up)})
			c.do(req{label: "list parts max-parts", method: "GET", path: b + "/mp",
				query: "max-parts=1&uploadId=" + url.QueryEscape(up)})
			c.do(req{label: "list uploads", method: "GET", path: b, query: "uploads"})
			c.do(req{label: "list uploads prefix", method: "GET", path: b, query: "prefix=mp&uploads"})
			c.do(req{label: "list uploads max", method: "GET", path: b, query: "max-uploads=1&uploads"})
			complete := func(parts ...string) []byte {
				var sb strings.Builder
				sb.WriteString("<CompleteMultipartUpload>")
				for i := 0; i < len(parts); i += 2 {
					fmt.Fprintf(&sb, "<Part><PartNumber>%s</PartNumber><ETag>%s</ETag></Part>", parts[i], parts[i+1])
				}
				sb.WriteString("</CompleteMultipartUpload>")
				return []byte(sb.String())
			}
			c.do(req{label: "complete with a wrong etag", method: "POST", path: b + "/mp",
				query: "uploadId=" + url.QueryEscape(up), body: complete("1", e1, "2", `"0000"`)})
			c.do(req{label: "complete out of order", method: "POST", path: b + "/mp",
				query: "uploadId=" + url.QueryEscape(up), body: complete("2", e2, "1", e1)})
			c.do(req{label: "complete malformed", method: "POST", path: b + "/mp",
				query: "uploadId=" + url.QueryEscape(up), body: []byte("<Complete")})
			c.do(req{label: "complete too small", method: "POST", path: b + "/small",
				query: "uploadId=" + url.QueryEscape(up3), body: complete("1", es, "2", es2)})
			c.do(req{label: "complete", method: "POST", path: b + "/mp",
				query: "uploadId=" + url.QueryEscape(up), body: complete("1", e1, "2", e2)})
			c.do(req{label: "head completed", method: "HEAD", path: b + "/mp"})
			c.do(req{label: "get completed part 2", method: "GET", path: b + "/mp", query: "partNumber=2"})
			c.do(req{label: "get completed tail", method: "GET", path: b + "/mp",
				header: map[string]string{"Range": "bytes=-20"}})
			c.do(req{label: "list parts of completed", method: "GET", path: b + "/mp", query: "uploadId=" + url.QueryEscape(up)})
			c.do(req{label: "abort", method: "DELETE", path: b + "/mp2", query: "uploadId=" + url.QueryEscape(up2)})
			c.do(req{label: "abort again", method: "DELETE", path: b + "/mp2", query: "uploadId=" + url.QueryEscape(up2)})
			c.do(req{label: "abort small", method: "DELETE", path: b + "/small", query: "uploadId=" + url.QueryEscape(up3)})
			c.do(req{label: "list uploads after", method: "GET", path: b, query: "uploads"})
		}},
		{"versioning", func(c *cc) {
			b := "/" + c.bucket
			c.do(req{label: "versioning unset", method: "GET", path: b, query: "versioning"})
			c.do(req{label: "enable", method: "PUT", path: b, query: "versioning",
				body: []byte(`<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>`)})
			c.do(req{label: "versioning enabled", method: "GET", path: b, query: "versioning"})
			c.do(req{label: "put v1", method: "PUT", path: b + "/v", body: []byte("one")})
			v1 := c.last.Header.Get("X-Amz-Version-Id")
			c.do(req{label: "put v2", method: "PUT", path: b + "/v", body: []byte("two")})
			c.do(req{label: "get v1", method: "GET", path: b + "/v", query: "versionId=" + url.QueryEscape(v1)})
			c.do(req{label: "head v1", method: "HEAD", path: b + "/v", query: "versionId=" + url.QueryEscape(v1)})
			c.do(req{label: "get latest", method: "GET", path: b + "/v"})
			c.do(req{label: "get unknown version", method: "GET", path: b + "/v", query: "versionId=nope"})
			c.do(req{label: "list versions", method: "GET", path: b, query: "versions"})
			c.do(req{label: "delete (marker)", method: "DELETE", path: b + "/v"})
			c.do(req{label: "get after marker", method: "GET", path: b + "/v"})
			c.do(req{label: "list versions with marker", method: "GET", path: b, query: "versions"})
			c.do(req{label: "delete v1", method: "DELETE", path: b + "/v", query: "versionId=" + url.QueryEscape(v1)})
			c.do(req{label: "list versions prefix", method: "GET", path: b, query: "prefix=v&versions"})
			c.do(req{label: "suspend", method: "PUT", path: b, query: "versioning",
				body: []byte(`<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Suspended</Status></VersioningConfiguration>`)})
			c.do(req{label: "versioning suspended", method: "GET", path: b, query: "versioning"})
		}},
		{"subresources", func(c *cc) {
			b := "/" + c.bucket
			c.do(req{label: "put", method: "PUT", path: b + "/t", body: obj})
			c.do(req{label: "put tagging", method: "PUT", path: b + "/t", query: "tagging",
				body: []byte(`<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag></TagSet></Tagging>`)})
			c.do(req{label: "get tagging", method: "GET", path: b + "/t", query: "tagging"})
			c.do(req{label: "delete tagging", method: "DELETE", path: b + "/t", query: "tagging"})
			c.do(req{label: "get tagging after", method: "GET", path: b + "/t", query: "tagging"})
			c.do(req{label: "object acl", method: "GET", path: b + "/t", query: "acl"})
			c.do(req{label: "bucket acl", method: "GET", path: b, query: "acl"})
			c.do(req{label: "bucket policy none", method: "GET", path: b, query: "policy"})
			c.do(req{label: "bucket tagging none", method: "GET", path: b, query: "tagging"})
			c.do(req{label: "bucket cors none", method: "GET", path: b, query: "cors"})
			c.do(req{label: "ownership", method: "GET", path: b, query: "ownershipControls"})
			c.do(req{label: "attributes", method: "GET", path: b + "/t", query: "attributes",
				header: map[string]string{"X-Amz-Object-Attributes": "ETag,ObjectSize"}})
		}},
		{"presigned", func(c *cc) {
			p := "/" + c.bucket + "/pre"
			c.do(req{label: "put", method: "PUT", path: p, body: obj})
			now := time.Now().UTC()
			c.presigned("presigned GET", "GET", p, nil, now, 10*time.Minute, false)
			c.presigned("presigned HEAD", "HEAD", p, nil, now, 10*time.Minute, false)
			c.presigned("presigned PUT", "PUT", "/"+c.bucket+"/pre-put", []byte("via url"), now, 10*time.Minute, false)
			c.do(req{label: "get presigned PUT", method: "GET", path: "/" + c.bucket + "/pre-put"})
			c.presigned("expired presigned GET", "GET", p, nil, now.Add(-2*time.Hour), time.Minute, false)
			c.presigned("tampered presigned GET", "GET", p, nil, now, 10*time.Minute, true)
			c.presigned("presigned GET beyond 7 days", "GET", p, nil, now, 8*24*time.Hour, false)
		}},
		{"cors", func(c *cc) {
			b := "/" + c.bucket
			cors := []byte(`<CORSConfiguration><CORSRule><AllowedOrigin>https://app.example</AllowedOrigin>` +
				`<AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod><AllowedHeader>*</AllowedHeader>` +
				`<ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>300</MaxAgeSeconds></CORSRule></CORSConfiguration>`)
			c.do(req{label: "preflight before a configuration", method: "OPTIONS", path: b + "/k", anonymous: true,
				header: map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "GET"}})
			c.do(req{label: "put cors", method: "PUT", path: b, query: "cors", body: cors,
				header: map[string]string{"Content-MD5": md5b64(cors)}})
			c.do(req{label: "get cors", method: "GET", path: b, query: "cors"})
			c.do(req{label: "put", method: "PUT", path: b + "/k", body: obj})
			for _, h := range []map[string]string{
				{"Origin": "https://app.example", "Access-Control-Request-Method": "GET"},
				{"Origin": "https://app.example", "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "content-type,x-amz-meta-a"},
				{"Origin": "https://app.example", "Access-Control-Request-Method": "DELETE"},
				{"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
				{"Access-Control-Request-Method": "GET"},
				{"Origin": "https://app.example"},
			} {
				keys := make([]string, 0, len(h))
				for k := range h {
					keys = append(keys, k+": "+h[k])
				}
				sort.Strings(keys)
				c.do(req{label: "OPTIONS " + strings.Join(keys, ", "), method: "OPTIONS", path: b + "/k", anonymous: true, header: h})
			}
			c.do(req{label: "GET with Origin", method: "GET", path: b + "/k",
				header: map[string]string{"Origin": "https://app.example"}})
			c.do(req{label: "delete cors", method: "DELETE", path: b, query: "cors"})
		}},
		{"keys", func(c *cc) {
			b := "/" + c.bucket
			for _, k := range []string{
				"caf%C3%A9/%E2%98%83%20snow.txt", // café/☃ snow.txt
				"%E6%97%A5%E6%9C%AC%E8%AA%9E",    // 日本語
				"a/../b", "../up", "a/./b", "a//b", "%2Fleading", "x%2Fy", "semi;colon", "semi%3Bcolon",
				"sp%20ace", "plus+sign", "per%25cent", "tilde~_-.", "q%3Fmark", "hash%23", "amp%26and=eq",
				"%2E%2E/enc-dots", "trailing/", "dir%5Cback",
			} {
				p := b + "/" + k
				c.do(req{label: "PUT " + k, method: "PUT", path: p, body: []byte(k)})
				c.do(req{label: "GET " + k, method: "GET", path: p})
				c.do(req{label: "HEAD " + k, method: "HEAD", path: p})
			}
			c.do(req{label: "list all", method: "GET", path: b, query: "list-type=2"})
			c.do(req{label: "list url-encoded", method: "GET", path: b, query: "encoding-type=url&list-type=2"})
			c.do(req{label: "list v1 url-encoded", method: "GET", path: b, query: "encoding-type=url"})
			c.do(req{label: "list prefix unicode", method: "GET", path: b, query: "list-type=2&prefix=caf%C3%A9%2F"})
			for _, k := range []string{"a/../b", "a//b", "x%2Fy", "semi;colon", "sp%20ace"} {
				c.do(req{label: "DELETE " + k, method: "DELETE", path: b + "/" + k})
			}
			c.do(req{label: "bucket via dot segment", method: "GET", path: "/" + c.bucket + "-x/../" + c.bucket, query: "list-type=2"})
			c.do(req{label: "double slash before bucket", method: "GET", path: "//" + c.bucket + "/plus+sign"})
		}},
		{"streaming", func(c *cc) {
			b := "/" + c.bucket
			data := bytes.Repeat([]byte("streamed "), 9000) // 81,000 bytes: chunks of 64 KiB and the rest
			c.streaming("aws-chunked with Content-Length", b+"/s1", data, 65536, false)
			c.do(req{label: "get s1", method: "GET", path: b + "/s1"})
			c.streaming("aws-chunked as Transfer-Encoding: chunked", b+"/s2", data, 65536, true)
			c.do(req{label: "get s2", method: "GET", path: b + "/s2"})
			c.streaming("aws-chunked small chunks", b+"/s3", data[:100], 8192, true)
			c.trailing("unsigned aws-chunked with a checksum trailer", b+"/t1", data, false, false)
			c.do(req{label: "get t1", method: "GET", path: b + "/t1", header: map[string]string{"X-Amz-Checksum-Mode": "ENABLED"}})
			c.trailing("checksum trailer as Transfer-Encoding: chunked", b+"/t2", data, true, false)
			c.do(req{label: "get t2", method: "GET", path: b + "/t2"})
			c.trailing("a wrong checksum in the trailer", b+"/t3", data, false, true)
			// S3 refuses an upload of no announced size 411 MissingContentLength; the gateway answers
			// that itself, before the body (by design: status, Content-Type and code compared).
			// versitygw answers it before it reads the body and closes the connection: the client
			// now and then sees that close instead of the answer (early)
			c.do(req{label: "plain chunked body, signed", method: "PUT", path: b + "/s4", body: data, chunked: true,
				codeOnly: true, early: true})
			c.do(req{label: "get s4", method: "GET", path: b + "/s4"})
		}},
		{"delete-objects", func(c *cc) {
			b := "/" + c.bucket
			for _, k := range []string{"d1", "d2", "d/3"} {
				c.do(req{label: "put " + k, method: "PUT", path: b + "/" + k, body: obj})
			}
			del := func(label string, body string, withMD5 bool) {
				h := map[string]string{"Content-Type": "application/xml"}
				if withMD5 {
					h["Content-MD5"] = md5b64([]byte(body))
				}
				c.do(req{label: label, method: "POST", path: b, query: "delete", body: []byte(body), header: h})
			}
			del("delete two and a missing one", `<Delete><Object><Key>d1</Key></Object><Object><Key>d/3</Key></Object>`+
				`<Object><Key>none</Key></Object></Delete>`, true)
			del("quiet", `<Delete><Quiet>true</Quiet><Object><Key>d2</Key></Object></Delete>`, true)
			del("malformed", `<Delete><Object><Key>d1</Key>`, true)
			del("empty", `<Delete></Delete>`, true)
			del("without Content-MD5", `<Delete><Object><Key>d1</Key></Object></Delete>`, false)
			c.do(req{label: "list after", method: "GET", path: b, query: "list-type=2"})
		}},
		{"post-object", func(c *cc) {
			// browser form uploads (PostObject), signed with a SigV4 POST policy
			form := func(label, key string, tamper bool, extra map[string]string) {
				at := time.Now().UTC()
				date := at.Format("20060102")
				cred := confKey + "/" + date + "/" + region + "/s3/aws4_request"
				policy := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf(`{"expiration":%q,"conditions":[`+
					`{"bucket":%q},["starts-with","$key","up/"],{"x-amz-algorithm":"AWS4-HMAC-SHA256"},`+
					`{"x-amz-credential":%q},{"x-amz-date":%q},["content-length-range",0,1024]]}`,
					at.Add(time.Hour).Format("2006-01-02T15:04:05.000Z"), c.bucket, cred, at.Format("20060102T150405Z"))))
				mac := func(k []byte, s string) []byte {
					h := hmac.New(sha256.New, k)
					h.Write([]byte(s))
					return h.Sum(nil)
				}
				sk := mac(mac(mac(mac([]byte("AWS4"+confSecret), date), region), "s3"), "aws4_request")
				sig := hex.EncodeToString(mac(sk, policy))
				if tamper {
					sig = strings.Repeat("0", 64)
				}
				fields := [][2]string{{"key", key}, {"X-Amz-Algorithm", "AWS4-HMAC-SHA256"}, {"X-Amz-Credential", cred},
					{"X-Amz-Date", at.Format("20060102T150405Z")}, {"Policy", policy}, {"X-Amz-Signature", sig}}
				for k, v := range extra {
					fields = append(fields, [2]string{k, v})
				}
				const boundary = "tollgateconformanceboundary"
				var body bytes.Buffer
				for _, f := range fields {
					fmt.Fprintf(&body, "--%s\r\nContent-Disposition: form-data; name=%q\r\n\r\n%s\r\n", boundary, f[0], f[1])
				}
				fmt.Fprintf(&body, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.txt\"\r\n"+
					"Content-Type: text/plain\r\n\r\n%s\r\n--%s--\r\n", boundary, obj, boundary)
				c.do(req{label: label, method: "POST", path: "/" + c.bucket, body: body.Bytes(), anonymous: true,
					header: map[string]string{"Content-Type": "multipart/form-data; boundary=" + boundary}})
			}
			form("form upload", "up/one", false, nil)
			c.do(req{label: "get the form upload", method: "GET", path: "/" + c.bucket + "/up/one"})
			form("form upload with a field the policy lacks", "up/two", false, map[string]string{"success_action_status": "201"})
			form("form upload outside the policy", "elsewhere", false, nil)
			form("form upload with a wrong signature", "up/three", true, nil)
		}},
		{"virtual-hosted", func(c *cc) {
			vh := map[string]string{"Host": c.bucket + ".s3.localhost:{port}"}
			c.do(req{label: "PUT virtual-hosted", method: "PUT", path: "/vk", body: obj, header: vh})
			c.do(req{label: "GET virtual-hosted", method: "GET", path: "/vk", header: vh})
			c.do(req{label: "GET path-style of the same", method: "GET", path: "/" + c.bucket + "/vk"})
			c.do(req{label: "list virtual-hosted", method: "GET", path: "/", query: "list-type=2", header: vh})
			c.do(req{label: "dotted bucket name", method: "PUT", path: "/" + c.bucket + ".dotted.name"})
			c.do(req{label: "PUT into the dotted bucket", method: "PUT", path: "/" + c.bucket + ".dotted.name/k", body: obj})
			c.do(req{label: "delete the dotted bucket's object", method: "DELETE", path: "/" + c.bucket + ".dotted.name/k"})
			c.do(req{label: "delete the dotted bucket", method: "DELETE", path: "/" + c.bucket + ".dotted.name"})
		}},
		{"anonymous", func(c *cc) {
			b := "/" + c.bucket
			c.do(req{label: "put", method: "PUT", path: b + "/k", body: obj})
			c.do(req{label: "anonymous GET of a private object", method: "GET", path: b + "/k", anonymous: true})
			c.do(req{label: "anonymous HEAD of a private object", method: "HEAD", path: b + "/k", anonymous: true})
			c.do(req{label: "anonymous PUT", method: "PUT", path: b + "/k2", anonymous: true, body: obj})
			c.do(req{label: "anonymous list", method: "GET", path: b, anonymous: true})
			// no bucket, so no owner: the gateway refuses it itself (S3's answer: 403 AccessDenied)
			c.do(req{label: "anonymous ListBuckets", method: "GET", path: "/", anonymous: true, codeOnly: true})
			// a key the gateway does not know: refused by the gateway (S3: 403 InvalidAccessKeyId)
			hr := c.build(req{method: "GET", path: b + "/k"})
			hr.Header.Set("X-Amz-Content-Sha256", sha256hex(nil))
			if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "AKIANOBODY0000000000",
				SecretAccessKey: "nobody-secret"}, hr, sha256hex(nil), "s3", region, time.Now().UTC()); err != nil {
				c.t.Fatal(err)
			}
			c.send("unknown key", hr)
			c.log[len(c.log)-1].codeOnly = true
		}},
	}
}

// confKnownDifferences are the requests (case/label) whose answers the gateway still changes,
// each with the gateway behaviour that changes it. The list is exact: a listed request that no
// longer differs fails the suite too, so that the entry goes with the fix.
var confKnownDifferences = map[string]string{}

// confRacyDifferences are the known differences that depend on a race: they may or may not
// differ in a run.
var confRacyDifferences = map[string]bool{}

// confS3Answer is the answer S3 (AWS) gives to a request: its status and error code.
type confS3Answer struct {
	status int
	code   string
	why    string
}

// confBackendDeviations are the requests the gateway answers itself, before it charges them, where
// the backend behind it answers otherwise than S3 does: through the gateway the answer must be
// S3's, and the backend's must still differ (an entry goes once the backend answers as S3 does).
var confBackendDeviations = map[string]confS3Answer{
	// the gateway counts a DeleteObjects body's keys before it charges the request and refuses a
	// body that is not well-formed with S3's MalformedXML (docs/s3.md, "Reading bodies");
	// versitygw answers a body it cannot unmarshal 400 InvalidRequest
	"delete-objects/malformed": {400, "MalformedXML", "versitygw answers InvalidRequest"},
}

// checkDeviations checks the requests of confBackendDeviations of a case (direct first, gateway
// second) and returns the labels it checked.
func checkDeviations(t *testing.T, name string, direct, gateway []exchange) map[string]bool {
	t.Helper()
	checked := map[string]bool{}
	for i := 0; i < len(direct) && i < len(gateway); i++ {
		want, ok := confBackendDeviations[name+"/"+direct[i].label]
		if !ok {
			continue
		}
		checked[direct[i].label] = true
		d, g := direct[i], gateway[i]
		if g.status != want.status || errorCode(g.body) != want.code || g.header["content-type"] != "application/xml" {
			t.Errorf("%s: through the gateway %d %q (%s), want S3's %d %s", d.label, g.status, errorCode(g.body),
				g.header["content-type"], want.status, want.code)
		}
		if d.status == want.status && errorCode(d.body) == want.code {
			t.Errorf("%s: the backend now answers as S3 does (%d %s): remove it from confBackendDeviations",
				d.label, d.status, want.code)
		} else {
			t.Logf("the backend deviates from S3 (%s): %d %s directly, %d %s through the gateway", want.why,
				d.status, errorCode(d.body), g.status, errorCode(g.body))
		}
	}
	for key := range confBackendDeviations {
		if strings.HasPrefix(key, name+"/") && !checked[strings.TrimPrefix(key, name+"/")] {
			t.Errorf("%s: no such request in the case", key)
		}
	}
	return checked
}

// confSide is a versitygw, the base URL the suite talks to, and how to make a bucket there.
type confSide struct {
	tg      *confTarget
	backend *harness.S3Backend
}

// The conformance run: each case against the backend directly and through the gateway.
func TestS3ConformanceThroughTheGatewayMatchesTheBackend(t *testing.T) {
	opts := harness.S3BackendOptions{Credentials: map[string]string{confKey: confSecret}, Versioning: true,
		Domain: "s3.localhost"}
	direct := harness.StartS3Backend(t, opts)
	behind := harness.StartS3Backend(t, opts)
	st := s3StackOn(t, nil, behind.Addr)
	st.addKey(t, confApp, confKey)
	sides := []confSide{
		{newConfTarget("direct", direct.URL), direct},
		{newConfTarget("gateway", st.g.URL), behind},
	}
	cases := confCases()
	// the cases' buckets: made on each backend directly (the gateway's bucket map charges their
	// anonymous requests, CORS preflights among them, to the suite's app)
	var version int64
	for i, cs := range cases {
		bucket := fmt.Sprintf("conf-%02d-%s", i, cs.name)
		for _, s := range sides {
			s.backend.CreateBucket(t, confKey, bucket, "")
		}
		var out struct {
			Data struct {
				Version int64 `json:"config_version"`
			} `json:"data"`
		}
		if code := st.api.do("PUT", "/api/v1/buckets/"+bucket, map[string]string{"app_id": confApp}, &out); code != 201 {
			t.Fatalf("map bucket %s: %d", bucket, code)
		}
		version = max(version, out.Data.Version)
	}
	st.waitVersion(t, version)
	// a source object the multipart case copies a part from
	for _, s := range sides {
		if _, err := s.backend.Client(t, confKey).PutObject(context.Background(), &s3.PutObjectInput{
			Bucket: aws.String(fmt.Sprintf("conf-%02d-multipart", caseIndex(cases, "multipart"))),
			Key:    aws.String("mp-src"), Body: strings.NewReader("copy me")}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	requests, differing := 0, 0
	for i, cs := range cases {
		bucket := fmt.Sprintf("conf-%02d-%s", i, cs.name)
		t.Run(cs.name, func(t *testing.T) {
			var logs [2][]exchange
			for j, s := range sides {
				c := &cc{t: t, tg: s.tg, bucket: bucket}
				cs.run(c)
				logs[j] = c.log
			}
			requests += len(logs[0]) + len(logs[1])
			if os.Getenv("TOLLGATE_CONFORMANCE_DUMP") != "" {
				for _, e := range logs[0] {
					t.Logf("%-50s %d %s", e.label, e.status, clip(strings.ReplaceAll(e.body, "\n", " ")))
				}
			}
			var unexpected []string
			seen := map[string]bool{}
			deviating := checkDeviations(t, cs.name, logs[0], logs[1])
			for _, d := range diffTranscripts(logs[0], logs[1]) {
				key := cs.name + "/" + d.label
				if deviating[d.label] {
					continue
				}
				if why, ok := confKnownDifferences[key]; ok {
					seen[key] = true
					t.Logf("known difference (%s): %s", why, d.text)
					continue
				}
				unexpected = append(unexpected, d.text)
			}
			if len(seen) > 0 {
				differing++
			}
			if len(unexpected) > 0 {
				differing++
				t.Errorf("%d of %d requests differ through the gateway:\n%s", len(unexpected), len(logs[0]),
					strings.Join(unexpected, "\n"))
			}
			for key := range confKnownDifferences {
				if strings.HasPrefix(key, cs.name+"/") && !seen[key] && !confRacyDifferences[key] {
					t.Errorf("%s no longer differs through the gateway: remove it from confKnownDifferences", key)
				}
			}
		})
	}
	t.Logf("%d cases, %d requests, %d cases differ (known differences included), %.1f s (shared machine)",
		len(cases), requests, differing,
		time.Since(start).Seconds())
}

func caseIndex(cases []confCase, name string) int {
	for i, c := range cases {
		if c.name == name {
			return i
		}
	}
	return -1
}

type confDiff struct{ label, text string }

// diffTranscripts lists the requests whose answers differ (direct first, gateway second).
func diffTranscripts(a, b []exchange) []confDiff {
	var out []confDiff
	if len(a) != len(b) {
		out = append(out, confDiff{"", fmt.Sprintf("  %d requests directly, %d through the gateway", len(a), len(b))})
	}
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		var d []string
		if x.status != y.status {
			d = append(d, fmt.Sprintf("status %d ≠ %d", x.status, y.status))
		}
		if x.codeOnly {
			xc, yc := errorCode(x.body), errorCode(y.body)
			if xc != yc || x.header["content-type"] != y.header["content-type"] {
				d = append(d, fmt.Sprintf("code %q (%s) ≠ %q (%s)", xc, x.header["content-type"], yc, y.header["content-type"]))
			}
			if len(d) > 0 {
				out = append(out, confDiff{x.label, fmt.Sprintf("  #%d %s: %s", i+1, x.label, strings.Join(d, "; "))})
			}
			continue
		}
		names := map[string]bool{}
		for k := range x.header {
			names[k] = true
		}
		for k := range y.header {
			names[k] = true
		}
		sorted := make([]string, 0, len(names))
		for k := range names {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			xv, xok := x.header[k]
			yv, yok := y.header[k]
			switch {
			case xok && !yok:
				d = append(d, fmt.Sprintf("%s: %q ≠ (absent)", k, xv))
			case !xok && yok:
				d = append(d, fmt.Sprintf("%s: (absent) ≠ %q", k, yv))
			case xv != yv:
				d = append(d, fmt.Sprintf("%s: %q ≠ %q", k, xv, yv))
			}
		}
		if x.body != y.body {
			d = append(d, fmt.Sprintf("body %q ≠ %q", clip(x.body), clip(y.body)))
		}
		if len(d) > 0 {
			out = append(out, confDiff{x.label, fmt.Sprintf("  #%d %s: %s", i+1, x.label, strings.Join(d, "; "))})
		}
	}
	return out
}

var confCode = regexp.MustCompile(`<Code>([^<]*)</Code>`)

func errorCode(body string) string {
	if m := confCode.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}
