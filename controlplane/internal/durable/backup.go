package durable

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Snapshot is one backup: the whole config with secrets, and the store's epoch and version
// when it was taken.
type Snapshot struct {
	Epoch   string   `json:"epoch"`
	Version int64    `json:"version"`
	Redis   string   `json:"redis,omitempty"` // the store it was taken of (TOLLGATE_REDIS_URL, no password)
	TakenAt string   `json:"taken_at"`
	Config  Document `json:"config"`
}

// Backups is the snapshot directory: files config-<unix nanoseconds>-v<version>.json, mode
// 0600 in a 0700 directory, the newest Keep kept.
type Backups struct {
	Dir  string
	Keep int
}

const backupPrefix, backupSuffix = "config-", ".json"

// Write stores a snapshot and removes the oldest beyond Keep; returns the file name.
func (b *Backups) Write(s Snapshot) (string, error) {
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		return "", fmt.Errorf("durable: backup dir: %w", err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s%020d-v%d%s", backupPrefix, time.Now().UnixNano(), s.Version, backupSuffix)
	tmp, err := os.CreateTemp(b.Dir, ".tmp-config-")
	if err != nil {
		return "", fmt.Errorf("durable: backup: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(append(data, '\n')); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("durable: backup: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(b.Dir, name)); err != nil {
		return "", fmt.Errorf("durable: backup: %w", err)
	}
	names, err := b.List()
	if err == nil && b.Keep > 0 && len(names) > b.Keep {
		for _, old := range names[b.Keep:] {
			_ = os.Remove(filepath.Join(b.Dir, old))
		}
	}
	return name, nil
}

// List returns the snapshot file names, newest first.
func (b *Backups) List() ([]string, error) {
	ents, err := os.ReadDir(b.Dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("durable: backups: %w", err)
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasPrefix(n, backupPrefix) && strings.HasSuffix(n, backupSuffix) {
			out = append(out, n)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, nil
}

// Load reads one snapshot by file name (a bare name of List, never a path).
func (b *Backups) Load(name string) (*Snapshot, error) {
	if name != filepath.Base(name) || !strings.HasPrefix(name, backupPrefix) || !strings.HasSuffix(name, backupSuffix) {
		return nil, fmt.Errorf("durable: %q is not a snapshot name", name)
	}
	data, err := os.ReadFile(filepath.Join(b.Dir, name))
	if err != nil {
		return nil, err
	}
	return ParseSnapshot(data)
}

// ParseSnapshot reads a snapshot file (strict).
func ParseSnapshot(data []byte) (*Snapshot, error) {
	var raw struct {
		Epoch   string          `json:"epoch"`
		Version int64           `json:"version"`
		Redis   string          `json:"redis"`
		TakenAt string          `json:"taken_at"`
		Config  json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, &DecodeError{"snapshot: " + err.Error()}
	}
	doc, err := Decode(raw.Config)
	if err != nil {
		return nil, err
	}
	return &Snapshot{Epoch: raw.Epoch, Version: raw.Version, Redis: raw.Redis, TakenAt: raw.TakenAt, Config: doc}, nil
}

// Latest returns the newest snapshot and its name (nil when there is none).
func (b *Backups) Latest() (*Snapshot, string, error) {
	names, err := b.List()
	if err != nil || len(names) == 0 {
		return nil, "", err
	}
	s, err := b.Load(names[0])
	if err != nil {
		return nil, "", fmt.Errorf("durable: newest snapshot %s: %w", names[0], err)
	}
	return s, names[0], nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
