package wrk

import (
	"testing"
	"time"
)

const okOutput = `Running 10s test @ http://127.0.0.1:18999/bucket/obj
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.20ms    1.05ms  31.83ms   88.15%
    Req/Sec    14.75k     1.02k   17.21k    71.00%
  Latency Distribution
     50%    2.04ms
     75%    2.47ms
     90%    3.03ms
     99%    5.95ms
  293542 requests in 10.00s, 359.14MB read
Requests/sec:  29343.34
Transfer/sec:     35.90MB
`

const badOutput = `Running 1s test @ http://127.0.0.1:18999/x
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   303.91us  690.88us   8.11ms   92.41%
    Req/Sec    57.16k    28.45k  145.59k    76.19%
  Latency Distribution
     50%   52.00us
     75%  229.00us
     90%  579.00us
     99%    1.20s
  119380 requests in 1.10s, 35.07MB read
  Socket errors: connect 0, read 2, write 0, timeout 5
  Non-2xx or 3xx responses: 119380
Requests/sec: 108991.38
Transfer/sec:     32.01MB
`

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		out  string
		want Result
	}{
		{"ok", okOutput, Result{Requests: 293542, ReqPerSec: 29343.34,
			P50: 2040 * time.Microsecond, P99: 5950 * time.Microsecond}},
		{"errors", badOutput, Result{Requests: 119380, ReqPerSec: 108991.38,
			P50: 52 * time.Microsecond, P99: 1200 * time.Millisecond, Non2xx: 119380,
			SocketErrors: 7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.out)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("Parse = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseRejectsTruncatedOutput(t *testing.T) {
	if _, err := Parse(okOutput[:200]); err == nil {
		t.Fatal("Parse accepted output without a Requests/sec line")
	}
}

func TestArgs(t *testing.T) {
	o := Options{Threads: 2, Connections: 64, Duration: 10 * time.Second,
		Headers: []string{"X-App-Id: bench"}, URL: "http://h/o"}
	want := "-t2 -c64 -d10s --latency -H X-App-Id: bench http://h/o"
	got := ""
	for i, a := range o.Args() {
		if i > 0 {
			got += " "
		}
		got += a
	}
	if got != want {
		t.Fatalf("Args = %q, want %q", got, want)
	}
}
