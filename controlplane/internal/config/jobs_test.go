package config

import (
	"strings"
	"testing"
	"time"
)

func TestJobDefaultsAndOverrides(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil || c.Jobs != DefaultJobs() {
		t.Fatalf("defaults: %+v %v", c.Jobs, err)
	}
	c, err = FromEnv(env(map[string]string{EnvJobs: "false", EnvReconcileEvery: "50ms",
		EnvDriftTolerance: "0.05", EnvEmergencyThreshold: "0.9", EnvEmergencyDuration: "2s",
		EnvUsageEvery: "20ms", EnvDebtEvery: "30ms", EnvLeaderTTL: "500ms", EnvReapAfter: "3s",
		EnvReconcileSweep: "50"}))
	want := Jobs{Enabled: false, LeaderTTL: 500 * time.Millisecond, ReconcileEvery: 50 * time.Millisecond,
		DriftTolerance: 0.05, ReapAfter: 3 * time.Second, UsageEvery: 20 * time.Millisecond,
		EmergencyThreshold: 0.9, EmergencyDuration: 2 * time.Second, DebtEvery: 30 * time.Millisecond,
		ReconcileSweep: 50}
	if err != nil || c.Jobs != want {
		t.Fatalf("overrides: %+v %v", c.Jobs, err)
	}
}

func TestBadJobSettingsAreAllReported(t *testing.T) {
	_, err := FromEnv(env(map[string]string{EnvJobs: "sometimes", EnvReconcileEvery: "1ms",
		EnvDriftTolerance: "-1", EnvEmergencyThreshold: "x", EnvEmergencyDuration: "1500ms",
		EnvUsageEvery: "soon", EnvReconcileSweep: "0"}))
	if err == nil {
		t.Fatal("no error")
	}
	for _, name := range []string{EnvJobs, EnvReconcileEvery, EnvDriftTolerance, EnvEmergencyThreshold,
		EnvEmergencyDuration, EnvUsageEvery, EnvReconcileSweep} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}
