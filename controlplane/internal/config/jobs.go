package config

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Environment variables of the periodic jobs (run by the elected leader among replicas).
const (
	EnvJobs               = "TOLLGATE_CP_JOBS"                // run the periodic jobs at all (true; true or false)
	EnvLeaderTTL          = "TOLLGATE_CP_LEADER_TTL"          // leader lock expiry (10s; 100ms to 10m)
	EnvReconcileEvery     = "TOLLGATE_CP_RECONCILE_INTERVAL"  // reconciliation interval (60s; 10ms to 24h)
	EnvDriftTolerance     = "TOLLGATE_CP_DRIFT_TOLERANCE"     // lease drift corrected above this share (0.1; > 0 and <= 10)
	EnvReapAfter          = "TOLLGATE_CP_REAP_AFTER"          // a silent node's leases are reaped after (30s; 1s to 24h)
	EnvUsageEvery         = "TOLLGATE_CP_USAGE_INTERVAL"      // usage measurement for overload and emergency (5s; 10ms to 1h)
	EnvEmergencyThreshold = "TOLLGATE_CP_EMERGENCY_THRESHOLD" // usage share that activates emergency mode (0.95; > 0 and <= 10)
	EnvEmergencyDuration  = "TOLLGATE_CP_EMERGENCY_DURATION"  // length of an emergency (300s; 1s to 24h, whole seconds)
	EnvDebtEvery          = "TOLLGATE_CP_DEBT_INTERVAL"       // debt repayment interval (10s; 10ms to 24h)
	EnvReconcileSweep     = "TOLLGATE_CP_RECONCILE_SWEEP"     // apps per cluster and reconcile tick besides the active ones: every app is visited once per apps/sweep ticks (2000; 1 to 1000000)
)

// Jobs configures the periodic jobs.
type Jobs struct {
	Enabled            bool
	LeaderTTL          time.Duration
	ReconcileEvery     time.Duration
	DriftTolerance     float64
	ReapAfter          time.Duration
	UsageEvery         time.Duration
	EmergencyThreshold float64
	EmergencyDuration  time.Duration
	DebtEvery          time.Duration
	ReconcileSweep     int
}

// DefaultJobs are the job settings without environment overrides.
func DefaultJobs() Jobs {
	return Jobs{Enabled: true, LeaderTTL: 10 * time.Second, ReconcileEvery: 60 * time.Second,
		DriftTolerance: 0.1, ReapAfter: 30 * time.Second, UsageEvery: 5 * time.Second,
		EmergencyThreshold: 0.95, EmergencyDuration: 300 * time.Second, DebtEvery: 10 * time.Second,
		ReconcileSweep: 2000}
}

// jobsFromEnv reads the job settings over the defaults and returns every error.
func jobsFromEnv(getenv func(string) string) (Jobs, []error) {
	j := DefaultJobs()
	var errs []error
	if v := strings.TrimSpace(getenv(EnvJobs)); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want true or false", EnvJobs, v))
		}
		j.Enabled = b
	}
	durations := []struct {
		name     string
		dst      *time.Duration
		min, max time.Duration
	}{
		{EnvLeaderTTL, &j.LeaderTTL, 100 * time.Millisecond, 10 * time.Minute},
		{EnvReconcileEvery, &j.ReconcileEvery, 10 * time.Millisecond, 24 * time.Hour},
		{EnvReapAfter, &j.ReapAfter, time.Second, 24 * time.Hour},
		{EnvUsageEvery, &j.UsageEvery, 10 * time.Millisecond, time.Hour},
		{EnvEmergencyDuration, &j.EmergencyDuration, time.Second, 24 * time.Hour},
		{EnvDebtEvery, &j.DebtEvery, 10 * time.Millisecond, 24 * time.Hour},
	}
	for _, d := range durations {
		v := strings.TrimSpace(getenv(d.name))
		if v == "" {
			continue
		}
		p, err := time.ParseDuration(v)
		if err != nil || p < d.min || p > d.max {
			errs = append(errs, fmt.Errorf("%s=%q: want a duration from %s to %s (e.g. 60s)", d.name, v, d.min, d.max))
			continue
		}
		*d.dst = p
	}
	fractions := []struct {
		name string
		dst  *float64
	}{{EnvDriftTolerance, &j.DriftTolerance}, {EnvEmergencyThreshold, &j.EmergencyThreshold}}
	for _, f := range fractions {
		v := strings.TrimSpace(getenv(f.name))
		if v == "" {
			continue
		}
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || !(p > 0 && p <= 10) {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive fraction (e.g. 0.1)", f.name, v))
			continue
		}
		*f.dst = p
	}
	if v := strings.TrimSpace(getenv(EnvReconcileSweep)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			errs = append(errs, fmt.Errorf("%s=%q: want a whole number from 1 to 1000000", EnvReconcileSweep, v))
		} else {
			j.ReconcileSweep = n
		}
	}
	if j.EmergencyDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("%s=%s: want whole seconds", EnvEmergencyDuration, j.EmergencyDuration))
	}
	return j, errs
}

// LogValue prints the job settings.
func (j Jobs) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Bool("enabled", j.Enabled), slog.Duration("leader_ttl", j.LeaderTTL),
		slog.Duration("reconcile_every", j.ReconcileEvery), slog.Float64("drift_tolerance", j.DriftTolerance),
		slog.Duration("reap_after", j.ReapAfter), slog.Duration("usage_every", j.UsageEvery),
		slog.Float64("emergency_threshold", j.EmergencyThreshold),
		slog.Duration("emergency_duration", j.EmergencyDuration), slog.Duration("debt_every", j.DebtEvery),
		slog.Int("reconcile_sweep", j.ReconcileSweep),
	)
}
