package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The JSON line gives every variant but (a) by its key, over (a) without the timers and the
// Redis replies of either.
func TestJSONLine(t *testing.T) {
	rows := []row{
		{key: "a", total: 50000, tmrs: 1000, reply: 500},
		{key: "b", total: 70000, tmrs: 3000, reply: 1500},
		{key: "r10", total: 74000.4, tmrs: 3000, reply: 1500},
		{key: "d", total: 51000},
		{key: "e", total: 53500, tmrs: 1000, reply: 500},
	}
	var keys []string
	var figs []float64
	for _, rw := range rows[1:] {
		keys, figs = append(keys, rw.key), append(figs, rw.over(rows[0]))
	}
	b, err := jsonLine(keys, figs)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"b": 17000, "r10": 21000, "d": 2500, "e": 3500}`
	if string(b) != want {
		t.Fatalf("jsonLine = %s, want %s", b, want)
	}
}

// The figure of several runs is their median (the lower middle one of an even count).
func TestMedianIndex(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want int
	}{
		{[]float64{5}, 0},
		{[]float64{30, 10, 20}, 2},
		{[]float64{40, 10, 30, 20}, 3},
	} {
		if got := medianIndex(c.xs); got != c.want {
			t.Fatalf("medianIndex(%v) = %d, want %d", c.xs, got, c.want)
		}
	}
}

// countJIT counts jit.v's compiled traces, aborts and flushes, nothing else.
func TestCountJIT(t *testing.T) {
	log := "[TRACE   1 access.lua:10 loop]\n" +
		"[TRACE --- access.lua:40 -- leaving loop in root trace at headers.lua:30]\n" +
		"[TRACE   2 (1/3) headers.lua:30 -> 1]\n" +
		"[TRACE 123 identity.lua:7 -- fallback to interpreter]\n" +
		"[TRACE --- (2/1) log.lua:5 -- NYI: FastFunc ngx.var]\n" +
		"[TRACE flush]\n" +
		"not a trace line [TRACE   9 x.lua:1 loop]\n"
	path := filepath.Join(t.TempDir(), "jit.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := countJIT(path)
	if err != nil {
		t.Fatal(err)
	}
	if c != (jitCounts{traces: 3, aborts: 2, flushes: 1}) {
		t.Fatalf("countJIT = %+v, want 3 traces, 2 aborts, 1 flush", c)
	}
}

// replyCost sums the Lua module's handlers that the unnamed event loop calls (the cosocket
// handlers), not the Lua module's functions the timers or the request phases call, and not a
// function of another object that has the event loop's address.
func TestReplyCost(t *testing.T) {
	tree := `238,495,540 (99.91%)  *  ???:ngx_process_events_and_timers [/usr/sbin/nginx]
226,721,343 (94.98%)  >   ???:0x0000000000054130 (12,019x) [/usr/sbin/nginx]
 10,749,404 ( 4.50%)  >   ???:ngx_event_expire_timers (12,019x) [/usr/sbin/nginx]

226,721,343 (94.98%)  *  ???:0x0000000000054130 [/usr/sbin/nginx]
134,684,088 (56.42%)  >   ???:0x0000000000071830 (8,000x) [/usr/sbin/nginx]
  2,142,121 ( 0.90%)  >   ???:0x0000000000031d20 (56x) [/usr/lib/nginx/modules/ngx_http_lua_module.so]
         96 ( 0.00%)  >   ???:0x0000000000031b20 (24x) [/usr/lib/nginx/modules/ngx_http_lua_module.so]

 10,749,404 ( 4.50%)  *  ???:ngx_event_expire_timers [/usr/sbin/nginx]
  9,000,000 ( 3.77%)  >   ???:0x0000000000032000 (20x) [/usr/lib/nginx/modules/ngx_http_lua_module.so]

  5,000,000 ( 2.00%)  *  ???:0x0000000000054130 [/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2.1.0]
  4,000,000 ( 1.00%)  >   ???:0x0000000000031d20 (9x) [/usr/lib/nginx/modules/ngx_http_lua_module.so]
`
	if got := replyCost(tree); got != 2142217 {
		t.Fatalf("replyCost = %.0f, want 2142217", got)
	}
}
