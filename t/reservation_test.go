package t

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tollgate/t/harness"
)

func units(bytes int) int64 { return int64((bytes + 65535) / 65536) }

// Property 9: a multipart upload that announced E bytes reserves their bandwidth at initiation;
// parts draw from the reservation; completion returns the rest. Whatever E was, the lease ends up
// charged exactly the real cost of the upload: init 2 + parts (4 + units each) + complete 8.
func TestProperty9MultipartReservationRoundTrip(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(nil)})
	g := s.gw()
	rapid.Check(t, func(rt *rapid.T) {
		g.T("set?app=demo-p0&tokens=100000", nil)
		expected := rapid.IntRange(0, 4<<20).Draw(rt, "expected_bytes")
		parts := rapid.SliceOfN(rapid.IntRange(1, 300000), 1, 5).Draw(rt, "part_bytes")
		abort := rapid.Bool().Draw(rt, "abort")
		key := "/b/mp" + strconv.Itoa(rapid.IntRange(0, 1<<30).Draw(rt, "key"))
		hdr := map[string]string{}
		if expected > 0 {
			hdr["X-Tollgate-Expected-Size"] = strconv.Itoa(expected)
		}
		if r := g.Do("POST", key+"?uploads", "demo-p0", nil, hdr); r.Status != 200 {
			rt.Fatalf("init: %d %s", r.Status, r.Body)
		}
		reserved := units(expected)
		harness.Eventually(t, 5*time.Second, "init charged", func() bool {
			return g.State("demo-p0").Tokens == 100000-2-reserved
		})
		want := int64(2)
		for i, n := range parts {
			r := g.Do("PUT", key+"?partNumber="+strconv.Itoa(i+1)+"&uploadId=u", "demo-p0",
				strings.NewReader(strings.Repeat("p", n)), nil)
			if r.Status != 200 || r.Cost() != int(4+units(n)) {
				rt.Fatalf("part %d: status %d cost %d", i+1, r.Status, r.Cost())
			}
			want += 4 + units(n)
		}
		end := "POST"
		if abort {
			end, want = "DELETE", want+3
		} else {
			want += 8
		}
		if r := g.Do(end, key+"?uploadId=u", "demo-p0", nil, nil); r.Status != 200 {
			rt.Fatalf("%s: %d", end, r.Status)
		}
		// the reservation is settled in the log phase, after the response: poll for it
		deadline := time.Now().Add(5 * time.Second)
		for {
			st := g.State("demo-p0")
			got := 100000 - st.Tokens
			if got == want && st.PendingCost == want {
				break
			}
			if time.Now().After(deadline) {
				rt.Fatalf("upload of %v announced as %d bytes: lease charged %d, pending %d, want %d",
					parts, expected, got, st.PendingCost, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// A reservation nobody completes is released after the timeout.
func TestReservationExpires(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(map[string]string{"TOLLGATE_RESERVATION_TIMEOUT": "1"})})
	g := s.gw()
	g.T("set?app=demo-p0&tokens=100000", nil)
	r := g.Do("POST", "/b/abandoned?uploads", "demo-p0", nil,
		map[string]string{"X-Tollgate-Expected-Size": strconv.Itoa(100 * 65536)})
	if r.Status != 200 || g.State("demo-p0").Tokens != 100000-2-100 {
		t.Fatalf("init: %d, tokens %d", r.Status, g.State("demo-p0").Tokens)
	}
	eventually(t, "expired reservation released", func() bool {
		return g.State("demo-p0").Tokens == 100000-2 &&
			g.Metric(`ratelimit_reservations_total{result="expired"}`) == 1
	})
}

// Downloads pay an estimate up front (the Range here) and settle it against the bytes sent;
// chunked uploads pay x-amz-decoded-content-length up front and settle against real bytes.
func TestEstimatesSettleAgainstRealBytes(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(nil)})
	g := s.gw()
	g.T("set?app=demo-p0&tokens=100000", nil)
	r := g.Do("GET", "/b/k?size=100", "demo-p0", nil, map[string]string{"Range": "bytes=0-1048575"})
	if r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	eventually(t, "download settled", func() bool {
		st := g.State("demo-p0")
		return st.Tokens == 100000-2 && st.PendingCost == 2 // GET 1 + 1 unit actually sent
	})
	g.T("set?app=demo-p0&tokens=100000", nil)
	r = g.Do("PUT", "/b/chunked", "demo-p0", strings.NewReader(strings.Repeat("c", 200000)),
		map[string]string{"Transfer-Encoding": "chunked", "X-Amz-Decoded-Content-Length": "200000"})
	if r.Status != 200 || r.Cost() != 5 {
		t.Fatalf("chunked upload: status %d, known cost %d (want 5: body size unknown up front)", r.Status, r.Cost())
	}
	eventually(t, "upload settled", func() bool {
		st := g.State("demo-p0")
		return st.Tokens == 100000-9 && st.PendingCost == 9 // PUT 5 + 4 units
	})
}
