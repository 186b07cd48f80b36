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
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(user)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, l.wait(b)
}

// Check says whether key has a token left, without taking it (and how long until it has).
// With Spend it makes a budget of failures: checked before a request, spent after it failed.
func (l *Limiter) Check(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(key)
	if b.tokens >= 1 {
		return true, 0
	}
	return false, l.wait(b)
}

// Spend takes one token of key (none left: nothing happens).
func (l *Limiter) Spend(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(key)
	b.tokens = math.Max(0, b.tokens-1)
}

func (l *Limiter) wait(b *bucket) time.Duration {
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// refill returns key's bucket, refilled up to now (a new key starts full).
func (l *Limiter) refill(key string) *bucket {
	now := l.clock.Now()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	return b
}

// prune drops the full (idle) buckets; if that is not enough (many keys, none idle), any
// buckets down to three quarters of the bound, so memory stays bounded whatever the keys.
func (l *Limiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < maxBuckets*3/4 {
			break
		}
		delete(l.buckets, k)
	}
}

// Len is the number of buckets held (tests).
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
