// Package clock is the time seam of the control plane: jobs read time through Clock so tests
// freeze and advance it (the fake one is testutil.Clock).
package clock

import "time"

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the system clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }
