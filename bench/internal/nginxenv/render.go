package nginxenv

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

// ObjectPath is the object every request fetches; ObjectSize is its size in bytes.
const (
	ObjectPath = "/bucket/obj"
	// UploadPath is where the callgrind tool's -method PUT uploads go.
	UploadPath = "/upload/obj"
	ObjectSize = 1024
)

var leftover = regexp.MustCompile(`@[A-Z_]+@`)

// Layout is where and how one nginx runs.
type Layout struct {
	Prefix string // nginx prefix (-p), world-readable
	Repo   string // repository root (nginx/, lua/tollgate)
	Listen string // gateway address host:port
	// MetricsListen is the address of the gateway's /health and /metrics (tollgate variants)
	MetricsListen string
	Backend       string // storage backend address host:port
	// ExternalBackend: Backend is a server of the caller's, and the nginx gets no backend
	// server block of its own
	ExternalBackend bool
	Workers         int
	LogLevel        string
}

// Render writes the prefix of variant v (directories, the object, the backend server block and
// nginx.conf) and returns the path of nginx.conf. Tollgate variants render the repository's
// nginx/gateway.conf.tmpl exactly as scripts/render-gateway.sh does, with the backend server
// block as @EXTRA_HTTP@; the others render the benchmark's own templates.
func Render(v Variant, l Layout) (string, error) {
	if err := makePrefix(l); err != nil {
		return "", err
	}
	backendConf := filepath.Join(l.Prefix, "conf", "backend.conf")
	if l.ExternalBackend {
		if err := os.WriteFile(backendConf, []byte("# the backend is external\n"), 0o644); err != nil {
			return "", fmt.Errorf("nginxenv: %w", err)
		}
	} else if err := renderFile(embedded("backend.conf.tmpl"), backendConf, l, ""); err != nil {
		return "", err
	}
	tmpl := embedded(templateName(v.Kind))
	if v.Tollgate() {
		tmpl = fromFile(filepath.Join(l.Repo, "nginx", "gateway.conf.tmpl"))
		link := filepath.Join(l.Prefix, "lua", "tollgate")
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(l.Repo, "lua", "tollgate"), link); err != nil {
			return "", fmt.Errorf("nginxenv: link lua: %w", err)
		}
	}
	conf := filepath.Join(l.Prefix, "conf", "nginx.conf")
	if err := renderFile(tmpl, conf, l, "include "+backendConf+";"); err != nil {
		return "", err
	}
	return conf, nil
}

func templateName(k Kind) string {
	switch k {
	case LimitReq:
		return "limit_req.conf.tmpl"
	case EmptyLua:
		return "empty_lua.conf.tmpl"
	}
	return "plain.conf.tmpl"
}

type source func() ([]byte, error)

func embedded(name string) source {
	return func() ([]byte, error) { return templateFS.ReadFile("templates/" + name) }
}

func fromFile(path string) source {
	return func() ([]byte, error) { return os.ReadFile(path) }
}

func renderFile(src source, dst string, l Layout, extra string) error {
	tmpl, err := src()
	if err != nil {
		return fmt.Errorf("nginxenv: read template for %s: %w", dst, err)
	}
	out := strings.NewReplacer(
		"@TMP@", filepath.Join(l.Prefix, "tmp"), "@PREFIX@", l.Prefix, "@REPO@", l.Repo, "@LISTEN@", l.Listen, "@BACKEND@", l.Backend,
		"@WORKERS@", strconv.Itoa(l.Workers), "@LOG_LEVEL@", l.LogLevel, "@EXTRA_HTTP@", extra,
		"@ACCESS_LOG@", "access_log off;", "@METRICS_LISTEN@", l.MetricsListen,
		"@METRICS_ALLOW@", "allow 127.0.0.0/8; allow ::1; deny all;",
	).Replace(string(tmpl))
	if m := leftover.FindString(out); m != "" {
		return fmt.Errorf("nginxenv: %s: placeholder %s left after rendering", dst, m)
	}
	if err := os.WriteFile(dst, []byte(out), 0o644); err != nil {
		return fmt.Errorf("nginxenv: write %s: %w", dst, err)
	}
	return nil
}

// makePrefix creates the prefix's directories (0755: workers of a root master run as nobody)
// and the object the backend serves.
func makePrefix(l Layout) error {
	for _, d := range []string{"", "conf", "logs", "tmp", "lua", "www/bucket"} {
		dir := filepath.Join(l.Prefix, d)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("nginxenv: %w", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("nginxenv: %w", err)
		}
	}
	body := bytes.Repeat([]byte("tollgate-bench-0"), ObjectSize/16)
	obj := filepath.Join(l.Prefix, "www", filepath.FromSlash(ObjectPath))
	if err := os.WriteFile(obj, body, 0o644); err != nil {
		return fmt.Errorf("nginxenv: write object: %w", err)
	}
	return nil
}
