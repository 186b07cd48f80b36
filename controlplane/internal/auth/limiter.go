package auth

import (
	"math"
	"sync"
	"time"

	"tollgate/controlplane/internal/clock"
)

// maxBuckets bounds the limiter's memory: past it, full (idle) buckets are dropped.
const maxBuckets = 10000

// Limiter is the per-user API rate limit (Req 21.9): a token bucket per user in this replica.
type Limiter struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	clock   clock.Clock
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewLimiter allows each user rate requests per second with bursts of burst.
func NewLimiter(rate float64, burst int, clk clock.Clock) *Limiter {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Limiter{rate: rate, burst: float64(burst), clock: clk, buckets: map[string]*bucket{}}
}

// Allow takes one request of user; when refused it says how long until the next is allowed.
func (l *Limiter) Allow(user string) (bool, time.Duration) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[user]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[user] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait
}

func (l *Limiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}
