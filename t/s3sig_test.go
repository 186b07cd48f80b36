// Signature verification at the gateway: access keys given their secret over the admin API
// (sealed at rest with the secrets key file both the control plane and the gateway read). Real
// clients — awscli, boto3, s3cmd with SigV2, curl --aws-sigv4, minio-go's streaming uploads —
// pass; forgeries of every form (SigV4 header, presigned V4, the seed signature of a streaming
// upload, SigV2 header and presigned V2, a tampered URL, an expired URL, a skewed clock) get the
// gateway's 403 in S3's dialect without reaching the backend and without charging the app.
package t

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/minio/minio-go/v7"
	mcred "github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/redis/go-redis/v9"

	demo "tollgate/demo/s3"
	"tollgate/internal/keys"
	"tollgate/t/harness"
)

// sigStack is an S3 stack whose control plane and gateway share a secrets key file.
type sigStack struct {
	s3stack
	cp  *harness.ControlPlane
	rdb *redis.Client
	// backendRequests counts every request that reaches the backend
	backendRequests *atomic.Int64
}

func newSigStack(t *testing.T) sigStack {
	t.Helper()
	keyFile := harness.SecretsKeyFile(t)
	r, gwURL := gatewayRedis(t)
	cp := harness.StartControlPlane(t, r.URL(), map[string]string{"TOLLGATE_ADMIN_PASSWORD": adminPassword,
		"TOLLGATE_SEED_DEMO": "true", "TOLLGATE_SECRETS_KEY_FILE": keyFile})
	creds := map[string]string{}
	for _, c := range s3clients() {
		creds[c.key] = c.secret
	}
	backend := demo.New(demo.Options{Credentials: creds})
	st := sigStack{backendRequests: &atomic.Int64{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.backendRequests.Add(1) // every request the backend sees, refused or not
		backend.ServeHTTP(w, r)
	})}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	addr := l.Addr().String()
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: gwURL, Backend: addr, Workers: 1,
		Env: map[string]string{"TOLLGATE_CONFIG_POLL": "0.2", "TOLLGATE_SECRETS_KEY_FILE": keyFile}})
	opt, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	st.s3stack = s3stack{g: g, api: loginAdmin(t, cp), backend: backend}
	st.cp, st.rdb = cp, rdb
	return st
}

// addSigned gives app an access key with its secret and waits until the gateway has it.
func (st sigStack) addSigned(t *testing.T, app, key, secret string) {
	t.Helper()
	st.waitVersion(t, st.api.change("POST", "/api/v1/apps/"+app+"/access-keys",
		map[string]string{"access_key_id": key, "secret_access_key": secret}))
}

// sigRequest sends req with the Go SDK's SigV4 signer (secret, signing time) and returns the
// answer's status, S3 code and X-Tollgate-Reason.
func sigRequest(t *testing.T, req *http.Request, key, secret string, at time.Time, payload string) (int, string, string) {
	t.Helper()
	if payload == "" {
		payload = "UNSIGNED-PAYLOAD"
	}
	req.Header.Set("X-Amz-Content-Sha256", payload)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: key, SecretAccessKey: secret},
		req, payload, "s3", region, at); err != nil {
		t.Fatal(err)
	}
	return send(t, req)
}

func send(t *testing.T, req *http.Request) (int, string, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	code := ""
	if i := bytes.Index(body, []byte("<Code>")); i >= 0 {
		rest := body[i+6:]
		code = string(rest[:bytes.IndexByte(rest, '<')])
	}
	return resp.StatusCode, code, resp.Header.Get("X-Tollgate-Reason")
}

// presignV4 is a presigned GET URL signed with secret at time at.
func presignSigV4(t *testing.T, endpoint, path, key, secret string, at time.Time, expires int) string {
	t.Helper()
	req, _ := http.NewRequest("GET", endpoint+path+"?X-Amz-Expires="+strconv.Itoa(expires), nil)
	u, _, err := v4.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: key, SecretAccessKey: secret},
		req, "UNSIGNED-PAYLOAD", "s3", region, at)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// postForm sends a browser POST upload: the form fields, then the file.
func sigPostForm(t *testing.T, url string, fields map[string]string, data []byte) (int, string, string) {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for k, v := range fields {
		_ = w.WriteField(k, v)
	}
	fw, _ := w.CreateFormFile("file", "upload.bin")
	_, _ = fw.Write(data)
	_ = w.Close()
	req, _ := http.NewRequest("POST", url, &body)
	req.Header.Set("Content-Type", w.FormDataContentType())
	return send(t, req)
}

// signV2 is the SigV2 signature of a GET of path (path style, no Content-MD5/Type, date line).
func signV2(secret, method, date, resource string) string {
	m := hmac.New(sha1.New, []byte(secret))
	fmt.Fprintf(m, "%s\n\n\n%s\n%s", method, date, resource)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestS3SignaturesVerifiedAtTheGateway(t *testing.T) {
	requireTools(t, "/usr/bin/aws", "/usr/bin/s3cmd", "/usr/bin/python3", "/usr/bin/curl")
	st := newSigStack(t)
	clients := map[string]s3client{}
	for _, c := range s3clients() {
		clients[c.name] = c
		if c.name != "rclone" { // rclone's key: without a secret until the end
			st.addSigned(t, "demo-p2", c.key, c.secret)
		}
	}
	ep := st.g.URL
	dir := t.TempDir()
	small := bytes.Repeat([]byte("tollgate "), 20000) // 180 kB
	file := filepath.Join(dir, "small")
	if err := os.WriteFile(file, small, 0o644); err != nil {
		t.Fatal(err)
	}

	// 1. real clients with the right secrets pass (sh fails the test on any error)
	aw := clients["awscli"]
	cfg := filepath.Join(dir, "aws-config")
	_ = os.WriteFile(cfg, []byte("[default]\nregion = "+region+"\ns3 =\n  addressing_style = path\n"), 0o600)
	awsEnv := append(baseEnv(dir), "AWS_ACCESS_KEY_ID="+aw.key, "AWS_SECRET_ACCESS_KEY="+aw.secret,
		"AWS_CONFIG_FILE="+cfg, "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=", "AWS_MAX_ATTEMPTS=1")
	awsc := func(args ...string) string {
		return sh(t, awsEnv, "/usr/bin/aws", append([]string{"--endpoint-url", ep}, args...)...)
	}
	awsc("s3", "mb", "s3://sig-bucket")
	awsc("s3", "cp", "--no-progress", file, "s3://sig-bucket/a b+c!.txt") // a key URI-encoded once
	awsc("s3", "cp", "--no-progress", "s3://sig-bucket/a b+c!.txt", filepath.Join(dir, "back"))
	sameFile(t, filepath.Join(dir, "back"), small)
	awsc("s3api", "list-objects-v2", "--bucket", "sig-bucket", "--prefix", "a b", "--max-keys", "5")
	e := s3env{endpoint: ep, dir: dir}
	curlGet(t, e, strings.TrimSpace(awsc("s3", "presign", "s3://sig-bucket/a b+c!.txt")), filepath.Join(dir, "p1"), small, "")
	// curl's own SigV4 (curl 7.88 signs the empty body's hash without the header, which the
	// demo backend reads as UNSIGNED-PAYLOAD: the header makes both sides agree)
	sh(t, baseEnv(dir), "/usr/bin/curl", "-sS", "-f", "-o", filepath.Join(dir, "p2"), "-H",
		"x-amz-content-sha256: UNSIGNED-PAYLOAD", "--aws-sigv4",
		"aws:amz:"+region+":s3", "--user", aw.key+":"+aw.secret, ep+"/sig-bucket/a%20b%2Bc%21.txt")
	sameFile(t, filepath.Join(dir, "p2"), small)
	// boto3: SigV4 header and presigned, and SigV2 presigned (signature_version "s3")
	bo := clients["boto3"]
	out := sh(t, baseEnv(dir), "/usr/bin/python3", "-c", `
import sys, json, boto3
from botocore.config import Config
ep, key, secret, path = sys.argv[1:5]
for sv in ("s3v4", "s3"):
    s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1", config=Config(signature_version=sv, s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    s3.put_object(Bucket="sig-bucket", Key="boto-" + sv, Body=open(path, "rb").read())
    assert s3.get_object(Bucket="sig-bucket", Key="boto-" + sv, Range="bytes=0-8")["Body"].read() == b"tollgate "
    print(s3.generate_presigned_url("get_object", Params={"Bucket": "sig-bucket", "Key": "boto-" + sv}, ExpiresIn=600))
    print("POST " + json.dumps(s3.generate_presigned_post("sig-bucket", "posted-" + sv, ExpiresIn=600)["fields"]))
`, ep, bo.key, bo.secret, file)
	var urls []string
	var posts []map[string]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if js, ok := strings.CutPrefix(line, "POST "); ok {
			var f map[string]string
			if err := json.Unmarshal([]byte(js), &f); err != nil {
				t.Fatalf("boto3 presigned post: %v", err)
			}
			posts = append(posts, f)
		} else {
			urls = append(urls, line)
		}
	}
	if len(urls) != 2 || !strings.Contains(urls[0], "X-Amz-Signature=") || !strings.Contains(urls[1], "Signature=") ||
		strings.Contains(urls[1], "X-Amz-Signature") {
		t.Fatalf("boto3 presigned URLs: %q", urls)
	}
	for i, u := range urls {
		curlGet(t, e, u, filepath.Join(dir, "b"+strconv.Itoa(i)), small, "")
	}
	// browser POST uploads (V4 and V2 policies) pass the gateway's check; the demo backend does
	// not implement them, so only the gateway's verdict is looked at
	if len(posts) != 2 {
		t.Fatalf("boto3 presigned posts: %v", posts)
	}
	for _, f := range posts {
		if _, _, r := sigPostForm(t, ep+"/sig-bucket", f, small); r != "" {
			t.Errorf("a genuine POST upload (%v) refused by the gateway: %s", f, r)
		}
	}
	// s3cmd with SigV2 (header) and its V2 presigned URL
	sc := clients["s3cmd-v2"]
	host := strings.TrimPrefix(ep, "http://")
	s3cfg := filepath.Join(dir, "s3cfg")
	_ = os.WriteFile(s3cfg, []byte(fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\n"+
		"host_bucket = %s\nuse_https = False\nsignature_v2 = True\nprogress_meter = False\nmax_retries = 1\n", sc.key, sc.secret, host, host)), 0o600)
	sh(t, baseEnv(dir), "/usr/bin/s3cmd", "-c", s3cfg, "put", file, "s3://sig-bucket/v2 key")
	sh(t, baseEnv(dir), "/usr/bin/s3cmd", "-c", s3cfg, "get", "--force", "s3://sig-bucket/v2 key", filepath.Join(dir, "v2"))
	sameFile(t, filepath.Join(dir, "v2"), small)
	sh(t, baseEnv(dir), "/usr/bin/s3cmd", "-c", s3cfg, "ls", "s3://sig-bucket")
	curlGet(t, e, strings.TrimSpace(sh(t, baseEnv(dir), "/usr/bin/s3cmd", "-c", s3cfg, "signurl", "s3://sig-bucket/v2 key", "+600")),
		filepath.Join(dir, "v2p"), small, "")
	// minio-go over plain HTTP: streaming uploads (STREAMING-AWS4-HMAC-SHA256-PAYLOAD), seed verified
	mi := clients["minio-go"]
	mc, err := minio.New(host, &minio.Options{Creds: mcred.NewStaticV4(mi.key, mi.secret, ""), Region: region,
		BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := mc.PutObject(ctx, "sig-bucket", "streamed", bytes.NewReader(small), int64(len(small)),
		minio.PutObjectOptions{}); err != nil {
		t.Fatalf("minio-go streaming upload: %v", err)
	}

	// 2. forgeries: refused by the gateway, never seen by the backend, never charged
	served0 := st.backendRequests.Load()
	_, cost0 := opCounters(t, st.g)
	reqs0 := seriesSum(t, st.g, "ratelimit_requests_total", `app_id="demo-p2"`)
	forged := func(name string, wantStatus int, wantCode, wantReason string, status int, code, reason string) {
		t.Helper()
		if status != wantStatus || code != wantCode || reason != wantReason {
			t.Errorf("%s: %d %s (reason %q), want %d %s (%s)", name, status, code, reason, wantStatus, wantCode, wantReason)
		}
	}
	get := func(u string) *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }
	now := time.Now()
	s, c, r := sigRequest(t, get(ep+"/sig-bucket/streamed"), aw.key, "not-the-secret-at-all-000000000000000000", now, "")
	forged("V4 header, wrong secret", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	put, _ := http.NewRequest("PUT", ep+"/sig-bucket/forged", bytes.NewReader(small))
	s, c, r = sigRequest(t, put, aw.key, "not-the-secret-at-all-000000000000000000", now, "")
	forged("V4 header PUT, wrong secret", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	// a signature of the right secret over another request (the path changed after signing)
	good := get(ep + "/sig-bucket/streamed")
	good.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	_ = v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: aw.key, SecretAccessKey: aw.secret}, good,
		"UNSIGNED-PAYLOAD", "s3", region, now)
	good.URL.Path = "/sig-bucket/boto-s3v4"
	s, c, r = send(t, good)
	forged("V4 header, path changed", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	u := presignSigV4(t, ep, "/sig-bucket/streamed", aw.key, "not-the-secret-at-all-000000000000000000", now, 600)
	s, c, r = send(t, get(u))
	forged("V4 presigned, wrong secret", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	u = presignSigV4(t, ep, "/sig-bucket/streamed", aw.key, aw.secret, now, 600)
	s, c, r = send(t, get(strings.Replace(u, "/streamed?", "/boto-s3?", 1)))
	forged("V4 presigned, tampered path", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	u = presignSigV4(t, ep, "/sig-bucket/streamed", aw.key, aw.secret, now.Add(-2*time.Hour), 3600)
	s, c, r = send(t, get(u))
	forged("V4 presigned, expired", 403, "AccessDenied", "request_expired", s, c, r)
	s, c, r = sigRequest(t, get(ep+"/sig-bucket/streamed"), aw.key, aw.secret, now.Add(-20*time.Minute), "")
	forged("V4 header, clock 20 min behind", 403, "RequestTimeTooSkewed", "time_skewed", s, c, r)
	date := now.UTC().Format(http.TimeFormat)
	v2req := get(ep + "/sig-bucket/streamed")
	v2req.Header.Set("Date", date)
	v2req.Header.Set("Authorization", "AWS "+sc.key+":"+signV2("wrong-secret-0000000000", "GET", date, "/sig-bucket/streamed"))
	s, c, r = send(t, v2req)
	forged("V2 header, wrong secret", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	exp := strconv.FormatInt(now.Unix()+600, 10)
	s, c, r = send(t, get(ep+"/sig-bucket/streamed?AWSAccessKeyId="+sc.key+"&Expires="+exp+"&Signature="+
		url.QueryEscape(signV2("wrong-secret-0000000000", "GET", exp, "/sig-bucket/streamed"))))
	forged("V2 presigned, wrong secret", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	old := strconv.FormatInt(now.Unix()-60, 10)
	s, c, r = send(t, get(ep+"/sig-bucket/streamed?AWSAccessKeyId="+sc.key+"&Expires="+old+"&Signature="+
		url.QueryEscape(signV2(sc.secret, "GET", old, "/sig-bucket/streamed"))))
	forged("V2 presigned, expired", 403, "AccessDenied", "request_expired", s, c, r)
	for _, f := range posts {
		forgedForm := map[string]string{}
		for k, v := range f {
			forgedForm[k] = v
		}
		if _, ok := f["x-amz-signature"]; ok {
			forgedForm["x-amz-signature"] = strings.Repeat("0", 64)
		} else {
			forgedForm["signature"] = "AAAAAAAAAAAAAAAAAAAAAAAAAAA="
		}
		s, c, r = sigPostForm(t, ep+"/sig-bucket", forgedForm, small)
		forged("POST upload, forged policy signature", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	}
	mf, _ := minio.New(host, &minio.Options{Creds: mcred.NewStaticV4(mi.key, "not-the-secret-at-all-000000000000000000", ""),
		Region: region, BucketLookup: minio.BucketLookupPath})
	_, err = mf.PutObject(ctx, "sig-bucket", "forged", bytes.NewReader(small), int64(len(small)), minio.PutObjectOptions{})
	if minio.ToErrorResponse(err).Code != "SignatureDoesNotMatch" {
		t.Errorf("minio-go streaming upload with the wrong secret: %v, want SignatureDoesNotMatch", err)
	}
	if n := st.backendRequests.Load() - served0; n != 0 {
		t.Errorf("the backend served %d forged requests, want 0", n)
	}
	// one honest request after the forgeries: once it is counted, so would they be
	s, c, _ = sigRequest(t, get(ep+"/sig-bucket/streamed"), aw.key, aw.secret, time.Now(), "")
	if s != 200 {
		t.Fatalf("an honest GET after the forgeries: %d %s", s, c)
	}
	eventually(t, "the honest GET counted", func() bool {
		return seriesSum(t, st.g, "ratelimit_requests_total", `app_id="demo-p2"`)-reqs0 >= 1
	})
	if n := seriesSum(t, st.g, "ratelimit_requests_total", `app_id="demo-p2"`) - reqs0; n != 1 {
		t.Errorf("demo-p2 was charged %v requests for 1 honest one and the forgeries", n)
	}
	_, cost1 := opCounters(t, st.g)
	if d := delta(cost1, cost0); sumOf(d) != d["GetObject"] {
		t.Errorf("forgeries were charged: cost %v", d)
	}
	if n := st.backendRequests.Load() - served0; n != 1 {
		t.Errorf("the backend served %d requests, want the honest one", n)
	}

	// 3. a key without a secret keeps the default (the backend refuses its forgeries); once its
	// secret is set the gateway does, and after the secret is removed the backend again
	rc := clients["rclone"]
	st.waitVersion(t, st.api.change("POST", "/api/v1/apps/demo-p2/access-keys", map[string]string{"access_key_id": rc.key}))
	forgeRC := func() (int, string, string) {
		return sigRequest(t, get(ep+"/sig-bucket/streamed"), rc.key, "not-the-secret-at-all-000000000000000000", time.Now(), "")
	}
	s, c, r = forgeRC()
	forged("no secret on file: the backend's refusal", 403, "SignatureDoesNotMatch", "", s, c, r)
	st.waitVersion(t, st.api.change("PUT", "/api/v1/apps/demo-p2/access-keys/"+rc.key+"/secret",
		map[string]string{"secret_access_key": rc.secret}))
	s, c, r = forgeRC()
	forged("secret set afterwards: the gateway's refusal", 403, "SignatureDoesNotMatch", "signature_mismatch", s, c, r)
	if s, c, _ := sigRequest(t, get(ep+"/sig-bucket/streamed"), rc.key, rc.secret, time.Now(), ""); s != 200 {
		t.Errorf("the right secret after it was set: %d %s", s, c)
	}
	if code := st.api.do("DELETE", "/api/v1/apps/demo-p2/access-keys/"+rc.key+"/secret", nil, nil); code != 204 {
		t.Fatalf("delete secret: %d", code)
	}
	eventually(t, "the gateway to leave the key to the backend again", func() bool {
		_, _, r := forgeRC()
		return r == ""
	})
}

// Secrets are sealed at rest, answered as has_secret only, and never appear in the control
// plane's or the gateway's logs, the audit log or an export; a key's removal takes its secret;
// without a key file the control plane refuses to store one (409 secrets_key_not_configured).
func TestS3SecretsSealedAtRest(t *testing.T) {
	st := newSigStack(t)
	const key, secret = "AKIASEALED0000000001", "sealed-secret-0123456789abcdefghijKLMNOP"
	st.addSigned(t, "demo-p1", key, secret)
	ctx := context.Background()
	raw, err := st.rdb.HGet(ctx, keys.AccessKeySecrets(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(raw, "tgs1.") || strings.Contains(raw, secret) ||
		strings.Contains(raw, base64.StdEncoding.EncodeToString([]byte(secret))[:20]) {
		t.Fatalf("the stored value is not sealed: %q", raw)
	}
	var list struct {
		Data []struct {
			AccessKeyID string `json:"access_key_id"`
			HasSecret   bool   `json:"has_secret"`
		} `json:"data"`
	}
	st.api.do("GET", "/api/v1/apps/demo-p1/access-keys", nil, &list)
	found := false
	for _, k := range list.Data {
		found = found || (k.AccessKeyID == key && k.HasSecret)
	}
	if !found {
		t.Fatalf("the listing does not say has_secret: %+v", list)
	}
	var sink []byte
	for _, p := range []string{"/api/v1/apps/demo-p1/access-keys", "/api/v1/audit?limit=200",
		"/api/v1/config/export?secrets=true", "/api/v1/config/export"} {
		code, _, body := st.api.raw("GET", p, "", nil)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", p, code, body)
		}
		sink = append(sink, body...)
	}
	if !bytes.Contains(sink, []byte("app.access_key.secret_set")) {
		t.Fatal("the audit log has no app.access_key.secret_set entry")
	}
	// an export with secrets carries the sealed value, one without does not; importing the
	// export puts a removed secret back
	_, _, plain := st.api.raw("GET", "/api/v1/config/export", "", nil)
	_, _, doc := st.api.raw("GET", "/api/v1/config/export?secrets=true", "", nil)
	if bytes.Contains(plain, []byte("access_key_secrets")) || !bytes.Contains(doc, []byte("access_key_secrets")) ||
		!bytes.Contains(doc, []byte(raw)) {
		t.Fatalf("export: without secrets %d bytes (has secrets: %v); with secrets it lacks the sealed value",
			len(plain), bytes.Contains(plain, []byte("access_key_secrets")))
	}
	if code := st.api.do("DELETE", "/api/v1/apps/demo-p1/access-keys/"+key+"/secret", nil, nil); code != 204 {
		t.Fatalf("delete secret: %d", code)
	}
	if code, _, body := st.api.raw("POST", "/api/v1/config/import?apply=true", "application/json", doc); code != 200 {
		t.Fatalf("import: %d %s", code, body)
	}
	if back, _ := st.rdb.HGet(ctx, keys.AccessKeySecrets(), key).Result(); back != raw {
		t.Fatalf("the import did not put the sealed secret back: %q", back)
	}
	// the import is a full reload for the gateway: the secret is verified again
	eventually(t, "the gateway to verify the imported secret", func() bool {
		req, _ := http.NewRequest("GET", st.g.URL+"/sealed/x", nil)
		_, _, r := sigRequest(t, req, key, "not-the-secret-at-all-000000000000000000", time.Now(), "")
		return r == "signature_mismatch"
	})
	// a request signed with it, so that the gateway opened it
	req, _ := http.NewRequest("GET", st.g.URL+"/sealed/x", nil)
	if s, c, _ := sigRequest(t, req, key, secret, time.Now(), ""); s == 403 && c == "SignatureDoesNotMatch" {
		t.Fatalf("the gateway refused the right secret")
	}
	logs, _ := os.ReadFile(filepath.Join(st.g.Prefix, "logs", "error.log"))
	for what, text := range map[string][]byte{"API answers": sink, "control plane log": []byte(st.cp.Output()),
		"gateway log": logs} {
		if bytes.Contains(text, []byte(secret)) {
			t.Errorf("the secret appears in the %s", what)
		}
	}
	// without a key file: refused before anything is written
	r2, _ := gatewayRedis(t)
	cp2 := harness.StartControlPlane(t, r2.URL(), map[string]string{"TOLLGATE_ADMIN_PASSWORD": adminPassword,
		"TOLLGATE_SEED_DEMO": "true"})
	api2 := loginAdmin(t, cp2)
	var fail struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if code := api2.do("POST", "/api/v1/apps/demo-p1/access-keys", map[string]string{"access_key_id": key,
		"secret_access_key": secret}, &fail); code != 409 || fail.Error.Code != "secrets_key_not_configured" {
		t.Fatalf("a secret without a key file: %d %+v", code, fail)
	}
	var keysOf struct {
		Data []map[string]any `json:"data"`
	}
	api2.do("GET", "/api/v1/apps/demo-p1/access-keys", nil, &keysOf)
	if len(keysOf.Data) != 0 {
		t.Fatalf("the refused change added the key: %+v", keysOf.Data)
	}
	// removing the key takes its secret
	if code := st.api.do("DELETE", "/api/v1/apps/demo-p1/access-keys/"+key, nil, nil); code != 204 {
		t.Fatalf("remove key: %d", code)
	}
	if n, _ := st.rdb.HExists(ctx, keys.AccessKeySecrets(), key).Result(); n {
		t.Fatal("the removed key's secret is still stored")
	}
}
