// Package secrets seals the S3 secret access keys tollgate verifies signatures with, so that
// Redis holds them encrypted at rest: AES-256-GCM with a random 12-byte nonce per secret, the
// access key id as additional data (a sealed secret moved to another key does not open), and
// the id of the key that sealed it stored with the ciphertext:
//
//	tgs1.<key id>.<base64(nonce || ciphertext || tag)>
//
// The keys come from a file the control plane and the gateways read (TOLLGATE_SECRETS_KEY_FILE):
// one key per line, 32 bytes as base64 or hex; blank lines and lines starting with '#' are
// ignored. The first key seals; every key opens, so a new key is put first and the old one kept
// below it until every secret was sealed again. A key's id is the first 8 hex digits of the
// SHA-256 of the key. The file must not be readable by group or others.
package secrets

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Prefix starts every sealed secret (the format's version).
const Prefix = "tgs1."

const nonceSize = 12

// Errors of the key file and of sealed values.
var (
	// ErrNoKey: no key file is configured; nothing can be sealed.
	ErrNoKey = errors.New("secrets: no secrets key file is configured (TOLLGATE_SECRETS_KEY_FILE)")
	// ErrUnknownKey: the value was sealed with a key the file does not hold.
	ErrUnknownKey = errors.New("secrets: sealed with a key the secrets key file does not hold")
	// ErrMalformed: not a sealed value, or one that does not open (tampered with, or sealed
	// for another access key id).
	ErrMalformed = errors.New("secrets: not a sealed secret, or one that does not open")
)

type key struct {
	id   string
	aead cipher.AEAD
}

// Keyring holds the keys of a key file; the zero value (or nil) holds none.
type Keyring struct {
	keys []key
}

// KeyID is the id of a 32-byte key.
func KeyID(k []byte) string {
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:4])
}

// Parse reads the keys of a key file's contents.
func Parse(data []byte) (*Keyring, error) {
	r := &Keyring{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		var k []byte
		var err error
		if len(s) == 64 {
			k, err = hex.DecodeString(s)
		} else {
			k, err = base64.StdEncoding.DecodeString(s)
		}
		if err != nil || len(k) != 32 {
			return nil, fmt.Errorf("secrets: key file line %d: want 32 bytes as base64 (44 characters) or hex (64)", line)
		}
		b, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("secrets: key file line %d: %w", line, err)
		}
		aead, err := cipher.NewGCM(b)
		if err != nil {
			return nil, fmt.Errorf("secrets: key file line %d: %w", line, err)
		}
		r.keys = append(r.keys, key{id: KeyID(k), aead: aead})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("secrets: key file: %w", err)
	}
	if len(r.keys) == 0 {
		return nil, errors.New("secrets: the key file holds no key")
	}
	return r, nil
}

// Load reads a key file; it refuses a file that group or others may read or write.
func Load(path string) (*Keyring, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: key file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets: key file %s is accessible to group or others (mode %04o); chmod 600 it", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: key file: %w", err)
	}
	return Parse(data)
}

// NewKey returns a key file's contents with one new random key (base64) and a comment.
func NewKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := io.ReadFull(rand.Reader, k); err != nil {
		return nil, fmt.Errorf("secrets: new key: %w", err)
	}
	return []byte("# tollgate secrets key (AES-256); keep it 0600\n" + base64.StdEncoding.EncodeToString(k) + "\n"), nil
}

// Enabled reports whether the keyring can seal.
func (r *Keyring) Enabled() bool { return r != nil && len(r.keys) > 0 }

// CurrentID is the id of the key that seals ("" without keys).
func (r *Keyring) CurrentID() string {
	if !r.Enabled() {
		return ""
	}
	return r.keys[0].id
}

// Seal encrypts secret for access key id akid with the first key.
func (r *Keyring) Seal(akid, secret string) (string, error) {
	if !r.Enabled() {
		return "", ErrNoKey
	}
	k := r.keys[0]
	nonce := make([]byte, nonceSize, nonceSize+len(secret)+k.aead.Overhead())
	if _, err := io.ReadFull(rand.Reader, nonce); err != nil {
		return "", fmt.Errorf("secrets: nonce: %w", err)
	}
	out := k.aead.Seal(nonce, nonce, []byte(secret), []byte(akid))
	return Prefix + k.id + "." + base64.StdEncoding.EncodeToString(out), nil
}

// KeyIDOf returns the key id a sealed value names, or ErrMalformed.
func KeyIDOf(sealed string) (string, error) {
	rest, ok := strings.CutPrefix(sealed, Prefix)
	if !ok {
		return "", ErrMalformed
	}
	id, _, ok := strings.Cut(rest, ".")
	if !ok || len(id) != 8 {
		return "", ErrMalformed
	}
	return id, nil
}

// Open decrypts a sealed secret of access key id akid.
func (r *Keyring) Open(akid, sealed string) (string, error) {
	id, err := KeyIDOf(sealed)
	if err != nil {
		return "", err
	}
	if r == nil {
		return "", ErrNoKey
	}
	for _, k := range r.keys {
		if k.id != id {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sealed[len(Prefix)+len(id)+1:])
		if err != nil || len(raw) < nonceSize+k.aead.Overhead() {
			return "", ErrMalformed
		}
		pt, err := k.aead.Open(nil, raw[:nonceSize], raw[nonceSize:], []byte(akid))
		if err != nil {
			return "", ErrMalformed
		}
		return string(pt), nil
	}
	return "", ErrUnknownKey
}

// ValidSecret reports whether s is a secret access key tollgate accepts: 16–128 printable ASCII
// characters without whitespace (AWS's are 40; MinIO and Ceph allow others).
func ValidSecret(s string) bool {
	if len(s) < 16 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
