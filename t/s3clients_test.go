// Real S3 clients through the real gateway: Debian's awscli, s3cmd (SigV2 and SigV4), rclone and
// python3-boto3, and the Go SDKs aws-sdk-go-v2 and minio-go, each identified only by its access
// key (mapped to an app over the admin API), against a real S3 server (versitygw with its posix
// backend, t/harness/backend.go); s3cmd's SigV2, which versitygw (like S3's newer regions) does
// not accept, against the demo backend (gofakes3 with signature checks). Each makes a bucket,
// lists, uploads 20 MiB in parts, downloads it whole and ranged (byte-exact), copies it,
// batch-deletes and fetches a presigned URL with curl; the gateway's per-operation counters must
// show the operation table's cost for every operation it saw.
package t

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/minio/minio-go/v7"
	mcred "github.com/minio/minio-go/v7/pkg/credentials"

	demo "tollgate/demo/s3"
	"tollgate/t/harness"
)

const (
	bigSize   = 20 << 20 // the uploaded object: a multiple of 64 KiB, in 5 MiB parts
	partSize  = 5 << 20
	rangeFrom = 65536 // the ranged GET: exactly one 64 KiB bandwidth unit
	rangeTo   = 131071
	region    = "us-east-1"
)

// s3client is one client under test: its access key and how it runs the scenario.
type s3client struct {
	name, key, secret string
	run               func(t *testing.T, e s3env)
	sigv2             bool // signs with SigV2: only the demo backend accepts it
}

// s3env is what a scenario works with.
type s3env struct {
	endpoint string // http://127.0.0.1:port
	key      string
	secret   string
	bucket   string
	big      string // path of the 20 MiB file
	dir      string // scratch directory
	data     []byte // the file's bytes
	sigv2    bool   // the backend accepts SigV2 (presigned URLs of s3cmd signurl)
}

// bandwidth units (64 KiB) every scenario moves: the upload in parts, the whole download, the
// ranged one and the presigned one.
const (
	uploadUnits   = bigSize / 65536
	downloadUnits = 2*bigSize/65536 + 1
)

func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%s is missing (scripts/install-deps.sh installs it): %v", tool, err)
		}
	}
}

// sh runs a command with env and fails the test with its output when it fails.
func sh(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s\n%s", filepath.Base(name), strings.Join(args, " "), err, tailBytes(out.String(), 1500),
			tailBytes(errOut.String(), 3000))
	}
	return out.String()
}

func tailBytes(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// baseEnv is a clean environment for the command-line clients: no AWS settings of the machine.
func baseEnv(dir string) []string {
	env := []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	return env
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d uploaded", filepath.Base(path), len(got), len(want))
	}
}

// curlGet fetches a presigned URL with curl (optionally a range) and compares the bytes.
func curlGet(t *testing.T, e s3env, url, out string, want []byte, rng string) {
	t.Helper()
	args := []string{"-sS", "-f", "-o", out}
	if rng != "" {
		args = append(args, "-r", rng)
	}
	sh(t, baseEnv(e.dir), "/usr/bin/curl", append(args, url)...)
	sameFile(t, out, want)
}

func awsCLI(t *testing.T, e s3env) {
	cfg := filepath.Join(e.dir, "aws-config")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[default]\nregion = %s\nmax_attempts = 10\nretry_mode = standard\n"+
		"s3 =\n  addressing_style = path\n  multipart_threshold = 5MB\n  multipart_chunksize = 5MB\n", region)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(baseEnv(e.dir), "AWS_ACCESS_KEY_ID="+e.key, "AWS_SECRET_ACCESS_KEY="+e.secret,
		"AWS_CONFIG_FILE="+cfg, "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=")
	aws := func(args ...string) string {
		return sh(t, env, "/usr/bin/aws", append([]string{"--endpoint-url", e.endpoint}, args...)...)
	}
	api := aws
	b := "s3://" + e.bucket
	aws("s3", "mb", b)
	if !strings.Contains(aws("s3", "ls"), e.bucket) {
		t.Fatal("aws s3 ls does not list the bucket")
	}
	aws("s3", "cp", "--no-progress", e.big, b+"/big")
	aws("s3", "cp", "--no-progress", b+"/big", filepath.Join(e.dir, "whole"))
	sameFile(t, filepath.Join(e.dir, "whole"), e.data)
	api("s3api", "get-object", "--bucket", e.bucket, "--key", "big", "--range",
		fmt.Sprintf("bytes=%d-%d", rangeFrom, rangeTo), filepath.Join(e.dir, "ranged"))
	sameFile(t, filepath.Join(e.dir, "ranged"), e.data[rangeFrom:rangeTo+1])
	aws("s3", "cp", "--no-progress", b+"/big", b+"/copy")
	url := strings.TrimSpace(api("s3", "presign", b+"/copy"))
	curlGet(t, e, url, filepath.Join(e.dir, "presigned"), e.data, "")
	api("s3api", "delete-objects", "--bucket", e.bucket, "--delete", `{"Objects":[{"Key":"big"},{"Key":"copy"}]}`)
}

func s3cmdClient(v2 bool) func(t *testing.T, e s3env) {
	return func(t *testing.T, e s3env) {
		host := strings.TrimPrefix(e.endpoint, "http://")
		cfg := filepath.Join(e.dir, "s3cfg")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\n"+
			"host_bucket = %s\nuse_https = False\nsignature_v2 = %v\nbucket_location = %s\n"+
			"multipart_chunk_size_mb = 5\nprogress_meter = False\ncheck_ssl_certificate = False\n",
			e.key, e.secret, host, host, v2, region)), 0o600); err != nil {
			t.Fatal(err)
		}
		env := baseEnv(e.dir)
		s := func(args ...string) string {
			return sh(t, env, "/usr/bin/s3cmd", append([]string{"-c", cfg}, args...)...)
		}
		b := "s3://" + e.bucket
		s("mb", b)
		if !strings.Contains(s("ls"), e.bucket) {
			t.Fatal("s3cmd ls does not list the bucket")
		}
		s("put", e.big, b+"/big")
		s("ls", b)
		s("get", "--force", b+"/big", filepath.Join(e.dir, "whole"))
		sameFile(t, filepath.Join(e.dir, "whole"), e.data)
		s("cp", b+"/big", b+"/copy")
		var url string
		if e.sigv2 {
			url = strings.TrimSpace(s("signurl", b+"/copy", "+600"))
		} else {
			// s3cmd signurl signs with SigV2 only, which versitygw refuses: a SigV4 URL instead
			url = presignGet(t, e, "copy")
		}
		// s3cmd has no ranged get: the ranged download goes through its presigned URL
		curlGet(t, e, url, filepath.Join(e.dir, "ranged"), e.data[rangeFrom:rangeTo+1], fmt.Sprintf("%d-%d", rangeFrom, rangeTo))
		curlGet(t, e, url, filepath.Join(e.dir, "presigned"), e.data, "")
		s("del", "--recursive", "--force", b) // one DeleteObjects batch
	}
}

// presignGet is a SigV4 presigned GET URL of key (aws-sdk-go-v2's presigner) with e's key.
func presignGet(t *testing.T, e s3env, key string) string {
	t.Helper()
	c := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(e.endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(e.key, e.secret, "")})
	ps, err := s3.NewPresignClient(c).PresignGetObject(context.Background(), &s3.GetObjectInput{
		Bucket: aws.String(e.bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	return ps.URL
}

func rcloneClient(t *testing.T, e s3env) {
	env := append(baseEnv(e.dir), "RCLONE_CONFIG_T_TYPE=s3", "RCLONE_CONFIG_T_PROVIDER=Other",
		"RCLONE_CONFIG_T_ACCESS_KEY_ID="+e.key, "RCLONE_CONFIG_T_SECRET_ACCESS_KEY="+e.secret,
		"RCLONE_CONFIG_T_ENDPOINT="+e.endpoint, "RCLONE_CONFIG_T_REGION="+region,
		"RCLONE_CONFIG_T_FORCE_PATH_STYLE=true", "RCLONE_CONFIG="+filepath.Join(e.dir, "rclone.conf"))
	// (AWS_CA_BUNDLE is not in the environment: rclone refuses a bundle for a plain-HTTP endpoint)
	r := func(args ...string) string {
		return sh(t, env, "/usr/bin/rclone", append([]string{"--s3-chunk-size", "5M", "--s3-upload-cutoff", "5M",
			"--s3-copy-cutoff", "5M", "--retries", "1", "--low-level-retries", "10"}, args...)...)
	}
	b := "t:" + e.bucket
	r("mkdir", b)
	if !strings.Contains(r("lsd", "t:"), e.bucket) {
		t.Fatal("rclone lsd does not list the bucket")
	}
	r("copyto", e.big, b+"/big")
	r("ls", b)
	r("copyto", b+"/big", filepath.Join(e.dir, "whole"))
	sameFile(t, filepath.Join(e.dir, "whole"), e.data)
	got := r("cat", "--offset", strconv.Itoa(rangeFrom), "--count", strconv.Itoa(rangeTo-rangeFrom+1), b+"/big")
	if got != string(e.data[rangeFrom:rangeTo+1]) {
		t.Fatalf("rclone cat range: %d bytes differ", len(got))
	}
	r("copyto", b+"/big", b+"/copy")
	url := strings.TrimSpace(r("link", b+"/copy"))
	curlGet(t, e, url, filepath.Join(e.dir, "presigned"), e.data, "")
	r("delete", b)
}

const boto3Script = `
import sys, boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
mode, endpoint, key, secret, bucket, big, d, rfrom, rto = sys.argv[1:10]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
    region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
    retries={"mode": "standard", "max_attempts": 10}))
if mode == "delete":
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "big"}, {"Key": "copy"}]})
    sys.exit(0)
s3.create_bucket(Bucket=bucket)
assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
cfg = TransferConfig(multipart_threshold=5*1024*1024, multipart_chunksize=5*1024*1024, use_threads=False)
s3.upload_file(big, bucket, "big", Config=cfg)
assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["big"]
s3.download_file(bucket, "big", d + "/whole", Config=cfg)
part = s3.get_object(Bucket=bucket, Key="big", Range="bytes=%s-%s" % (rfrom, rto))["Body"].read()
open(d + "/ranged", "wb").write(part)
s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "big"})
print(s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "copy"}, ExpiresIn=600))
`

func boto3Client(t *testing.T, e s3env) {
	py := func(mode string) string {
		return sh(t, baseEnv(e.dir), "/usr/bin/python3", "-c", boto3Script, mode, e.endpoint, e.key, e.secret,
			e.bucket, e.big, e.dir, strconv.Itoa(rangeFrom), strconv.Itoa(rangeTo))
	}
	out := py("run")
	sameFile(t, filepath.Join(e.dir, "whole"), e.data)
	sameFile(t, filepath.Join(e.dir, "ranged"), e.data[rangeFrom:rangeTo+1])
	lines := strings.Split(strings.TrimSpace(out), "\n")
	curlGet(t, e, lines[len(lines)-1], filepath.Join(e.dir, "presigned"), e.data, "")
	py("delete")
}

func goSDKClient(t *testing.T, e s3env) {
	ctx := context.Background()
	c := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(e.endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(e.key, e.secret, "")})
	b := aws.String(e.bucket)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: b}))
	must(c.ListBuckets(ctx, &s3.ListBucketsInput{}))
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: b, Key: aws.String("big")})
	if err != nil {
		t.Fatal(err)
	}
	var parts []s3types.CompletedPart
	for i := 0; i*partSize < bigSize; i++ {
		n := int32(i + 1)
		p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: b, Key: aws.String("big"), UploadId: up.UploadId,
			PartNumber: &n, Body: bytes.NewReader(e.data[i*partSize : (i+1)*partSize])})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, s3types.CompletedPart{ETag: p.ETag, PartNumber: &n})
	}
	must(c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: b, Key: aws.String("big"),
		UploadId: up.UploadId, MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts}}))
	must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: b}))
	get := func(rng *string) []byte {
		o, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("big"), Range: rng})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Body.Close()
		data, _ := io.ReadAll(o.Body)
		return data
	}
	if !bytes.Equal(get(nil), e.data) {
		t.Fatal("aws-sdk-go-v2: whole download differs")
	}
	if !bytes.Equal(get(aws.String(fmt.Sprintf("bytes=%d-%d", rangeFrom, rangeTo))), e.data[rangeFrom:rangeTo+1]) {
		t.Fatal("aws-sdk-go-v2: ranged download differs")
	}
	must(c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: aws.String("copy"), CopySource: aws.String(e.bucket + "/big")}))
	// a part copy too (UploadPartCopy), then the upload is aborted
	pc, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: b, Key: aws.String("pc")})
	if err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	must(c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: b, Key: aws.String("pc"), UploadId: pc.UploadId,
		PartNumber: &one, CopySource: aws.String(e.bucket + "/big"), CopySourceRange: aws.String("bytes=0-5242879")}))
	must(c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: b, Key: aws.String("pc"), UploadId: pc.UploadId}))
	ps, err := s3.NewPresignClient(c).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("copy")})
	if err != nil {
		t.Fatal(err)
	}
	curlGet(t, e, ps.URL, filepath.Join(e.dir, "presigned"), e.data, "")
	must(c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: b, Delete: &s3types.Delete{
		Objects: []s3types.ObjectIdentifier{{Key: aws.String("big")}, {Key: aws.String("copy")}}}}))
}

func minioClient(t *testing.T, e s3env) {
	ctx := context.Background()
	c, err := minio.New(strings.TrimPrefix(e.endpoint, "http://"), &minio.Options{
		Creds: mcred.NewStaticV4(e.key, e.secret, ""), Region: region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MakeBucket(ctx, e.bucket, minio.MakeBucketOptions{Region: region}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListBuckets(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, e.bucket, "big", bytes.NewReader(e.data), bigSize,
		minio.PutObjectOptions{PartSize: partSize, NumThreads: 1}); err != nil {
		t.Fatal(err)
	}
	for o := range c.ListObjects(ctx, e.bucket, minio.ListObjectsOptions{}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
	}
	get := func(opt minio.GetObjectOptions) []byte {
		o, err := c.GetObject(ctx, e.bucket, "big", opt)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		data, err := io.ReadAll(o)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	if !bytes.Equal(get(minio.GetObjectOptions{}), e.data) {
		t.Fatal("minio-go: whole download differs")
	}
	var ro minio.GetObjectOptions
	_ = ro.SetRange(rangeFrom, rangeTo)
	if !bytes.Equal(get(ro), e.data[rangeFrom:rangeTo+1]) {
		t.Fatal("minio-go: ranged download differs")
	}
	if _, err := c.CopyObject(ctx, minio.CopyDestOptions{Bucket: e.bucket, Object: "copy"},
		minio.CopySrcOptions{Bucket: e.bucket, Object: "big"}); err != nil {
		t.Fatal(err)
	}
	u, err := c.PresignedGetObject(ctx, e.bucket, "copy", 10*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	curlGet(t, e, u.String(), filepath.Join(e.dir, "presigned"), e.data, "")
	objs := make(chan minio.ObjectInfo, 2)
	objs <- minio.ObjectInfo{Key: "big"}
	objs <- minio.ObjectInfo{Key: "copy"}
	close(objs)
	for r := range c.RemoveObjects(ctx, e.bucket, objs, minio.RemoveObjectsOptions{}) {
		t.Fatalf("minio-go remove %s: %v", r.ObjectName, r.Err)
	}
}

func s3clients() []s3client {
	return []s3client{
		{"awscli", "AKIAAWSCLI0000000001", "awscli-secret-0000000000000000000000001", awsCLI, false},
		{"s3cmd-v2", "s3cmd-v2-key", "s3cmd-v2-secret-000000000000000000000002", s3cmdClient(true), true},
		{"s3cmd-v4", "s3cmd-v4-key", "s3cmd-v4-secret-000000000000000000000003", s3cmdClient(false), false},
		{"rclone", "AKIARCLONE0000000004", "rclone-secret-0000000000000000000000004", rcloneClient, false},
		{"boto3", "AKIABOTO300000000005", "boto3-secret-00000000000000000000000005", boto3Client, false},
		{"aws-sdk-go-v2", "AKIAGOSDKV2000000006", "gosdk-secret-0000000000000000000000006", goSDKClient, false},
		{"minio-go", "minio.go~user_7", "minio-secret-000000000000000000000000007", minioClient, false},
	}
}

// the keys of the clients and of the identity tests
func backendCredentials(extra map[string]string) map[string]string {
	creds := map[string]string{"AKIASPOOF00000000001": "spoof-secret-1", "AKIASLOW000000000001": "slow-secret-1"}
	for _, c := range s3clients() {
		creds[c.key] = c.secret
	}
	for k, v := range extra {
		creds[k] = v
	}
	return creds
}

// s3backend starts versitygw with the clients' keys (and extra ones).
func s3backend(t *testing.T, extra map[string]string) *harness.S3Backend {
	t.Helper()
	return harness.StartS3Backend(t, harness.S3BackendOptions{Credentials: backendCredentials(extra),
		Domain: "s3.localhost"})
}

// demoBackend starts the demo backend (storage and admin listeners) with the clients' keys: for
// the clients that sign with SigV2 and for the failure switch.
func demoBackend(t *testing.T, extra map[string]string) (*demo.Server, string, string) {
	t.Helper()
	creds := backendCredentials(extra)
	srv := demo.New(demo.Options{Credentials: creds, Domains: []string{"s3.localhost"}})
	serve := func(h http.Handler) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(l) }()
		t.Cleanup(func() { _ = hs.Close() })
		return l.Addr().String()
	}
	return srv, serve(srv), serve(srv.Admin())
}

func bigFile(t *testing.T) (string, []byte) {
	t.Helper()
	data := make([]byte, bigSize)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

var clientTools = []string{"/usr/bin/aws", "/usr/bin/s3cmd", "/usr/bin/rclone", "/usr/bin/python3", "/usr/bin/curl"}

// The clients straight against the backend (SigV2 against the demo backend): the backend speaks
// what they send.
func TestS3ClientsAgainstTheBackend(t *testing.T) {
	requireTools(t, clientTools...)
	addr := s3backend(t, nil).Addr
	_, demoAddr, _ := demoBackend(t, nil)
	big, data := bigFile(t)
	for i, c := range s3clients() {
		if c.name == "awscli" {
			continue // ~3 s per command on a busy machine: it runs through the gateway only
		}
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			endpoint := "http://" + addr
			if c.sigv2 {
				endpoint = "http://" + demoAddr
			}
			c.run(t, s3env{endpoint: endpoint, sigv2: c.sigv2, key: c.key, secret: c.secret,
				bucket: fmt.Sprintf("direct-%d-%s", i, strings.ReplaceAll(c.name, ".", "-")), big: big, dir: t.TempDir(), data: data})
			t.Logf("%s: %.1f s", c.name, time.Since(start).Seconds())
		})
	}
}

// opCounters reads ratelimit_s3_operations_total and ratelimit_s3_cost_total by operation.
func opCounters(t *testing.T, g *harness.Gateway) (ops, cost map[string]float64) {
	t.Helper()
	resp, err := g.Client.Get(g.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ops, cost = map[string]float64{}, map[string]float64{}
	re := regexp.MustCompile(`^(ratelimit_s3_operations_total|ratelimit_s3_cost_total)\{operation="([A-Za-z0-9]+)"\} ([0-9.e+]+)$`)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[3], 64)
			if m[1] == "ratelimit_s3_operations_total" {
				ops[m[2]] = v
			} else {
				cost[m[2]] = v
			}
		}
	}
	return ops, cost
}

func sumOf(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

func delta(after, before map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// s3BaseCost is the operation table's default base cost (README "S3 operations").
var s3BaseCost = map[string]float64{
	"ListBuckets": 3, "ListObjects": 3, "ListObjectsV2": 3, "ListObjectVersions": 3, "ListMultipartUploads": 3,
	"ListParts": 3, "HeadBucket": 1, "HeadObject": 1, "GetObject": 1, "PutObject": 5, "CreateBucket": 5,
	"CopyObject": 6, "UploadPartCopy": 6, "UploadPart": 4, "CreateMultipartUpload": 2,
	"CompleteMultipartUpload": 8, "AbortMultipartUpload": 3, "DeleteObject": 2, "DeleteBucket": 2,
	"DeleteObjects": 2, "PostObject": 5, "GetBucketMetadata": 1, "GetObjectMetadata": 1,
	"PutBucketMetadata": 2, "PutObjectMetadata": 2, "DeleteBucketMetadata": 2, "DeleteObjectMetadata": 2,
}

// The clients through the gateway to versitygw, identified by their keys alone: every operation
// is counted and charged as the table says.
func TestS3ClientsThroughTheGateway(t *testing.T) {
	requireTools(t, clientTools...)
	clientsThrough(t, s3Stack(t, nil), false)
}

// The SigV2 clients through the gateway to the demo backend (versitygw accepts SigV4 only): the
// gateway reads SigV2 credentials as well.
func TestS3SigV2ClientsThroughTheGateway(t *testing.T) {
	requireTools(t, clientTools...)
	clientsThrough(t, demoStack(t, nil), true)
}

func clientsThrough(t *testing.T, st s3stack, sigv2 bool) {
	if _, err := st.g.Client.Get(st.g.MetricsURL + "/metrics"); err != nil {
		t.Fatal(err)
	}
	big, data := bigFile(t)
	for i, c := range s3clients() {
		if c.sigv2 != sigv2 {
			continue
		}
		st.addKey(t, "demo-p1", c.key)
		t.Run(c.name, func(t *testing.T) {
			ops0, cost0 := opCounters(t, st.g)
			served0 := st.backend.Served()
			start := time.Now()
			c.run(t, s3env{endpoint: st.g.URL, sigv2: sigv2, key: c.key, secret: c.secret,
				bucket: fmt.Sprintf("gw-%d-%s", i, strings.ReplaceAll(c.name, ".", "-")), big: big, dir: t.TempDir(), data: data})
			took := time.Since(start)
			served := float64(st.backend.Served() - served0)
			var ops, cost map[string]float64
			eventually(t, "the gateway counts every request the backend served", func() bool {
				o, k := opCounters(t, st.g)
				ops, cost = delta(o, ops0), delta(k, cost0)
				return sumOf(ops) == served
			}, func() { t.Logf("ops %v, backend served %v", ops, served) })
			checkCosts(t, c.name, ops, cost)
			t.Logf("%s: %.1f s, operations %v", c.name, took.Seconds(), ops)
		})
	}
}

// checkCosts: each operation's charge is count × base, plus for the transfers their 64 KiB
// bandwidth units (c_bw 1); DeleteObjects pays per key.
func checkCosts(t *testing.T, client string, ops, cost map[string]float64) {
	t.Helper()
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	var uploadOp string
	for _, op := range names {
		base, ok := s3BaseCost[op]
		if !ok {
			t.Errorf("%s: operation %s is not in the table", client, op)
			continue
		}
		want := ops[op] * base
		switch op {
		case "DeleteObjects":
			want = 2*base*ops[op] + ops[op] // every batch deletes two keys; its XML body is one unit
		case "CompleteMultipartUpload", "PutObjectMetadata", "PutBucketMetadata":
			want += ops[op] // a small XML body: one 64 KiB unit each
		case "GetObject":
			want += downloadUnits
		case "UploadPart", "PutObject":
			if ops[op] >= 4 { // the 20 MiB in parts (or, for a client that streams it, in one PUT)
				want += uploadUnits
				uploadOp = op
			}
		}
		if op == uploadOp && client == "minio-go" && cost[op] > want && cost[op] <= want+ops[op] {
			// minio-go signs parts over plain HTTP as aws-chunked streams: the gateway charges the
			// encoded Content-Length (the 5 MiB plus chunk signatures: one more unit per part),
			// not x-amz-decoded-content-length
			t.Logf("%s: %s charged %v for %v units of data (aws-chunked encoding)", client, op, cost[op], want)
			continue
		}
		if cost[op] != want {
			t.Errorf("%s: %s ×%v charged %v, want %v", client, op, ops[op], cost[op], want)
		}
	}
	if uploadOp == "" {
		t.Errorf("%s: no upload of 20 MiB in parts among %v", client, ops)
	}
}

// s3backendOf is what the suites read of a backend: the requests it served and its objects.
type s3backendOf interface {
	Served() int64
	ObjectCount(bucket string) int
}

type s3stack struct {
	g       *harness.Gateway
	api     *adminAPI
	backend s3backendOf
	vgw     *harness.S3Backend // the backend when it is versitygw (nil: the demo backend)
}

// s3Stack is a gateway (with the control plane) in front of versitygw.
func s3Stack(t *testing.T, env map[string]string) s3stack {
	t.Helper()
	b := s3backend(t, nil)
	st := s3StackOn(t, env, b.Addr)
	st.backend, st.vgw = b, b
	return st
}

// demoStack is a gateway in front of the demo backend.
func demoStack(t *testing.T, env map[string]string) s3stack {
	t.Helper()
	b, addr, _ := demoBackend(t, nil)
	st := s3StackOn(t, env, addr)
	st.backend = b
	return st
}

func s3StackOn(t *testing.T, env map[string]string, addr string) s3stack {
	t.Helper()
	r, gwURL := gatewayRedis(t) // the gateway as the gateways' ACL user: the S3 maps are readable
	cp := harness.StartControlPlane(t, r.URL(), map[string]string{"TOLLGATE_ADMIN_PASSWORD": adminPassword,
		"TOLLGATE_SEED_DEMO": "true"})
	genv := map[string]string{"TOLLGATE_S3_DOMAINS": "s3.localhost", "TOLLGATE_CONFIG_POLL": "0.2"}
	for k, v := range env {
		genv[k] = v
	}
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: gwURL, Backend: addr, Workers: 1, Env: genv})
	return s3stack{g: g, api: loginAdmin(t, cp)}
}

// addKey gives an app an access key over the admin API and waits until the gateway enforces
// the config version of that change (a key the gateway has not loaded yet is an unknown key).
func (st s3stack) addKey(t *testing.T, app, key string) {
	t.Helper()
	v := st.api.change("POST", "/api/v1/apps/"+app+"/access-keys", map[string]string{"access_key_id": key})
	st.waitVersion(t, v)
}

func (st s3stack) waitVersion(t *testing.T, v int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("the gateway at config version %d", v), func() bool {
		return seriesSum(t, st.g, "ratelimit_config_version") >= float64(v)
	})
}

func metricsText(t *testing.T, g *harness.Gateway) string {
	t.Helper()
	resp, err := g.Client.Get(g.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// apiCode is the S3 error code of an SDK error ("" when it is none).
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
