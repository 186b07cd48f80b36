package testutil

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when told to (the control plane's clock.Clock for tests);
// safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a fake clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the fake time forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
