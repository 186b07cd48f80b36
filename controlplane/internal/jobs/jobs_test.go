package jobs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/controlplane/internal/jobs"
	"tollgate/internal/testutil"
)

type switchLeader struct{ on atomic.Bool }

func (l *switchLeader) IsLeader() bool { return l.on.Load() }

type failing struct{ n atomic.Int64 }

func (*failing) Name() string { return "failing" }
func (f *failing) Tick(context.Context) error {
	f.n.Add(1)
	return errors.New("boom")
}

// Jobs tick only while the replica leads; failures are counted, not fatal (except a tick cut
// short by the stop); a job without an interval is left out.
func TestRunnerTicksOnlyWhileLeading(t *testing.T) {
	l := &switchLeader{}
	j := &failing{}
	r := jobs.New(l, slog.New(slog.NewTextHandler(io.Discard, nil)),
		jobs.Scheduled{Job: j, Every: 5 * time.Millisecond},
		jobs.Scheduled{Job: &failing{}, Every: 0})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	testutil.Eventually(t, 2*time.Second, func() bool { return r.Counts("failing").Skipped >= 3 }, "skips as follower")
	if j.n.Load() != 0 {
		t.Fatal("a follower ran a job")
	}
	l.on.Store(true)
	testutil.Eventually(t, 2*time.Second, func() bool { return r.Counts("failing").Errors >= 3 }, "runs as leader")
	cancel()
	<-done
	c := r.Counts("failing")
	// a tick cut short by the stop is not counted as a failure
	if c.Runs != j.n.Load() || c.Errors < c.Runs-1 || c.Errors > c.Runs {
		t.Fatalf("counts %+v, ticks %d", c, j.n.Load())
	}
}
