package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it returns true or timeout passes, then fails the test
// with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %s", timeout, msg)
		}
		<-tick.C
	}
}
