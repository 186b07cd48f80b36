package main

import (
	"context"
	"log/slog"
	"os"
	"sync"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/config"
	"tollgate/controlplane/internal/jobs"
	"tollgate/controlplane/internal/jobs/debt"
	"tollgate/controlplane/internal/jobs/emergency"
	"tollgate/controlplane/internal/jobs/leader"
	"tollgate/controlplane/internal/jobs/overload"
	"tollgate/controlplane/internal/jobs/reconcile"
	"tollgate/controlplane/internal/jobs/usage"
	"tollgate/internal/ledger"
	"tollgate/internal/store"
)

// startJobs takes part in the leader election and runs the periodic jobs while this replica
// leads; the returned function stops both and waits for them.
func startJobs(ctx context.Context, log *slog.Logger, cfg config.Jobs, rdb redis.UniversalClient,
	run ledger.Runner, st *store.Store) (func(), error) {
	if !cfg.Enabled {
		log.Info("periodic jobs disabled")
		return func() {}, nil
	}
	led := ledger.New(rdb, run)
	host, _ := os.Hostname()
	el, err := leader.New(led, leader.Options{TTL: cfg.LeaderTTL, Name: sanitize(host), Logger: log})
	if err != nil {
		return nil, err
	}
	r := jobs.New(el, log,
		jobs.Scheduled{Every: cfg.ReconcileEvery, Job: reconcile.New(st, led,
			reconcile.Options{Tolerance: cfg.DriftTolerance, ReapAfter: cfg.ReapAfter,
				SweepPerTick: cfg.ReconcileSweep, Logger: log})},
		jobs.Scheduled{Every: cfg.UsageEvery, Job: emergency.NewJob(st, led, usage.NewMeter(led, nil),
			emergency.NewManager(led, log),
			emergency.Options{Threshold: cfg.EmergencyThreshold, Duration: cfg.EmergencyDuration})},
		jobs.Scheduled{Every: cfg.UsageEvery, Job: overload.New(st, led, usage.NewMeter(led, nil),
			3*cfg.UsageEvery, log)},
		jobs.Scheduled{Every: cfg.DebtEvery, Job: debt.New(st, led, log)},
	)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); el.Run(ctx) }()
	go func() { defer wg.Done(); r.Run(ctx) }()
	log.Info("periodic jobs started", "token", el.Token())
	return func() { cancel(); wg.Wait() }, nil
}

// sanitize keeps the host name readable in the lock token without odd characters.
func sanitize(s string) string {
	out := []byte{}
	for i := 0; i < len(s) && len(out) < 64; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "cp"
	}
	return string(out)
}
