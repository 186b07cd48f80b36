package t

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TOLLGATE_JIT_LOG: every worker writes LuaJIT's trace log to <value>.<pid>, and the request
// path's traces are in it once requests ran (docs/development.md reads it).
func TestJITLog(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // the workers run as nobody
		t.Fatal(err)
	}
	base := filepath.Join(dir, "jit.log")
	s := newStack(t, stackOptions{workers: 1, env: map[string]string{"TOLLGATE_JIT_LOG": base}})
	eventually(t, "a trace of the request path in the JIT log", func() bool {
		s.gw().Do("GET", "/bucket/obj-1", "demo-p0", nil, nil)
		files, _ := filepath.Glob(base + ".*")
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if strings.Contains(string(b), "[TRACE ") && strings.Contains(string(b), "access.lua") {
				return true
			}
		}
		return false
	})
}
