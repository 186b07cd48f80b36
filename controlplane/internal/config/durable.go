package config

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Environment variables of the config store's durability (docs/durability.md).
const (
	EnvBackupDir   = "TOLLGATE_CONFIG_BACKUP_DIR"   // directory of the config snapshots written after every change, files 0600 (<TOLLGATE_RUN_DIR>/config-backups; a directory)
	EnvBackupKeep  = "TOLLGATE_CONFIG_BACKUP_KEEP"  // config snapshots kept, the oldest removed (50; 1 to 100000)
	EnvRunDir      = "TOLLGATE_RUN_DIR"             // run directory holding the config snapshots by default (.run; a directory)
	EnvConfigWait  = "TOLLGATE_CONFIG_WAIT"         // config writes WAIT for replicas before answering: auto (1 when the master has any), off, or a count (auto; auto, off, 1 to 100)
	EnvWaitTimeout = "TOLLGATE_CONFIG_WAIT_TIMEOUT" // how long a config write waits for its replicas; then it answers unconfirmed (1s; 10ms to 1m)
	EnvStoreCheck  = "TOLLGATE_STORE_CHECK"         // how often the config store's epoch and version are checked (1s; 100ms to 1m)
)

// Durable configures the config store's durability: snapshots, WAIT, the epoch check.
type Durable struct {
	BackupDir   string
	BackupKeep  int
	Wait        int // -1: auto (1 when the master has replicas), 0: off, n: wait for n replicas
	WaitTimeout time.Duration
	StoreCheck  time.Duration
}

// WaitAuto is Durable.Wait's "auto".
const WaitAuto = -1

func durableFromEnv(getenv func(string) string) (Durable, []error) {
	d := Durable{BackupKeep: 50, Wait: WaitAuto, WaitTimeout: time.Second, StoreCheck: time.Second}
	var errs []error
	run := strings.TrimSpace(getenv(EnvRunDir))
	if run == "" {
		run = ".run"
	}
	d.BackupDir = filepath.Join(run, "config-backups")
	if v := strings.TrimSpace(getenv(EnvBackupDir)); v != "" {
		d.BackupDir = v
	}
	if v := strings.TrimSpace(getenv(EnvBackupKeep)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100000 {
			errs = append(errs, fmt.Errorf("%s=%q: want 1 to 100000", EnvBackupKeep, v))
		} else {
			d.BackupKeep = n
		}
	}
	switch v := strings.TrimSpace(getenv(EnvConfigWait)); v {
	case "", "auto":
	case "off", "0":
		d.Wait = 0
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			errs = append(errs, fmt.Errorf("%s=%q: want auto, off or a number of replicas 1 to 100", EnvConfigWait, v))
		} else {
			d.Wait = n
		}
	}
	for _, p := range []struct {
		name     string
		dst      *time.Duration
		min, max time.Duration
	}{
		{EnvWaitTimeout, &d.WaitTimeout, 10 * time.Millisecond, time.Minute},
		{EnvStoreCheck, &d.StoreCheck, 100 * time.Millisecond, time.Minute},
	} {
		v := strings.TrimSpace(getenv(p.name))
		if v == "" {
			continue
		}
		t, err := time.ParseDuration(v)
		if err != nil || t < p.min || t > p.max {
			errs = append(errs, fmt.Errorf("%s=%q: want a duration from %s to %s", p.name, v, p.min, p.max))
			continue
		}
		*p.dst = t
	}
	return d, errs
}

// LogValue prints the durability settings.
func (d Durable) LogValue() slog.Value {
	wait := strconv.Itoa(d.Wait)
	switch d.Wait {
	case WaitAuto:
		wait = "auto"
	case 0:
		wait = "off"
	}
	return slog.GroupValue(slog.String("backup_dir", d.BackupDir), slog.Int("backup_keep", d.BackupKeep),
		slog.String("wait", wait), slog.Duration("wait_timeout", d.WaitTimeout),
		slog.Duration("store_check", d.StoreCheck))
}
