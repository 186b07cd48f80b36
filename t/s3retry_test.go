package t

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"tollgate/t/harness"
)

// The retry settings of docs/s3-clients.md, under throttling: each client uploads the same
// workload (retryObjects objects of 64 KiB, 6 tokens each) to an app guaranteed retryRate
// tokens per second, through the gateway. Reported per client: attempts per object (admitted +
// refused requests over objects; 1 is no refusal at all: a client that sends more at once than
// the app's burst is refused more, whatever the hints say), refusals per refused object (how
// often an upload the gateway refused was refused in all: 1.00 is every retry admitted, the
// measure of when retries arrive; goal at most 1.2), refusals, uploads that failed hard (goal 0)
// and the time to finish.
const (
	retryObjects = 24
	retryRate    = 36 // tokens/s: 144 tokens of workload in about 4 s
)

const botoRetry = `
import sys, os, boto3
from botocore.config import Config
ep, key, secret, bucket, d = sys.argv[1:6]
c = boto3.client("s3", endpoint_url=ep, aws_access_key_id=key, aws_secret_access_key=secret, region_name="us-east-1",
                 config=Config(s3={"addressing_style": "path"}, retries={"mode": "adaptive", "max_attempts": 10}))
failed = 0
for name in sorted(os.listdir(d)):
    try:
        with open(os.path.join(d, name), "rb") as f:
            c.put_object(Bucket=bucket, Key=name, Body=f)
    except Exception as e:
        failed += 1
print(failed)
`

func TestS3ClientsRetryUnderThrottle(t *testing.T) {
	requireTools(t, "/usr/bin/aws", "/usr/bin/s3cmd", "/usr/bin/rclone", "/usr/bin/python3")
	st := s3Stack(t, nil)
	v := st.api.change("POST", "/api/v1/apps", map[string]any{"app_id": "throttled", "cluster_id": "default",
		"guaranteed_quota": retryRate, "burst_quota": retryRate, "priority": 1})
	st.waitVersion(t, v)
	clients := s3clients()
	keyOf := map[string]s3client{}
	for _, c := range clients {
		keyOf[c.name] = c
	}
	ctx := context.Background()
	// each client's own bucket, made and listed with its own key (a backend with accounts lets
	// only the owner write), by an SDK that retries throttled requests
	own := func(c s3client) *s3.Client {
		return s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(st.g.URL), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(c.key, c.secret, ""),
			Retryer: retry.NewAdaptiveMode(func(o *retry.AdaptiveModeOptions) {
				o.StandardOptions = append(o.StandardOptions, func(so *retry.StandardOptions) { so.MaxAttempts = 10 })
			})})
	}

	src := t.TempDir()
	for i := 0; i < retryObjects; i++ {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("obj-%02d", i)), make([]byte, 65536), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runs := []struct {
		client string
		run    func(t *testing.T, c s3client, bucket, dir string)
	}{
		{"awscli", func(t *testing.T, c s3client, bucket, dir string) {
			cfg := filepath.Join(dir, "aws-config")
			_ = os.WriteFile(cfg, []byte("[default]\nregion = us-east-1\nretry_mode = adaptive\nmax_attempts = 10\n"+
				"s3 =\n  addressing_style = path\n"), 0o600)
			cmd := exec.Command("/usr/bin/aws", "--endpoint-url", st.g.URL, "s3", "cp", "--recursive", "--no-progress",
				src, "s3://"+bucket+"/")
			cmd.Env = append(baseEnv(dir), "AWS_ACCESS_KEY_ID="+c.key, "AWS_SECRET_ACCESS_KEY="+c.secret,
				"AWS_CONFIG_FILE="+cfg, "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=")
			_ = cmd.Run()
		}},
		{"boto3", func(t *testing.T, c s3client, bucket, dir string) {
			_ = exec.Command("/usr/bin/python3", "-c", botoRetry, st.g.URL, c.key, c.secret, bucket, src).Run()
		}},
		{"aws-sdk-go-v2", func(t *testing.T, c s3client, bucket, dir string) {
			cl := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(st.g.URL), UsePathStyle: true,
				Credentials: credentials.NewStaticCredentialsProvider(c.key, c.secret, ""),
				Retryer: retry.NewAdaptiveMode(func(o *retry.AdaptiveModeOptions) {
					o.StandardOptions = append(o.StandardOptions, func(so *retry.StandardOptions) { so.MaxAttempts = 10 })
				})})
			for i := 0; i < retryObjects; i++ {
				name := fmt.Sprintf("obj-%02d", i)
				f, err := os.Open(filepath.Join(src, name))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(name), Body: f})
				f.Close()
			}
		}},
		{"rclone", func(t *testing.T, c s3client, bucket, dir string) {
			cmd := exec.Command("/usr/bin/rclone", "--retries", "3", "--low-level-retries", "20", "--tpslimit", "6",
				"copy", src, "t:"+bucket)
			cmd.Env = append(baseEnv(dir), "RCLONE_CONFIG_T_TYPE=s3", "RCLONE_CONFIG_T_PROVIDER=Other",
				"RCLONE_CONFIG_T_ACCESS_KEY_ID="+c.key, "RCLONE_CONFIG_T_SECRET_ACCESS_KEY="+c.secret,
				"RCLONE_CONFIG_T_ENDPOINT="+st.g.URL, "RCLONE_CONFIG_T_REGION="+region,
				"RCLONE_CONFIG_T_FORCE_PATH_STYLE=true", "RCLONE_CONFIG="+filepath.Join(dir, "rclone.conf"))
			_ = cmd.Run()
		}},
		{"s3cmd-v4", func(t *testing.T, c s3client, bucket, dir string) {
			host := strings.TrimPrefix(st.g.URL, "http://")
			cfg := filepath.Join(dir, "s3cfg")
			_ = os.WriteFile(cfg, []byte(fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\n"+
				"host_bucket = %s\nuse_https = False\nbucket_location = %s\nprogress_meter = False\nmax_retries = 10\n",
				c.key, c.secret, host, host, region)), 0o600)
			cmd := exec.Command("/usr/bin/s3cmd", "-c", cfg, "put", "--recursive", src+"/", "s3://"+bucket+"/")
			cmd.Env = baseEnv(dir)
			_ = cmd.Run()
		}},
	}
	var report []string
	for _, r := range runs {
		c := keyOf[r.client]
		st.addKey(t, "throttled", c.key)
		bucket := "retry-" + strings.ReplaceAll(r.client, ".", "-")
		lister := own(c)
		if _, err := lister.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(float64(time.Second) * 6 / retryRate * retryObjects / 4)) // the bucket refills
		refused0 := seriesSum(t, st.g, "ratelimit_rejected_total", `app_id="throttled"`)
		ops0, _ := opCounters(t, st.g)
		start := time.Now()
		r.run(t, c, bucket, t.TempDir())
		took := time.Since(start)
		var refused, admitted float64
		eventually(t, "the gateway's counters", func() bool {
			refused = seriesSum(t, st.g, "ratelimit_rejected_total", `app_id="throttled"`) - refused0
			ops, _ := opCounters(t, st.g)
			admitted = delta(ops, ops0)["PutObject"]
			return admitted > 0
		})
		out, err := lister.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatal(err)
		}
		failed := retryObjects - len(out.Contents)
		line := fmt.Sprintf("| %s | %.2f | %s | %.0f | %d | %.1f |", r.client, (admitted+refused)/retryObjects,
			perRefused(st.g, "/"+bucket+"/"), refused, failed, took.Seconds())
		report = append(report, line)
		if failed != 0 {
			t.Errorf("%s: %d of %d uploads failed hard", r.client, failed, retryObjects)
		}
	}
	report = append(report, hintFollower(t, st.g, keyOf["aws-sdk-go-v2"], "retry-aws-sdk-go-v2", src))
	t.Logf("%d objects of 64 KiB (6 tokens each) at %d tokens/s (shared machine):\n"+
		"| client | attempts per object | refusals per refused object | refusals | failed hard | seconds |\n"+
		"|---|---|---|---|---|---|\n%s",
		retryObjects, retryRate, strings.Join(report, "\n"))
}

// perRefused is how often an object the gateway refused was refused in all (its retries until it
// was admitted), from the gateway's access log of the requests under prefix: 1.00 when every
// retry of a refused upload was admitted ("-" without a refusal).
func perRefused(g *harness.Gateway, prefix string) string {
	refusals := map[string]int{}
	for _, line := range g.AccessLog() {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasPrefix(f[2], prefix) && (f[1] == "503" || f[1] == "429") {
			refusals[f[2]]++
		}
	}
	if len(refusals) == 0 {
		return "-"
	}
	n := 0
	for _, c := range refusals {
		n += c
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(len(refusals)))
}

// hintFollower uploads the workload again without an SDK's own retries (a client with no
// backoff of its own): on each refusal it checks the hint — x-amz-retry-after a whole number
// of milliseconds, at most the time the app's refill needs for its whole burst (1 s here, +10 %
// jitter and 11 ms), Retry-After its ceiling in seconds — then waits exactly the hint and tries
// the object again. The hint is the real deficit: a retry after it is admitted (at most one in
// ten refused again, the goal of 1.2 attempts per refusal), and a hint that is missing, zero or
// short fails here.
func hintFollower(t *testing.T, g *harness.Gateway, c s3client, bucket, src string) string {
	t.Helper()
	url := g.URL
	cl := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(url), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(c.key, c.secret, ""), Retryer: aws.NopRetryer{}})
	const burst, rate = retryRate, retryRate                       // the app's burst_quota and guarantee
	maxMS := int64(math.Ceil(1.1*1000*burst/rate)) + 11            // a whole burst's refill, with the jitter
	time.Sleep(time.Duration(float64(time.Second) * burst / rate)) // the bucket refills
	start := time.Now()
	var refusals, again, failed, badHints int
	body := make([]byte, 65536)
	for i := 0; i < retryObjects; i++ {
		name := fmt.Sprintf("hint-%02d", i)
		refusedBefore := false
		for attempt := 0; ; attempt++ {
			_, err := cl.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket),
				Key: aws.String(name), Body: bytes.NewReader(body)})
			if err == nil {
				break
			}
			var re *awshttp.ResponseError
			if !errors.As(err, &re) || (re.HTTPStatusCode() != 503 && re.HTTPStatusCode() != 429) || attempt == 10 {
				t.Errorf("hint follower: %s: %v", name, err)
				failed++
				break
			}
			refusals++
			if refusedBefore {
				again++
			}
			refusedBefore = true
			h := re.Response.Header
			ms, perr := strconv.ParseInt(h.Get("X-Amz-Retry-After"), 10, 64)
			ra := h.Get("Retry-After")
			if perr != nil || ms < 1 || ms > maxMS || ra != strconv.FormatInt((ms+999)/1000, 10) {
				badHints++
				if badHints == 1 {
					t.Errorf("hint follower: %s refused with x-amz-retry-after %q, Retry-After %q: want 1..%d ms (the "+
						"deficit at %d tokens/s) and its ceiling in seconds", name, h.Get("X-Amz-Retry-After"), ra,
						maxMS, retryRate)
				}
				ms = 1000 // the run goes on at the guarantee's pace
			}
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
	}
	took := time.Since(start)
	if refusals == 0 {
		t.Fatalf("hint follower: no refusal: the workload did not exceed %d tokens/s", retryRate)
	}
	if again*10 > refusals {
		t.Errorf("hint follower: %d of %d retries after the hinted wait were refused again: the hint is shorter than the deficit",
			again, refusals)
	}
	return fmt.Sprintf("| hint follower (Go, no SDK retries; waits the hint) | %.2f | %s | %d (%d after a hinted wait, %d bad hints) | %d | %.1f |",
		float64(retryObjects+refusals)/retryObjects, perRefused(g, "/"+bucket+"/hint-"), refusals, again, badHints,
		failed, took.Seconds())
}
