package harness

import (
	"os"
	"path/filepath"
	"testing"

	"tollgate/internal/secrets"
)

// SecretsKeyFile writes a new secrets key file (one random AES-256 key, mode 0600) into the
// test's temporary directory and returns its path: TOLLGATE_SECRETS_KEY_FILE of the control
// plane and of the gateways (the master reads it as root; the workers never do).
func SecretsKeyFile(t testing.TB) string {
	t.Helper()
	data, err := secrets.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "secrets.key")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
