package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// FindRepo walks up from dir to the root of the tollgate module (the go.mod declaring
// "module tollgate").
func FindRepo(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module tollgate\n")) {
			return dir, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("runner: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("runner: not inside the tollgate repository (no go.mod with " +
				"module tollgate above the working directory)")
		}
		dir = parent
	}
}
