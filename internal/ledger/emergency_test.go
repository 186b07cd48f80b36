package ledger_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tollgate/internal/keys"
	. "tollgate/internal/ledger" // an external test: testutil's Fixture imports ledger
)

var ratios = map[int]float64{0: 1, 1: 0.5, 2: 0.1, 3: 0}

// Property 6: in emergency an app of priority P gets its ratio of the quota — P0 100 %, P1 50 %,
// P2 10 %, P3 0 % — as refill rate and as share of the burst; P3 is answered emergency_blocked,
// P1/P2 beyond their share emergency_quota_exceeded without borrowing; the ratio ends at the
// recorded end of the mode (no control plane needed) or at deactivation, exactly then.
func TestProperty6EmergencyRatios(t *testing.T) {
	f := newFx(t)
	rapid.Check(t, func(rt *rapid.T) {
		now := f.reset(rt)
		f.cluster(rt, "c", 10_000_000)
		prio := rapid.IntRange(0, 3).Draw(rt, "priority")
		r := ratios[prio]
		g := rapid.Int64Range(1, 1_000_000).Draw(rt, "guaranteed")
		burst := g * rapid.Int64Range(1, 4).Draw(rt, "burst_factor")
		f.app(rt, "c", "a", g, burst, prio, burst) // may borrow: emergency must stop P1-P3 doing so
		f.grantUsed(rt, "c", "a", "n1", 1, 1, now) // settle the bucket at the explicit clock
		dur := rapid.Int64Range(1, 600).Draw(rt, "duration_s")
		if _, _, err := f.l.ActivateEmergency(f.ctx, "c", Activation{Duration: time.Duration(dur) * time.Second,
			Reason: "test", Source: "manual", Actor: "t"}, now); err != nil {
			rt.Fatal(err)
		}
		until := (now/1_000_000 + dur) * 1_000_000
		// first grant in emergency: the bucket holds at most its share of the burst
		held := f.l2(rt, "c", "a").Tokens
		res := f.grantUsed(rt, "c", "a", "n1", 10*burst, 1, now)
		share := float64(burst) * r
		if prio == 3 {
			if res.Granted != 0 || res.Reason != "emergency_blocked" {
				rt.Fatalf("P3 in emergency: %+v, want emergency_blocked", res)
			}
		} else if want := int64(math.Floor(math.Min(share, held))); res.Granted != want && want > 0 {
			rt.Fatalf("P%d first grant %+v, want %d (share %.1f of burst %d, held %.1f)",
				prio, res, want, share, burst, held)
		}
		if res.RateMilli != int64(math.Floor(float64(g)*r*1000)) || res.EmergencyUntil != until/1_000_000 {
			rt.Fatalf("P%d: rate_milli %d (G %d), until %d; want ratio %.1f and until %d",
				prio, res.RateMilli, g, res.EmergencyUntil, r, until/1_000_000)
		}
		// while active: refill at G x ratio, nothing borrowed for P1-P3
		b0 := f.l2(rt, "c", "a")
		step := rapid.Int64Range(0, until-now-1).Draw(rt, "step_us")
		now += step
		res = f.grantUsed(rt, "c", "a", "n1", 10*burst, b0Need(b0, step, g, r, share), now)
		b1 := f.l2(rt, "c", "a")
		want := math.Min(share, b0.Tokens+float64(step)*r*float64(g)/1e6)
		switch {
		case prio == 3 && res.Reason != "emergency_blocked":
			rt.Fatalf("P3 %+v", res)
		case prio == 1 || prio == 2:
			if b1.Borrowed != 0 {
				rt.Fatalf("P%d borrowed %d in emergency", prio, b1.Borrowed)
			}
			if res.Granted == 0 && res.Reason != "emergency_quota_exceeded" {
				rt.Fatalf("P%d refused with %q", prio, res.Reason)
			}
		}
		lent := b1.TotalBorrowed - b0.TotalBorrowed // only P0 may borrow in emergency
		if prio != 3 && res.Reason == "ok" && res.Granted != int64(math.Floor(want))+lent {
			rt.Fatalf("P%d after %dus: granted %d, want floor(%.6f) + lent %d", prio, step, res.Granted, want, lent)
		}
		// past the end (or after deactivation) the full rate is back from that instant on
		b0 = f.l2(rt, "c", "a")
		end := until
		if rapid.Bool().Draw(rt, "deactivate") {
			end = now + rapid.Int64Range(0, until-now).Draw(rt, "deactivate_after_us")
			if _, err := f.l.DeactivateEmergency(f.ctx, "c", Deactivation{Reason: "over", Source: "manual", Actor: "t"}, end); err != nil {
				rt.Fatal(err)
			}
		}
		later := end + rapid.Int64Range(0, 5_000_000).Draw(rt, "after_us")
		res = f.grantUsed(rt, "c", "a", "n1", 10*burst, 1, later)
		acc := b0.Tokens + (float64(end-now)*r+float64(later-end)*1)*float64(g)/1e6
		if prio == 3 {
			acc = b0.Tokens + float64(later-end)*float64(g)/1e6 // P3 was capped at 0
		}
		lent = f.l2(rt, "c", "a").TotalBorrowed - b0.TotalBorrowed // loans are back too
		if exp := math.Floor(math.Min(float64(burst), acc)) + float64(lent); math.Abs(float64(res.Granted)-exp) > 1 {
			rt.Fatalf("P%d after the emergency: granted %d (lent %d), want about %.3f", prio, res.Granted, lent, exp)
		}
		if res.EmergencyUntil != 0 || res.RateMilli != g*1000 {
			rt.Fatalf("after the emergency: %+v", res)
		}
	})
}

// b0Need is a min that the bucket cannot cover when it would not have refilled that far, so
// the refusal path is exercised too.
func b0Need(b L2, step, g int64, r, share float64) int64 {
	have := math.Min(share, b.Tokens+float64(step)*r*float64(g)/1e6)
	if step%2 == 0 {
		return int64(math.Floor(have)) + 1
	}
	return 1
}

// Overload (docs/design.md §3): above 90 % usage the refill factor of P1-P3 falls linearly to
// its emergency ratio at 100 %; P0 and usage up to 90 % keep factor 1; the factor is applied to
// refill from the moment it is set and ends with its ttl.
func TestOverloadFactor(t *testing.T) {
	f := newFx(t)
	rapid.Check(t, func(rt *rapid.T) {
		now := f.reset(rt)
		f.cluster(rt, "c", 10_000_000)
		prio := rapid.IntRange(0, 3).Draw(rt, "priority")
		g := rapid.Int64Range(1, 1_000_000).Draw(rt, "guaranteed")
		f.app(rt, "c", "a", g, 4*g, prio, 0)
		f.grantUsed(rt, "c", "a", "n1", 4*g, 1, now) // drain
		usage := rapid.Float64Range(0, 1.2).Draw(rt, "usage")
		factors, err := f.l.SetOverload(f.ctx, "c", usage, 10*time.Second, now)
		if err != nil {
			rt.Fatal(err)
		}
		for p := 0; p < 4; p++ {
			want := 1.0
			if p > 0 && usage > 0.9 {
				want = 1 - (1-ratios[p])*math.Min(1, (usage-0.9)/0.1)
			}
			if math.Abs(float64(factors[p])/1000-want) > 0.0006 {
				rt.Fatalf("usage %.4f: factor of P%d %d/1000, want %.4f", usage, p, factors[p], want)
			}
		}
		b0 := f.l2(rt, "c", "a")
		step := rapid.Int64Range(1, 2_000_000).Draw(rt, "step_us")
		res := f.grantUsed(rt, "c", "a", "n1", 4*g, 1, now+step)
		u := math.Round(usage*1e6) / 1e6
		fac := 1.0
		if prio > 0 && u > 0.9 {
			fac = 1 - (1-ratios[prio])*math.Min(1, (u-0.9)/0.1)
		}
		want := b0.Tokens + float64(step)*fac*float64(g)/1e6
		if math.Abs(float64(res.Granted)-math.Floor(want)) > 1 {
			rt.Fatalf("P%d usage %.4f: granted %d after %dus, want floor(%.4f)", prio, usage, res.Granted, step, want)
		}
	})
}

// Activation and deactivation write the L1 state, a bounded history entry, and publish the JSON
// the gateways wait for; bad arguments are refused without a change.
func TestEmergencyActivateDeactivatePublishes(t *testing.T) {
	f := newFx(t)
	now := f.reset(t)
	f.cluster(t, "c", 1000)
	sub := f.rdb.Subscribe(f.ctx, keys.EmergencyChannel())
	defer sub.Close()
	if _, err := sub.Receive(f.ctx); err != nil {
		t.Fatal(err)
	}
	type msg struct {
		ClusterID string `json:"cluster_id"`
		Active    bool   `json:"active"`
		Until     int64  `json:"until"`
		Reason    string `json:"reason"`
	}
	next := func() msg {
		m, err := sub.ReceiveMessage(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var v msg
		if err := json.Unmarshal([]byte(m.Payload), &v); err != nil {
			t.Fatalf("payload %q: %v", m.Payload, err)
		}
		return v
	}
	first, until, err := f.l.ActivateEmergency(f.ctx, "c",
		Activation{Duration: 300 * time.Second, Reason: `disk "hot"`, Source: "manual", Actor: "alice"}, now)
	if err != nil || !first || until != now/1_000_000+300 {
		t.Fatalf("activate: %v %d %v", first, until, err)
	}
	if m := next(); m != (msg{"c", true, until, `disk "hot"`}) {
		t.Fatalf("activation message %+v", m)
	}
	if s := f.l1(t, "c"); !s.EmergencyActive(now/1_000_000) || s.EmergencyReason != `disk "hot"` {
		t.Fatalf("L1 after activation %+v", s)
	}
	again, _, err := f.l.ActivateEmergency(f.ctx, "c",
		Activation{Duration: 60 * time.Second, Reason: "again", Source: "auto", Actor: "controlplane"}, now)
	if err != nil || again {
		t.Fatalf("second activation: first=%v %v", again, err)
	}
	next()
	// expiry-only deactivation before the end does nothing
	if ended, err := f.l.DeactivateEmergency(f.ctx, "c", Deactivation{Reason: "expired", Source: "expired",
		Actor: "controlplane", OnlyIfExpired: true}, now+1_000_000); err != nil || ended {
		t.Fatalf("early expiry: %v %v", ended, err)
	}
	if ended, err := f.l.DeactivateEmergency(f.ctx, "c", Deactivation{Reason: "expired", Source: "expired",
		Actor: "controlplane", OnlyIfExpired: true}, now+61_000_000); err != nil || !ended {
		t.Fatalf("expiry: %v %v", ended, err)
	}
	if m := next(); m != (msg{"c", false, 0, "expired"}) {
		t.Fatalf("deactivation message %+v", m)
	}
	if ended, err := f.l.DeactivateEmergency(f.ctx, "c", Deactivation{Source: "manual"}, now); err != nil || ended {
		t.Fatalf("deactivating an inactive cluster: %v %v", ended, err)
	}
	h, err := f.l.EmergencyHistory(f.ctx, "c", 10)
	if err != nil || len(h) != 3 || h[0].Event != "deactivate" || h[1].Event != "extend" ||
		h[2].Event != "activate" || h[2].Actor != "alice" || h[0].Source != "expired" {
		t.Fatalf("history %+v %v", h, err)
	}
	bad := []Activation{
		{Duration: 0, Source: "manual"},
		{Duration: time.Second, Reason: "a\nb", Source: "manual"},
		{Duration: time.Second, Reason: strings.Repeat("x", 257), Source: "manual"},
		{Duration: time.Second, Source: "man ual"},
	}
	for _, a := range bad {
		var se *ScriptError
		if _, _, err := f.l.ActivateEmergency(f.ctx, "c", a, now); !errors.As(err, &se) {
			t.Errorf("activation %+v: err %v, want a script error", a, err)
		}
	}
	if _, _, err := f.l.ActivateEmergency(f.ctx, "nope", Activation{Duration: time.Second}, now); !errors.Is(err, ErrUnknownCluster) {
		t.Errorf("unknown cluster: %v", err)
	}
	if f.l1(t, "c").EmergencyMode {
		t.Error("a refused activation changed the mode")
	}
	// the stream stays bounded
	for i := 0; i < 1200; i++ {
		if _, _, err := f.l.ActivateEmergency(f.ctx, "c", Activation{Duration: time.Second, Source: "auto"}, now); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := f.rdb.XLen(f.ctx, keys.EmergencyHistory("c")).Result(); n > 1200 || n < 1000 {
		t.Fatalf("history length %d after 1203 entries, want about 1000", n)
	}
}
