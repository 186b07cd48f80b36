package proc

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// fields 14 and 15 (utime 250, stime 150 ticks) after a command name with ") " inside
	stat := "4242 (ngx ) worker) S 1 4242 4242 0 -1 4194624 100 0 0 0 250 150 0 0 20 0 1 0 " +
		"100 1000 10\n"
	got, err := parseStatCPU(stat)
	if err != nil || got != 4*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 4s", got, err)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Fatal("parseStatCPU accepted a line without ')'")
	}
}

func TestCPUTimeOfSelf(t *testing.T) {
	if _, err := CPUTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := TreeCPUTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
