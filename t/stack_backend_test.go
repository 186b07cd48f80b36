package t

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
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
	const key, secret = "AKIASTACKDEMO0000001", "stack-demo-secret-0000000000000000000001"
	st := newScriptStack(t, "", "TOLLGATE_ADMIN_PASSWORD="+adminPassword, "TOLLGATE_BACKEND=",
		"TOLLGATE_DEMO_CREDENTIALS="+key+":"+secret)
	run, gwAddr := st.run, st.gw
	// a backend the script does not know is refused, before anything starts
	if out, err := st.sh("up", "TOLLGATE_BACKEND=minio"); err == nil ||
		!strings.Contains(out, "TOLLGATE_BACKEND must be versitygw or demo") {
		t.Fatalf("stack.sh up with TOLLGATE_BACKEND=minio: %v\n%s", err, out)
	}
	if out := st.up(); !regexp.MustCompile(`storage backend http://\S+ +\(versitygw; root key in `).MatchString(out) {
		t.Fatalf("stack.sh up does not name versitygw as the backend:\n%s", out)
	}
	api := st.admin(adminPassword)
	ver := api.change("POST", "/api/v1/apps/demo-p1/access-keys", map[string]string{"access_key_id": key})
	gw := harness.Running(t, "http://"+gwAddr, "http://"+st.metrics)
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
