package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/internal/scripts"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

// BenchmarkConfigWrite is one app update (app_config script, index HSET, version INCR, PUBLISH)
// per operation, against a private redis-server per persistence setting, and with WAIT for a
// replica (docs/durability.md):
//
//	go test -run '^$' -bench ConfigWrite -benchtime 2000x ./internal/store/
func BenchmarkConfigWrite(b *testing.B) {
	for _, c := range []struct {
		name    string
		args    []string
		replica bool
	}{
		{"no-aof", nil, false},
		{"aof-everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, false},
		{"aof-always", []string{"--appendonly", "yes", "--appendfsync", "always"}, false},
		{"aof-everysec+wait-replica", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := testutil.StartRedisArgs(b, c.args...)
			rdb := r.Client()
			set, err := scripts.New()
			if err != nil {
				b.Fatal(err)
			}
			s := store.New(rdb, set)
			if c.replica {
				rep := testutil.StartRedisArgs(b, append(c.args, "--replicaof", "127.0.0.1", strconv.Itoa(r.Port()))...)
				testutil.Eventually(b, 10*time.Second, func() bool {
					info, err := rep.Client().Info(context.Background(), "replication").Result()
					return err == nil && strings.Contains(info, "master_link_status:up")
				}, "replica in sync")
				s.SetHooks(store.Hooks{Replicas: func(context.Context) int { return 1 }})
			}
			ctx := context.Background()
			if _, err := s.PutCluster(ctx, store.Cluster{ID: "c", Capacity: 1 << 40}); err != nil {
				b.Fatal(err)
			}
			ctx, ack := store.WithAck(ctx)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.PutApp(ctx, store.App{AppID: "a", ClusterID: "c", GuaranteedQuota: int64(1 + i%100),
					BurstQuota: 1000, Enabled: true}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if c.replica {
				if _, wanted, acked, failure := ack.Result(); acked != wanted || failure != "" {
					b.Fatalf("WAIT: %d of %d (%s)", acked, wanted, failure)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/write")
		})
	}
}
