// S3 identity through the real gateway with real clients: a throttled client gets SlowDown,
// backs off as its SDK does and finishes; credentials win over a spoofed X-App-Id; requests
// with a forged signature are refused by the backend and refunded.
package t

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"
	mcred "github.com/minio/minio-go/v7/pkg/credentials"

	"tollgate/t/harness"
)

// seriesSum adds every series of /metrics whose name is `name` and whose labels contain all of
// `labels` (e.g. `app_id="demo-p1"`).
func seriesSum(t *testing.T, g *harness.Gateway, name string, labels ...string) float64 {
	t.Helper()
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	total := 0.0
	for _, line := range strings.Split(metricsText(t, g), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(m[1], l)
		}
		if ok {
			v, _ := strconv.ParseFloat(m[2], 64)
			total += v
		}
	}
	return total
}

const slowObjects = 12 // 1 KiB PUTs of 6 tokens: 72 tokens against a burst of 40 at 20/s

// Each client, throttled (its app refills 20 tokens/s, burst 40), gets SlowDown answers, retries
// with its SDK's backoff and finishes all its uploads; the SlowDowns it got are its retries.
func TestS3ThrottledClientsBackOffAndFinish(t *testing.T) {
	requireTools(t, clientTools...)
	st := s3Stack(t, nil)
	st.api.change("POST", "/api/v1/apps", map[string]any{"app_id": "s3-slow", "cluster_id": "default",
		"guaranteed_quota": 20, "burst_quota": 40, "priority": 2})
	for _, c := range s3clients() {
		st.addKey(t, "s3-slow", c.key)
	}
	dir := t.TempDir()
	for i := 0; i < slowObjects; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("o%02d", i)), bytes.Repeat([]byte{'x'}, 1024), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slow := `app_id="s3-slow"`
	report := map[string]float64{}
	for i, c := range s3clients() {
		if c.sigv2 {
			continue // versitygw accepts SigV4 only (TestS3SigV2ClientsThroughTheGateway covers SigV2)
		}
		bucket := fmt.Sprintf("slow-%d", i)
		// the bucket is made on the backend directly: only the uploads are throttled
		st.vgw.CreateBucket(t, c.key, bucket, "")
		t.Run(c.name, func(t *testing.T) {
			before := seriesSum(t, st.g, "ratelimit_requests_total", slow, `status="503"`)
			start := time.Now()
			e := s3env{endpoint: st.g.URL, key: c.key, secret: c.secret, bucket: bucket, dir: t.TempDir()}
			slowUploads(t, c.name, e, dir)
			var slowDowns float64
			eventually(t, "the gateway's counters to settle", func() bool {
				n := seriesSum(t, st.g, "ratelimit_requests_total", slow, `status="503"`) - before
				settled := n == slowDowns
				slowDowns = n
				return settled && n > 0
			})
			if n := st.backend.ObjectCount(bucket); n != slowObjects {
				t.Fatalf("%s stored %d of %d objects", c.name, n, slowObjects)
			}
			report[c.name] = slowDowns
			t.Logf("%s: %d uploads in %.1f s after %v SlowDown answers (its retries)", c.name, slowObjects,
				time.Since(start).Seconds(), slowDowns)
		})
	}
	t.Logf("SlowDown answers retried per client: %v", report)
}

func slowUploads(t *testing.T, client string, e s3env, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "o*"))
	switch client {
	case "awscli":
		cfg := filepath.Join(e.dir, "aws-config")
		_ = os.WriteFile(cfg, []byte("[default]\nregion = us-east-1\nretry_mode = standard\nmax_attempts = 10\n"+
			"s3 =\n  addressing_style = path\n"), 0o600)
		sh(t, append(baseEnv(e.dir), "AWS_ACCESS_KEY_ID="+e.key, "AWS_SECRET_ACCESS_KEY="+e.secret,
			"AWS_CONFIG_FILE="+cfg, "AWS_SHARED_CREDENTIALS_FILE=/dev/null"), "/usr/bin/aws",
			"--endpoint-url", e.endpoint, "s3", "cp", "--recursive", "--no-progress", dir, "s3://"+e.bucket+"/")
	case "s3cmd-v2", "s3cmd-v4":
		host := strings.TrimPrefix(e.endpoint, "http://")
		cfg := filepath.Join(e.dir, "s3cfg")
		_ = os.WriteFile(cfg, []byte(fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\n"+
			"host_bucket = %s\nuse_https = False\nsignature_v2 = %v\nbucket_location = us-east-1\nprogress_meter = False\n",
			e.key, e.secret, host, host, client == "s3cmd-v2")), 0o600)
		sh(t, baseEnv(e.dir), "/usr/bin/s3cmd", append([]string{"-c", cfg, "put"}, append(files, "s3://"+e.bucket+"/")...)...)
	case "rclone":
		sh(t, append(baseEnv(e.dir), "RCLONE_CONFIG_T_TYPE=s3", "RCLONE_CONFIG_T_PROVIDER=Other",
			"RCLONE_CONFIG_T_ACCESS_KEY_ID="+e.key, "RCLONE_CONFIG_T_SECRET_ACCESS_KEY="+e.secret,
			"RCLONE_CONFIG_T_ENDPOINT="+e.endpoint, "RCLONE_CONFIG_T_REGION=us-east-1",
			"RCLONE_CONFIG_T_FORCE_PATH_STYLE=true", "RCLONE_CONFIG="+filepath.Join(e.dir, "rclone.conf")),
			"/usr/bin/rclone", "--retries", "1", "--low-level-retries", "20", "copy", dir, "t:"+e.bucket)
	case "boto3":
		sh(t, baseEnv(e.dir), "/usr/bin/python3", "-c", `
import sys, os, boto3
from botocore.config import Config
endpoint, key, secret, bucket, d = sys.argv[1:6]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
    region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 10}))
for f in sorted(os.listdir(d)):
    s3.put_object(Bucket=bucket, Key=f, Body=open(os.path.join(d, f), "rb").read())
`, e.endpoint, e.key, e.secret, e.bucket, dir)
	case "aws-sdk-go-v2":
		c := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(e.endpoint), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(e.key, e.secret, ""),
			Retryer:     retry.AddWithMaxAttempts(retry.NewStandard(), 10)})
		attempts := 0
		for _, f := range files {
			data, _ := os.ReadFile(f)
			out, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(e.bucket),
				Key: aws.String(filepath.Base(f)), Body: bytes.NewReader(data)})
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := retry.GetAttemptResults(out.ResultMetadata); ok {
				attempts += len(r.Results)
			}
		}
		t.Logf("aws-sdk-go-v2: %d attempts for %d uploads", attempts, len(files))
	case "minio-go":
		c, err := minio.New(strings.TrimPrefix(e.endpoint, "http://"), &minio.Options{
			Creds: mcred.NewStaticV4(e.key, e.secret, ""), Region: region, BucketLookup: minio.BucketLookupPath})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, _ := os.ReadFile(f)
			if _, err := c.PutObject(context.Background(), e.bucket, filepath.Base(f), bytes.NewReader(data),
				int64(len(data)), minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	default:
		t.Fatalf("no slow workload for %s", client)
	}
}

// Credentials plus a spoofed X-App-Id: charged to the credentials' app, never to the header's.
func TestS3CredentialsWinOverASpoofedAppHeader(t *testing.T) {
	st := s3Stack(t, nil)
	st.addKey(t, "demo-p3", "AKIASPOOF00000000001")
	st.vgw.CreateBucket(t, "AKIASPOOF00000000001", "spoof", "")
	ctx := context.Background()
	c := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(st.g.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("AKIASPOOF00000000001", "spoof-secret-1", ""),
		APIOptions:  nil})
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("spoof"), Key: aws.String("k"),
		Body: strings.NewReader("data")}); err != nil {
		t.Fatal(err)
	}
	ps, err := s3.NewPresignClient(c).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("spoof"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	p0 := seriesSum(t, st.g, "ratelimit_requests_total", `app_id="demo-p0"`)
	p3 := seriesSum(t, st.g, "ratelimit_requests_total", `app_id="demo-p3"`)
	const n = 5
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("GET", ps.URL, nil)
		req.Header.Set("X-App-Id", "demo-p0") // not signed: any client can add it
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "data" {
			t.Fatalf("spoofed GET: %d %s", resp.StatusCode, body)
		}
	}
	eventually(t, "the GETs counted for demo-p3", func() bool {
		return seriesSum(t, st.g, "ratelimit_requests_total", `app_id="demo-p3"`)-p3 == n
	})
	if d := seriesSum(t, st.g, "ratelimit_requests_total", `app_id="demo-p0"`) - p0; d != 0 {
		t.Fatalf("%v requests charged to the spoofed demo-p0", d)
	}
}

// A key id the gateway knows, signed with the wrong secret: the backend answers 403
// SignatureDoesNotMatch, the gateway refunds the charge and counts the failure.
func TestS3ForgedSignaturesAreRefunded(t *testing.T) {
	st := s3Stack(t, nil)
	st.addKey(t, "demo-p2", "AKIASPOOF00000000001")
	ctx := context.Background()
	forged := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(st.g.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("AKIASPOOF00000000001", "not-the-secret", ""),
		Retryer:     aws.NopRetryer{}})
	ops0, cost0 := opCounters(t, st.g)
	fails0 := seriesSum(t, st.g, "ratelimit_auth_failures_total", `app_id="demo-p2"`)
	body := bytes.Repeat([]byte{'f'}, 200<<10) // 200 KiB: 4 bandwidth units charged up front
	const n = 6
	for i := 0; i < n; i++ {
		_, err := forged.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("forged"), Key: aws.String("k"),
			Body: bytes.NewReader(body)})
		if apiCode(err) != "SignatureDoesNotMatch" {
			t.Fatalf("forged put: %v", err)
		}
		_, err = forged.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("forged")})
		if apiCode(err) != "SignatureDoesNotMatch" {
			t.Fatalf("forged list: %v", err)
		}
	}
	var ops, cost map[string]float64
	eventually(t, "the refusals counted", func() bool {
		o, k := opCounters(t, st.g)
		ops, cost = delta(o, ops0), delta(k, cost0)
		return seriesSum(t, st.g, "ratelimit_auth_failures_total", `app_id="demo-p2"`)-fails0 == 2*n &&
			ops["PutObject"] == n && ops["ListObjectsV2"] == n
	}, func() { t.Logf("ops %v cost %v", ops, cost) })
	if cost["PutObject"] != 0 || cost["ListObjectsV2"] != 0 {
		t.Fatalf("forged requests cost %v, want everything refunded", cost)
	}
}

// The admin API's changes reach the gateway: a bucket mapped over the API charges anonymous
// requests to its app until it is unmapped; a key removed with its app is unknown to the
// gateway at once (403 InvalidAccessKeyId).
func TestS3AdminChangesReachTheGateway(t *testing.T) {
	st := s3Stack(t, nil)
	ctx := context.Background()
	st.api.change("POST", "/api/v1/apps", map[string]any{"app_id": "s3-owner", "cluster_id": "default",
		"guaranteed_quota": 100, "burst_quota": 1000, "priority": 2})
	st.addKey(t, "s3-owner", "AKIASPOOF00000000001")
	c := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(st.g.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("AKIASPOOF00000000001", "spoof-secret-1", ""),
		Retryer:     aws.NopRetryer{}})
	st.vgw.CreateBucket(t, "AKIASPOOF00000000001", "public-site", "public-read") // anonymous reads allowed
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("public-site"), Key: aws.String("index.html"),
		Body: strings.NewReader("<h1>hi</h1>")}); err != nil {
		t.Fatal(err)
	}
	anon := func() int {
		resp, err := http.Get(st.g.URL + "/public-site/index.html")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := anon(); code != 403 {
		t.Fatalf("anonymous GET of an unmapped bucket: %d, want 403 AccessDenied (missing_app_id)", code)
	}
	var out struct {
		Data struct {
			Version int64 `json:"config_version"`
		} `json:"data"`
	}
	if code := st.api.do("PUT", "/api/v1/buckets/public-site", map[string]string{"app_id": "s3-owner"}, &out); code != 201 {
		t.Fatalf("map bucket: %d", code)
	}
	st.waitVersion(t, out.Data.Version)
	owner := seriesSum(t, st.g, "ratelimit_requests_total", `app_id="s3-owner"`)
	for i := 0; i < 3; i++ {
		if code := anon(); code != 200 {
			t.Fatalf("anonymous GET of a mapped bucket: %d", code)
		}
	}
	eventually(t, "anonymous GETs charged to the bucket's owner", func() bool {
		return seriesSum(t, st.g, "ratelimit_requests_total", `app_id="s3-owner"`)-owner == 3
	})
	if code := st.api.do("DELETE", "/api/v1/buckets/public-site", nil, nil); code != 204 {
		t.Fatalf("unmap: %d", code)
	}
	eventually(t, "the unmapped bucket refused to anonymous requests", func() bool { return anon() == 403 })

	// the app goes, and its key with it
	var del struct {
		Data struct {
			Version int64 `json:"config_version"`
		} `json:"data"`
	}
	if code := st.api.do("DELETE", "/api/v1/apps/s3-owner", nil, &del); code != 200 {
		t.Fatalf("delete app: %d", code)
	}
	st.waitVersion(t, del.Data.Version)
	_, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if apiCode(err) != "InvalidAccessKeyId" {
		t.Fatalf("the removed app's key: %v", err)
	}
	if n := st.backend.Served(); n == 0 {
		t.Fatal("the backend served nothing")
	}
}
