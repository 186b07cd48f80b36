// Package wrk runs the wrk HTTP load generator and parses its --latency report.
package wrk

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Options of one wrk run.
type Options struct {
	Threads     int
	Connections int
	Duration    time.Duration
	Headers     []string // "Name: value"
	URL         string
}

// Args are wrk's command-line arguments for o.
func (o Options) Args() []string {
	args := []string{"-t" + strconv.Itoa(o.Threads), "-c" + strconv.Itoa(o.Connections),
		"-d" + Seconds(o.Duration), "--latency"}
	for _, h := range o.Headers {
		args = append(args, "-H", h)
	}
	return append(args, o.URL)
}

// Seconds formats d as wrk's duration argument, whole seconds ("10s"), at least 1s.
func Seconds(d time.Duration) string {
	s := int((d + time.Second/2) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.Itoa(s) + "s"
}

// Result is what one run reported.
type Result struct {
	Requests     int64   // completed requests
	ReqPerSec    float64 // Requests/sec
	P50, P99     time.Duration
	Non2xx       int64 // "Non-2xx or 3xx responses" (0 when wrk printed no such line)
	SocketErrors int64 // connect + read + write + timeout
}

// Run runs wrk and parses its output; ctx ending kills wrk.
func Run(ctx context.Context, o Options) (Result, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "wrk", o.Args()...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("wrk %s: %w: %s", strings.Join(o.Args(), " "), err,
			errOut.String())
	}
	r, err := Parse(out.String())
	if err != nil {
		return Result{}, fmt.Errorf("wrk: %w\n%s", err, out.String())
	}
	return r, nil
}

var (
	reRequests = regexp.MustCompile(`(?m)^\s*(\d+) requests in `)
	reRPS      = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	reP50      = regexp.MustCompile(`(?m)^\s+50%\s+([0-9.]+)(us|ms|s|m)\s*$`)
	reP99      = regexp.MustCompile(`(?m)^\s+99%\s+([0-9.]+)(us|ms|s|m)\s*$`)
	reNon2xx   = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses:\s+(\d+)`)
	reSocket   = regexp.MustCompile(
		`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// Parse reads wrk's --latency output.
func Parse(out string) (Result, error) {
	var r Result
	var err error
	if r.Requests, err = intOf(reRequests, out, "requests"); err != nil {
		return Result{}, err
	}
	m := reRPS.FindStringSubmatch(out)
	if m == nil {
		return Result{}, fmt.Errorf("no Requests/sec line")
	}
	if r.ReqPerSec, err = strconv.ParseFloat(m[1], 64); err != nil {
		return Result{}, fmt.Errorf("Requests/sec: %w", err)
	}
	if r.P50, err = latency(reP50, out, "50%"); err != nil {
		return Result{}, err
	}
	if r.P99, err = latency(reP99, out, "99%"); err != nil {
		return Result{}, err
	}
	if reNon2xx.MatchString(out) {
		if r.Non2xx, err = intOf(reNon2xx, out, "non-2xx"); err != nil {
			return Result{}, err
		}
	}
	if m := reSocket.FindStringSubmatch(out); m != nil {
		for _, f := range m[1:] {
			n, _ := strconv.ParseInt(f, 10, 64) // digits only by the pattern
			r.SocketErrors += n
		}
	}
	return r, nil
}

func intOf(re *regexp.Regexp, out, what string) (int64, error) {
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no %s line", what)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

func latency(re *regexp.Regexp, out, what string) (time.Duration, error) {
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no %s latency line", what)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%s latency: %w", what, err)
	}
	unit := map[string]time.Duration{
		"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute,
	}[m[2]]
	return time.Duration(math.Round(v * float64(unit))), nil
}
