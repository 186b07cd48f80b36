package t

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"tollgate/t/harness"
)

// `scripts/stack.sh up` (what `make run` runs) with its default storage backend, versitygw:
// a key of TOLLGATE_DEMO_CREDENTIALS works through the gateway once mapped to an app (the
// backend verifies its signature: a wrong secret is SignatureDoesNotMatch), the objects are
// files under the run directory, the README's unsigned X-App-Id requests reach the public demo
// bucket, and the generated root key is in 0600 files, never on a command line.
func TestStackScriptRunsVersityGW(t *testing.T) {
	bin := harness.BinDir(t)
	run := filepath.Join(t.TempDir(), "run")
	addr := func() string { return "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)) }
	gwAddr, metricsAddr, cpAddr := addr(), addr(), addr()
	const key, secret = "AKIASTACKDEMO0000001", "stack-demo-secret-0000000000000000000001"
	env := append(os.Environ(),
		"TOLLGATE_GATEWAY_ADDR="+gwAddr, "TOLLGATE_METRICS_ADDR="+metricsAddr,
		"TOLLGATE_CP_ADDR="+cpAddr, "TOLLGATE_REDIS_ADDR="+addr(),
		"TOLLGATE_BACKEND_ADDR="+addr(), "TOLLGATE_PROMETHEUS_ADDR="+addr(),
		"TOLLGATE_RUN_DIR="+run, "TOLLGATE_BIN_DIR="+bin, "TOLLGATE_WORKERS=1",
		"TOLLGATE_ADMIN_PASSWORD="+adminPassword, "TOLLGATE_REDIS_URL=", "TOLLGATE_BACKEND=",
		"TOLLGATE_DEMO_CREDENTIALS="+key+":"+secret)
	script := filepath.Join(harness.RepoRoot(), "scripts", "stack.sh")
	stackSh := func(env []string, arg string) (string, error) {
		cmd := exec.Command(script, arg)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// a backend the script does not know is refused, before anything starts
	if out, err := stackSh(append(env, "TOLLGATE_BACKEND=minio"), "up"); err == nil ||
		!strings.Contains(out, "TOLLGATE_BACKEND must be versitygw or demo") {
		t.Fatalf("stack.sh up with TOLLGATE_BACKEND=minio: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = stackSh(env, "down") })
	if out, err := stackSh(env, "up"); err != nil {
		t.Fatalf("stack.sh up: %v\n%s\nlogs:\n%s", err, out, logsOf(run))
	} else if !regexp.MustCompile(`storage backend http://\S+ +\(versitygw; root key in `).MatchString(out) {
		t.Fatalf("stack.sh up does not name versitygw as the backend:\n%s", out)
	}

	api := &adminAPI{t: t, url: "http://" + cpAddr}
	var login struct {
		Data struct {
			AccessToken string `json:"access_token"`
		} `json:"data"`
	}
	if code := api.do("POST", "/api/v1/auth/login", map[string]string{"username": "admin", "password": adminPassword},
		&login); code != 200 {
		t.Fatalf("login: %d", code)
	}
	api.token = login.Data.AccessToken
	ver := api.change("POST", "/api/v1/apps/demo-p1/access-keys", map[string]string{"access_key_id": key})
	gw := harness.Running(t, "http://"+gwAddr, "http://"+metricsAddr)
	eventually(t, "the gateway at the key's config version", func() bool {
		var h health
		r := gw.Monitor("/health")
		return r.Status == 200 && json.Unmarshal(r.Body, &h) == nil && h.ConfigVersion >= ver
	})

	ctx := context.Background()
	client := func(sec string) *s3.Client {
		return s3.New(s3.Options{Region: region, BaseEndpoint: aws.String("http://" + gwAddr), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(key, sec, ""), Retryer: aws.NopRetryer{}})
	}
	c := client(secret)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("stack-bkt")}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("tollgate "), 1000)
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("stack-bkt"), Key: aws.String("dir/obj"),
		Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	o, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("stack-bkt"), Key: aws.String("dir/obj")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(o.Body)
	o.Body.Close()
	if !bytes.Equal(got, data) {
		t.Fatalf("GET through the stack: %d bytes differ from the %d put", len(got), len(data))
	}
	if onDisk, err := os.ReadFile(filepath.Join(run, "backend", "data", "stack-bkt", "dir", "obj")); err != nil ||
		!bytes.Equal(onDisk, data) {
		t.Fatalf("the object is not a file under the run directory: %v", err)
	}
	if _, err := client("not-the-secret").ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("stack-bkt")}); apiCode(err) != "SignatureDoesNotMatch" {
		t.Fatalf("a forged signature through the stack: %v, want SignatureDoesNotMatch from the backend", err)
	}
	// the README's unsigned requests, charged to the X-App-Id app, in the public demo bucket
	if r := gw.Do("PUT", "/bucket/readme", "demo-p1", strings.NewReader("hello"), nil); r.Status != 200 {
		t.Fatalf("unsigned PUT to the demo bucket: %d %s", r.Status, r.Body)
	}
	if r := gw.Do("GET", "/bucket/readme", "demo-p2", nil, nil); r.Status != 200 || string(r.Body) != "hello" {
		t.Fatalf("unsigned GET from the demo bucket: %d %s", r.Status, r.Body)
	}
	if r := gw.Do("GET", "/stack-bkt/dir/obj", "demo-p2", nil, nil); r.Status != 403 {
		t.Fatalf("unsigned GET from a private bucket: %d, want the backend's 403", r.Status)
	}

	// the root key: 0600 files, not on any command line of the stack
	rootSecret, err := os.ReadFile(filepath.Join(run, "backend", "root.secret-key"))
	if err != nil || len(bytes.TrimSpace(rootSecret)) < 32 {
		t.Fatalf("root secret: %v %q", err, rootSecret)
	}
	for _, f := range []string{"root.secret-key", "root.access-key", "iam/users.json"} {
		if st, err := os.Stat(filepath.Join(run, "backend", f)); err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v %v, want 0600", f, st.Mode().Perm(), err)
		}
	}
	pids, err := os.ReadFile(filepath.Join(run, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(pids)), "\n") {
		f := strings.Fields(line)
		argv, err := os.ReadFile("/proc/" + f[1] + "/cmdline")
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if bytes.Contains(argv, bytes.TrimSpace(rootSecret)) || bytes.Contains(argv, []byte(secret)) {
			t.Errorf("%s's command line holds a backend secret", f[0])
		}
	}
}
