package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/bench/internal/nginxenv"
)

// The shared-dict budgets of docs/scale.md ("Sizing the shared dicts"), as bytes per app. The
// benchmark sizes config_dict by this formula for its N apps and checks what the node really
// used against each budget.
const (
	configPerApp   = 512 // config_dict: bytes per configured app (ids up to ~30 characters: 256)
	configHeadroom = 1.25
	configFixed    = 1 << 20 // rules, breakers, clusters, bookkeeping
)

// activeBudget is each per-active-app zone's documented bytes per app with traffic on the node.
var activeBudget = []struct {
	zone  string
	bytes float64
}{
	{"ratelimit", 2.5 * 1024},
	{"tollgate_active", 128},
	{"connlimit_dict", 1024},
	{"tollgate_metrics", 4 * 1024},
}

// configDictSize is config_dict's size for n apps by the docs' formula, in MiB (nginx "Nm"),
// never below the 10m of nginx/tollgate_http.conf.
func configDictSize(n int) int {
	b := float64(n)*configPerApp*configHeadroom + configFixed
	return max(10, int(math.Ceil(b/(1<<20))))
}

// zoneUse is what the node's zones hold: config_dict per configured app, and per app with
// traffic the growth of each per-active-app zone.
type zoneUse struct {
	configUsed    float64 // bytes of config_dict in use (capacity less free pages)
	configPerApp  float64 // of which per configured app, the fixed part left out
	configPartial float64 // ratelimit_config_dict_partial after the load (0: every app held)
	active        int     // apps given traffic
	perActive     map[string]float64
}

func zoneUsed(ctx context.Context, node *nginxenv.Node, zone string) float64 {
	sel := `{zone="` + zone + `"}`
	return scrape(ctx, node.MetricsURL, "ratelimit_shm_capacity_bytes"+sel) -
		scrape(ctx, node.MetricsURL, "ratelimit_shm_free_bytes"+sel)
}

// measureZones reads config_dict's use after the load, then gives `active` apps a few requests
// each (16 clients) and reads how much each per-active-app zone grew, per app.
func measureZones(ctx context.Context, o options, node *nginxenv.Node, n, active int) zoneUse {
	u := zoneUse{active: active, perActive: map[string]float64{}}
	u.configUsed = zoneUsed(ctx, node, "config_dict")
	u.configPerApp = (u.configUsed - configFixed) / float64(n)
	u.configPartial = scrape(ctx, node.MetricsURL, "ratelimit_config_dict_partial")
	before := map[string]float64{}
	for _, z := range activeBudget {
		before[z.zone] = zoneUsed(ctx, node, z.zone)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > active {
					return
				}
				for k := 0; k < 3; k++ {
					get(ctx, node.URL(), appID(i))
				}
			}
		}()
	}
	wg.Wait()
	// worker 0's sync tick books the leases' state: let one report interval pass, twice
	time.Sleep(300 * time.Millisecond)
	for _, z := range activeBudget {
		u.perActive[z.zone] = (zoneUsed(ctx, node, z.zone) - before[z.zone]) / float64(active)
	}
	o.logf("%d apps: config_dict %.0f B per app used; %d active apps: %v", n, u.configPerApp,
		active, u.perActive)
	return u
}

// zoneRows are the table's lines for the zones: measured against the documented budget.
func zoneRows(line func(string, func(r row) string)) {
	line(fmt.Sprintf("config_dict used (budget apps × %d B + 1 MiB)", configPerApp), func(r row) string {
		budget := float64(r.apps)*configPerApp + configFixed
		verdict := "within"
		if r.zones.configUsed > budget {
			verdict = "OVER"
		}
		return fmt.Sprintf("%s of %s (%s), apps not held %.0f", mib1(r.zones.configUsed), mib1(budget),
			verdict, r.zones.configPartial)
	})
	line("config_dict per app beyond the first MiB (from 10,000 apps)", func(r row) string {
		if r.apps < 10000 { // the fixed part is most of the zone: no per-app figure
			return "–"
		}
		return fmt.Sprintf("%.0f B", r.zones.configPerApp)
	})
	for _, z := range activeBudget {
		z := z
		line(fmt.Sprintf("%s per active app (budget %.0f B)", z.zone, z.bytes), func(r row) string {
			return within(r.zones.perActive[z.zone], z.bytes)
		})
	}
}

func mib1(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func within(v, budget float64) string {
	verdict := "within"
	if v > budget {
		verdict = "OVER"
	}
	return fmt.Sprintf("%.0f B (%s)", v, verdict)
}
