package t

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `scripts/stack.sh up` (what `make up` runs) as root, with its run directory where nginx's
// workers (nobody) cannot reach it (under a 0700 directory, as a checkout in /root is), moves
// real objects: a 20 MiB multipart upload with aws-cli, a 100 MiB single PUT, and a slow ranged
// GET, all byte-exact.
func TestStackScriptMovesRealObjects(t *testing.T) {
	requireTools(t, "/usr/bin/aws", "/usr/bin/curl")
	if os.Geteuid() != 0 {
		t.Skip("runs the stack as root (the suites run as root)")
	}
	const key, secret = "AKIASTACKOBJECTS0001", "stack-objects-secret-0000000000000001"
	st := newScriptStack(t, filepath.Join(t.TempDir(), "run"), // t.TempDir() is 0700: out of nobody's reach
		"TOLLGATE_NODE_ID=gw-objects-test", "TOLLGATE_ADMIN_PASSWORD=",
		"TOLLGATE_DEMO_CREDENTIALS="+key+":"+secret, "TOLLGATE_DEMO_MAX_OBJECT_SIZE=134217728", "PATH=/usr/bin:/bin:/usr/sbin:/sbin")
	run, gwAddr := st.run, st.gw
	api := st.admin(st.shownAdminPassword(st.up()))
	api.change("POST", "/api/v1/apps/demo-p1/access-keys", map[string]string{"access_key_id": key})

	dir := t.TempDir()
	cfg := filepath.Join(dir, "aws-config")
	if err := os.WriteFile(cfg, []byte("[default]\nregion = us-east-1\nretry_mode = adaptive\nmax_attempts = 10\n"+
		"s3 =\n  addressing_style = path\n  multipart_threshold = 8MB\n  multipart_chunksize = 5MB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	awsEnv := append(baseEnv(dir), "AWS_ACCESS_KEY_ID="+key, "AWS_SECRET_ACCESS_KEY="+secret,
		"AWS_CONFIG_FILE="+cfg, "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=")
	aws := func(args ...string) string {
		return sh(t, awsEnv, "/usr/bin/aws", append([]string{"--endpoint-url", "http://" + gwAddr}, args...)...)
	}
	eventually(t, "the gateway knows the key", func() bool {
		cmd := exec.Command("/usr/bin/aws", "--endpoint-url", "http://"+gwAddr, "s3", "mb", "s3://objects")
		cmd.Env = awsEnv
		return cmd.Run() == nil
	})
	write := func(name string, size int) (string, []byte) {
		b := make([]byte, size)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p, b
	}
	// 20 MiB in 5 MiB parts (UploadPart bodies above nginx's 16 KiB in-memory body buffer)
	p20, d20 := write("20m", 20<<20)
	aws("s3", "cp", "--no-progress", p20, "s3://objects/multi")
	aws("s3", "cp", "--no-progress", "s3://objects/multi", filepath.Join(dir, "multi.back"))
	sameFile(t, filepath.Join(dir, "multi.back"), d20)
	// 100 MiB in one PUT (above the gateway's former 64 MiB cap)
	p100, d100 := write("100m", 100<<20)
	aws("s3api", "put-object", "--bucket", "objects", "--key", "single", "--body", p100)
	// a slow ranged GET: 6 MiB at 3 MiB/s (the response outruns the client: nothing may spill to disk)
	const from, to = 1 << 20, 7<<20 - 1
	ranged := filepath.Join(dir, "ranged")
	url := strings.TrimSpace(aws("s3", "presign", "s3://objects/single"))
	curl := exec.Command("/usr/bin/curl", "-sS", "-f", "--limit-rate", "3M", "-r", fmt.Sprintf("%d-%d", from, to),
		"-o", ranged, url)
	if out, err := curl.CombinedOutput(); err != nil {
		t.Fatalf("slow ranged GET: %v %s", err, out)
	}
	got, _ := os.ReadFile(ranged)
	if !bytes.Equal(got, d100[from:to+1]) {
		t.Fatalf("slow ranged GET: %d bytes, want the %d bytes of the range", len(got), to-from+1)
	}
	// a DeleteObjects body above nginx's 16 KiB in-memory buffer: the gateway reads it (to count
	// its keys) through a temporary file its workers must be able to write
	var objs []string
	for i := 0; i < 400; i++ {
		objs = append(objs, fmt.Sprintf(`{"Key":"a-rather-long-key-name-to-fill-the-body-%04d"}`, i))
	}
	del := filepath.Join(dir, "delete.json")
	if err := os.WriteFile(del, []byte(`{"Objects":[`+strings.Join(objs, ",")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	aws("s3api", "delete-objects", "--bucket", "objects", "--delete", "file://"+del)
	el, _ := os.ReadFile(filepath.Join(run, "gateway", "logs", "error.log"))
	if strings.Contains(string(el), "Permission denied") || strings.Contains(string(el), "[crit]") {
		t.Fatalf("gateway error.log:\n%s", tailBytes(string(el), 3000))
	}
}
