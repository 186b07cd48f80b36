package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const userHZ = 100

// CPUTime is the user + system CPU time process pid has used so far.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("proc: cpu time: %w", err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a /proc/<pid>/stat line; the
// command name (field 2) may hold spaces and parentheses, so fields count from its last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("proc: malformed stat %q", stat)
	}
	f := strings.Fields(stat[end+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("proc: short stat %q", stat)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc: stat cpu field %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// Children are the PIDs of the direct children of pid (e.g. an nginx master's workers).
func Children(pid int) ([]int, error) {
	p := strconv.Itoa(pid)
	b, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
	if err != nil {
		return nil, fmt.Errorf("proc: children of %d: %w", pid, err)
	}
	var pids []int
	for _, s := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("proc: children of %d: %w", pid, err)
		}
		pids = append(pids, n)
	}
	return pids, nil
}

// TreeCPUTime is the CPU time of pid and its direct children (exited children are not counted).
func TreeCPUTime(pid int) (time.Duration, error) {
	total, err := CPUTime(pid)
	if err != nil {
		return 0, err
	}
	kids, err := Children(pid)
	if err != nil {
		return 0, err
	}
	for _, k := range kids {
		t, err := CPUTime(k)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}
