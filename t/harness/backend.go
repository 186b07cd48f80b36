package harness

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The storage backend of the integration tests and of `make run`: versitygw, a production S3
// server, with its posix backend (objects are files under a temporary directory), built by
// scripts/build-backend.sh into bin/ at the version pinned in tools/versitygw.

var (
	vgwBuild    sync.Once
	vgwBin      string
	vgwBuildErr error
)

// VersityGW returns the path of bin/versitygw, building it first when it is missing or stale
// (scripts/build-backend.sh; a few minutes the first time, nothing afterwards).
func VersityGW(t testing.TB) string {
	t.Helper()
	vgwBuild.Do(func() {
		cmd := exec.Command(filepath.Join(RepoRoot(), "scripts", "build-backend.sh"))
		cmd.Env = append(os.Environ(), "BIN_DIR="+filepath.Join(RepoRoot(), "bin"),
			"GO="+filepath.Join(runtime.GOROOT(), "bin", "go"))
		if out, err := cmd.CombinedOutput(); err != nil {
			vgwBuildErr = err
			vgwBin = string(out)
			return
		}
		vgwBin = filepath.Join(RepoRoot(), "bin", "versitygw")
	})
	if vgwBuildErr != nil {
		t.Fatalf("harness: build versitygw: %v\n%s", vgwBuildErr, vgwBin)
	}
	return vgwBin
}

// S3BackendOptions configures a versitygw instance.
type S3BackendOptions struct {
	// Credentials are the access keys (access key id -> secret) the backend accepts besides
	// its root account; each is an account of role "userplus" (may create buckets).
	Credentials map[string]string
	// Domain of virtual-hosted addressing (<bucket>.<domain>); versitygw takes one
	Domain string
	// Versioning lets buckets enable versioning (versitygw keeps old versions in a directory
	// of their own)
	Versioning bool
}

// S3Backend is a running versitygw.
type S3Backend struct {
	Addr       string // host:port
	URL        string // http://host:port
	Dir        string // the posix backend's root: one directory per bucket
	RootKey    string
	RootSecret string
	Region     string
	creds      map[string]string
	accessLog  string
	proc       *Process
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartS3Backend starts versitygw on a free loopback port with a fresh root account (random
// key pair), the accounts of o.Credentials, and waits until it answers.
func StartS3Backend(t testing.TB, o S3BackendOptions) *S3Backend {
	t.Helper()
	bin := VersityGW(t)
	base := t.TempDir()
	data, iam := filepath.Join(base, "data"), filepath.Join(base, "iam")
	for _, d := range []string{data, iam} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	b := &S3Backend{Dir: data, RootKey: "ROOT" + strings.ToUpper(randomHex(8)), RootSecret: randomHex(20),
		Region: "us-east-1", creds: map[string]string{}, accessLog: filepath.Join(base, "access.log")}
	if err := WriteVersityGWAccounts(filepath.Join(iam, "users.json"), o.Credentials); err != nil {
		t.Fatal(err)
	}
	for k, v := range o.Credentials {
		b.creds[k] = v
	}
	b.creds[b.RootKey] = b.RootSecret
	versions := filepath.Join(base, "versions")
	if o.Versioning {
		if err := os.MkdirAll(versions, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// a free port can be taken by someone else before versitygw binds it: then a new one
	for attempt := 1; ; attempt++ {
		b.Addr = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		b.URL = "http://" + b.Addr
		cmd := exec.Command(bin, "--quiet", "posix", data)
		// the keys travel in the environment, never on the command line
		cmd.Env = []string{"ROOT_ACCESS_KEY_ID=" + b.RootKey, "ROOT_SECRET_ACCESS_KEY=" + b.RootSecret,
			"VGW_PORT=" + b.Addr, "VGW_IAM_DIR=" + iam, "VGW_ACCESS_LOG=" + b.accessLog,
			"VGW_HEALTH=/_health", "VGW_REGION=" + b.Region, "PATH=/usr/bin:/bin"}
		if o.Domain != "" {
			cmd.Env = append(cmd.Env, "VGW_VIRTUAL_DOMAIN="+o.Domain)
		}
		if o.Versioning {
			cmd.Env = append(cmd.Env, "VGW_VERSIONING_DIR="+versions)
		}
		b.proc = StartProcess(t, "versitygw", cmd)
		if b.proc.waitHealthy(b.URL+"/_health", 60*time.Second) {
			return b
		}
		if attempt < 3 && b.proc.Exited() && strings.Contains(b.proc.Output(), "address already in use") {
			continue
		}
		t.Fatalf("harness: versitygw on %s not healthy:\n%s", b.Addr, tail(b.proc.Output(), 40))
	}
}

// waitHealthy polls url until it answers 200 (true), or the process exits or timeout passes.
func (p *Process) waitHealthy(url string, timeout time.Duration) bool {
	c := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for !p.Exited() && time.Now().Before(deadline) {
		if res, err := c.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// WriteVersityGWAccounts writes versitygw's internal IAM file (users.json of its --iam-dir)
// with one "userplus" account per access key (0600).
func WriteVersityGWAccounts(path string, creds map[string]string) error {
	type account struct {
		Access    string `json:"access"`
		Secret    string `json:"secret"`
		Role      string `json:"role"`
		UserID    int    `json:"userID"`
		GroupID   int    `json:"groupID"`
		ProjectID int    `json:"projectID"`
	}
	accts := map[string]account{}
	for k, v := range creds {
		accts[k] = account{Access: k, Secret: v, Role: "userplus"}
	}
	b, err := json.Marshal(map[string]any{"accessAccounts": accts})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Served is the number of S3 requests versitygw logged (its access log has one line a request).
func (b *S3Backend) Served() int64 {
	f, err := os.Open(b.accessLog)
	if err != nil {
		return 0
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "log starts") {
			n++
		}
	}
	return n
}

// ObjectCount is the number of objects in a bucket (-1 when it does not exist), read from the
// posix backend's directory (versitygw's own temporary and lock directories aside).
func (b *S3Backend) ObjectCount(bucket string) int {
	root := filepath.Join(b.Dir, bucket)
	if _, err := os.Stat(root); err != nil {
		return -1
	}
	n := 0
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".sgw") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// Client is an aws-sdk-go-v2 client of the backend itself (path style) signing with key, one
// of the backend's access keys (its root key when key is "").
func (b *S3Backend) Client(t testing.TB, key string) *s3.Client {
	t.Helper()
	if key == "" {
		key = b.RootKey
	}
	secret, ok := b.creds[key]
	if !ok {
		t.Fatalf("harness: the backend has no key %q", key)
	}
	return s3.New(s3.Options{Region: b.Region, BaseEndpoint: aws.String(b.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(key, secret, ""), Retryer: aws.NopRetryer{}})
}

// CreateBucket makes a bucket owned by key's account; acl is "" or a canned ACL
// ("public-read", "public-read-write": anonymous requests may then read, or write).
func (b *S3Backend) CreateBucket(t testing.TB, key, bucket, acl string) {
	t.Helper()
	in := &s3.CreateBucketInput{Bucket: aws.String(bucket)}
	if acl != "" {
		in.ACL = s3types.BucketCannedACL(acl)
		in.ObjectOwnership = s3types.ObjectOwnershipBucketOwnerPreferred
	}
	if _, err := b.Client(t, key).CreateBucket(context.Background(), in); err != nil {
		t.Fatalf("harness: create bucket %s: %v", bucket, err)
	}
}
