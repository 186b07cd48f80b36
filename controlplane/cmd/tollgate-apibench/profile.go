package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
)

// rss is "  rss X MiB, peak Y MiB" of process pid from /proc (empty for pid 0 or no such process).
func rss(pid int) string {
	if pid == 0 {
		return ""
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	kb := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "VmRSS" || k == "VmHWM") {
			n, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			kb[k] = n
		}
	}
	return fmt.Sprintf("  rss %.0f MiB, peak %.0f MiB", kb["VmRSS"]/1024, kb["VmHWM"]/1024)
}

// startProfiles starts the profiles o asks for; the returned func writes them.
func startProfiles(o options) (func() error, error) {
	var cpu *os.File
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		cpu = f
	}
	if o.blockProf != "" {
		runtime.SetBlockProfileRate(int(1e6)) // one sample per ms blocked
	}
	if o.mutexProf != "" {
		runtime.SetMutexProfileFraction(5)
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		for _, p := range []struct{ name, file string }{{"block", o.blockProf}, {"mutex", o.mutexProf}} {
			if p.file == "" {
				continue
			}
			f, err := os.Create(p.file)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, pprof.Lookup(p.name).WriteTo(f, 0), f.Close())
		}
		return errors.Join(errs...)
	}, nil
}
