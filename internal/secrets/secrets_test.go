package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func ring(t *testing.T) (*Keyring, []byte) {
	t.Helper()
	data, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return r, data
}

func TestSealOpen(t *testing.T) {
	r, _ := ring(t)
	const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	a, err := r.Seal("AKIDEXAMPLE", secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Seal("AKIDEXAMPLE", secret)
	if a == b {
		t.Fatal("two seals of one secret are equal: the nonce is not random")
	}
	if strings.Contains(a, secret) || !strings.HasPrefix(a, Prefix+r.CurrentID()+".") {
		t.Fatalf("sealed value %q", a)
	}
	if got, err := r.Open("AKIDEXAMPLE", a); err != nil || got != secret {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := r.Open("AKIDOTHER", a); err != ErrMalformed {
		t.Fatalf("opened for another key id: %v", err)
	}
	other, _ := ring(t)
	if _, err := other.Open("AKIDEXAMPLE", a); err != ErrUnknownKey {
		t.Fatalf("opened with another key file: %v", err)
	}
	tampered := a[:len(a)-3] + "AAA"
	if tampered == a {
		tampered = a[:len(a)-3] + "BBB"
	}
	if _, err := r.Open("AKIDEXAMPLE", tampered); err == nil {
		t.Fatal("a tampered value opened")
	}
	var none *Keyring
	if _, err := none.Seal("AKIDEXAMPLE", secret); err != ErrNoKey {
		t.Fatalf("sealed without a key: %v", err)
	}
}

func TestRotation(t *testing.T) {
	_, oldKey := ring(t)
	_, newKey := ring(t)
	old, _ := Parse(oldKey)
	sealed, _ := old.Seal("AK1", "0123456789abcdef0123")
	both, err := Parse(append(append([]byte{}, newKey...), oldKey...))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := both.Open("AK1", sealed); err != nil || got != "0123456789abcdef0123" {
		t.Fatalf("the old key does not open after rotation: %v", err)
	}
	resealed, _ := both.Seal("AK1", "0123456789abcdef0123")
	if id, _ := KeyIDOf(resealed); id == old.CurrentID() {
		t.Fatal("the second key sealed: the first line must")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	_, data := ring(t)
	p := filepath.Join(dir, "k")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable key file was accepted: %v", err)
	}
	_ = os.Chmod(p, 0o600)
	if _, err := Load(p); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "# only a comment\n", "c2hvcnQ=\n", strings.Repeat("z", 64) + "\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if _, err := Parse([]byte(strings.Repeat("ab", 32) + "\n")); err != nil {
		t.Errorf("a hex key was refused: %v", err)
	}
}

func TestValidSecret(t *testing.T) {
	for _, s := range []string{"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "minio-secret-123"} {
		if !ValidSecret(s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{"", "short", "has space in it ok", strings.Repeat("x", 129), "tab\there-is-long-enough"} {
		if ValidSecret(s) {
			t.Errorf("%q accepted", s)
		}
	}
}
