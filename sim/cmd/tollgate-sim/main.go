// Command tollgate-sim runs the deterministic simulator of tollgate's token economy and prints
// its table (see sim/README.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"tollgate/sim"
)

func main() {
	c := sim.Default()
	quick := flag.Bool("quick", false, "the small run of go test (10 nodes x 60 apps, 24 s)")
	nodes := flag.Int("nodes", c.Nodes, "gateway nodes")
	apps := flag.Int("apps", c.Apps, "apps")
	dur := flag.Duration("duration", c.Duration, "virtual duration")
	step := flag.Duration("step", c.Step, "virtual time step")
	seed := flag.Uint64("seed", c.Seed, "random seed")
	capacity := flag.Int64("capacity", c.Capacity, "cluster capacity, tokens/s")
	active := flag.Float64("active", c.Active, "fraction of the apps that carry traffic (the top-ranked ones)")
	scanAll := flag.Bool("scan-all", false, "visit idle apps every step too (same results, slower)")
	loss := flag.Float64("push-loss", c.PushLoss, "fraction of nodes that miss the emergency push")
	flag.Parse()
	if *quick {
		c = sim.Quick()
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["nodes"] {
		c.Nodes = *nodes
	}
	if set["apps"] {
		c.Apps = *apps
	}
	if set["duration"] {
		c.Duration = *dur
	}
	if set["step"] {
		c.Step = *step
	}
	if set["seed"] {
		c.Seed = *seed
	}
	if set["capacity"] {
		c.Capacity = *capacity
	}
	if set["active"] {
		c.Active = *active
	}
	c.ScanAll = *scanAll
	if set["push-loss"] {
		c.PushLoss = *loss
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := sim.Run(ctx, c, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tollgate-sim:", err)
		os.Exit(1)
	}
	r.Print(os.Stdout)
	if miss := r.Goals(); len(miss) > 0 {
		fmt.Println("\ngoals missed:")
		for _, m := range miss {
			fmt.Println("-", m)
		}
	}
}
