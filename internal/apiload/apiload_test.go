package apiload

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestQuantilesNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	q := Quantiles(d)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := q(c.q); got != c.want {
			t.Errorf("q(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := Quantiles(nil)(0.5); got != 0 {
		t.Errorf("no samples: %v, want 0", got)
	}
}

func TestRunCountsErrors(t *testing.T) {
	var n atomic.Int64
	r := Run(2, 50*time.Millisecond, 3, func() bool { time.Sleep(time.Millisecond); return n.Add(1)%2 == 0 })
	if r.N == 0 || r.Errors == 0 || r.Errors >= r.N {
		t.Fatalf("result %+v: want some requests and some (not all) errors", r)
	}
}
