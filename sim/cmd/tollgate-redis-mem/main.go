// Command tollgate-redis-mem measures Redis memory per app and per active (app, node) lease on
// a private redis-server: apps created through the config store, leases taken through the real
// l2_grant and l3_report scripts (see docs/scale.md, "Redis memory").
//
//	go run ./sim/cmd/tollgate-redis-mem [-apps 100000] [-active 1000] [-nodes 1,2,10,25,50,100]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"tollgate/sim"
)

func main() {
	c := sim.DefaultMemory()
	apps := flag.Int("apps", c.Apps, "apps created through the store")
	active := flag.Int("active", c.Active, "apps that take leases")
	nodes := flag.String("nodes", joinInts(c.Nodes), "lease counts per active app to measure at, increasing")
	flag.Parse()
	c.Apps, c.Active = *apps, *active
	var err error
	if c.Nodes, err = parseInts(*nodes); err != nil {
		fmt.Fprintln(os.Stderr, "tollgate-redis-mem: -nodes:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := sim.MeasureMemory(ctx, c, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tollgate-redis-mem:", err)
		os.Exit(1)
	}
	r.Print(os.Stdout)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
