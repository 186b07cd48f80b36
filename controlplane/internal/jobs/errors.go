package jobs

import (
	"errors"
	"fmt"
)

// MaxErrors is how many failures of one tick an Errors keeps; the rest are counted.
const MaxErrors = 5

// MaxErrorLog is the most bytes of a failed tick's error the runner logs.
const MaxErrorLog = 4096

// Errors collects the failures of a tick that goes on after each (one per app or cluster),
// keeping the first MaxErrors and counting the others: a tick over 100,000 failing apps
// returns an error of a few lines, not one line per app.
type Errors struct {
	first []error
	more  int
}

// Add records err (nil is ignored).
func (e *Errors) Add(err error) {
	switch {
	case err == nil:
	case len(e.first) < MaxErrors:
		e.first = append(e.first, err)
	default:
		e.more++
	}
}

// Err returns the kept failures joined and how many more there were; nil without failures.
func (e *Errors) Err() error {
	err := errors.Join(e.first...)
	if err != nil && e.more > 0 {
		return fmt.Errorf("%w\n(and %d more failures)", err, e.more)
	}
	return err
}

// clip shortens an error message to MaxErrorLog bytes.
func clip(err error) string {
	s := err.Error()
	if len(s) <= MaxErrorLog {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes more)", s[:MaxErrorLog], len(s)-MaxErrorLog)
}
