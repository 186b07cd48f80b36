package leader_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/controlplane/internal/jobs"
	"tollgate/controlplane/internal/jobs/leader"
	"tollgate/internal/ledger"
	"tollgate/internal/scripts"
	"tollgate/internal/testutil"
)

// breakable is a Lock that can be cut off from Redis (a partitioned or hung replica).
type breakable struct {
	leader.Lock
	broken atomic.Bool
}

var errPartition = errors.New("partitioned")

func (b *breakable) ClaimLeader(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	if b.broken.Load() {
		return false, errPartition
	}
	return b.Lock.ClaimLeader(ctx, token, ttl)
}

func (b *breakable) ReleaseLeader(ctx context.Context, token string) error {
	if b.broken.Load() {
		return errPartition
	}
	return b.Lock.ReleaseLeader(ctx, token)
}

type countJob struct{ n atomic.Int64 }

func (*countJob) Name() string                 { return "count" }
func (j *countJob) Tick(context.Context) error { j.n.Add(1); return nil }

// replica is one control plane: an elector and a runner with a counting job.
type replica struct {
	lock   *breakable
	el     *leader.Elector
	job    *countJob
	cancel context.CancelFunc
	done   sync.WaitGroup
}

const ttl = 600 * time.Millisecond

func start(t *testing.T, l *ledger.Ledger, name string) *replica {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &replica{lock: &breakable{Lock: l}, job: &countJob{}}
	var err error
	r.el, err = leader.New(r.lock, leader.Options{TTL: ttl, Renew: 100 * time.Millisecond, Name: name, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	run := jobs.New(r.el, log, jobs.Scheduled{Job: r.job, Every: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done.Add(2)
	go func() { defer r.done.Done(); r.el.Run(ctx) }()
	go func() { defer r.done.Done(); run.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() { r.cancel(); r.done.Wait() }

func setup(t *testing.T) *ledger.Ledger {
	t.Helper()
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	return ledger.New(testutil.StartRedis(t).Client(), set)
}

// watch fails the test if both replicas ever lead at once, until stop is closed.
func watch(t *testing.T, a, b *replica) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if a.el.IsLeader() && b.el.IsLeader() {
				t.Error("both replicas lead at the same time")
				return
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// lead waits for exactly one leader among the replicas and returns it and the other one.
func lead(t *testing.T, a, b *replica) (*replica, *replica) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, func() bool { return a.el.IsLeader() != b.el.IsLeader() },
		"exactly one replica leads")
	if a.el.IsLeader() {
		return a, b
	}
	return b, a
}

// Two replicas: only the leader runs jobs; when it stops (and releases the lock) the other one
// takes over at its next claim.
func TestOnlyTheLeaderRunsJobsAndTheOtherTakesOver(t *testing.T) {
	l := setup(t)
	a, b := start(t, l, "a"), start(t, l, "b")
	stopWatch := watch(t, a, b)
	defer stopWatch()
	first, second := lead(t, a, b)
	testutil.Eventually(t, 5*time.Second, func() bool { return first.job.n.Load() >= 20 }, "leader runs its job")
	if n := second.job.n.Load(); n != 0 || second.el.IsLeader() {
		t.Fatalf("follower ran its job %d times", n)
	}
	first.stop()
	ran := first.job.n.Load()
	testutil.Eventually(t, 2*time.Second, func() bool { return second.el.IsLeader() && second.job.n.Load() >= 10 },
		"the other replica takes over after a graceful stop")
	if first.job.n.Load() != ran {
		t.Fatal("the stopped replica kept running jobs")
	}
}

// A leader cut off from Redis stops acting once its last claim is a ttl old, and only then can
// the other replica take over — never both at once.
func TestPartitionedLeaderStepsDownBeforeTakeover(t *testing.T) {
	l := setup(t)
	a, b := start(t, l, "a"), start(t, l, "b")
	stopWatch := watch(t, a, b)
	defer stopWatch()
	first, second := lead(t, a, b)
	cut := time.Now()
	first.lock.broken.Store(true)
	testutil.Eventually(t, 5*time.Second, func() bool { return second.el.IsLeader() }, "takeover after the lock expired")
	if d := time.Since(cut); d > ttl+500*time.Millisecond {
		t.Fatalf("takeover took %s with a %s ttl", d, ttl)
	}
	if first.el.IsLeader() {
		t.Fatal("the partitioned replica still leads")
	}
	ran := first.job.n.Load()
	testutil.Eventually(t, 2*time.Second, func() bool { return second.job.n.Load() >= 10 }, "new leader runs jobs")
	if first.job.n.Load() > ran+1 { // at most a tick that had already started
		t.Fatalf("partitioned replica ran %d more ticks", first.job.n.Load()-ran)
	}
}
