// Package nginxenv renders and runs the benchmark's nginx variants: each its own prefix, ports
// and master with 2 workers, with a storage backend server block in the same nginx.
package nginxenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"tollgate/bench/internal/proc"
)

const (
	readyTimeout = 15 * time.Second
	stopGrace    = 10 * time.Second
	pollEvery    = 20 * time.Millisecond
	// AppHeader carries the app id on every benchmark request.
	AppHeader = "X-App-Id"
)

// Options start one variant.
type Options struct {
	Variant  Variant
	Repo     string
	Prefix   string
	Workers  int
	RedisURL string // tollgate variants
	NodeID   string // tollgate variants
	AppID    string // value of the app header
	// ReadyTimeout bounds the wait for a loaded config and a proxied request (default 15 s;
	// the scale benchmark's nodes load 100,000 apps)
	ReadyTimeout time.Duration
	// Backend is the address (host:port) of an external storage backend the variant proxies to
	// (default: a server block in the same nginx, serving the benchmark's object)
	Backend string
	// Zones sizes shared dicts of a tollgate variant (zone → nginx size, e.g. "config_dict":
	// "64m"); the others keep nginx/tollgate_http.conf's sizes
	Zones map[string]string
}

// Node is one running nginx.
type Node struct {
	Variant Variant
	BaseURL string // http://127.0.0.1:port
	// MetricsURL is the base URL of a tollgate variant's /health and /metrics
	MetricsURL string
	// BackendURL is the base URL of the storage backend server block in the same nginx
	BackendURL string
	Prefix     string
	app        string
	p          *proc.Process
	client     *http.Client
	ready      time.Duration
}

// Start renders the variant into o.Prefix, starts nginx and waits until it proxies a request
// (tollgate variants first until /health reports a loaded config).
func Start(ctx context.Context, o Options) (*Node, error) {
	listen, err := proc.FreePort()
	if err != nil {
		return nil, fmt.Errorf("nginxenv: %w", err)
	}
	backendAddr := o.Backend
	if backendAddr == "" {
		backend, err := proc.FreePort()
		if err != nil {
			return nil, fmt.Errorf("nginxenv: %w", err)
		}
		backendAddr = "127.0.0.1:" + strconv.Itoa(backend)
	}
	metrics, err := proc.FreePort()
	if err != nil {
		return nil, fmt.Errorf("nginxenv: %w", err)
	}
	conf, err := Render(o.Variant, Layout{
		Prefix: o.Prefix, Repo: o.Repo, Workers: o.Workers, LogLevel: "warn",
		Listen:        "127.0.0.1:" + strconv.Itoa(listen),
		MetricsListen: "127.0.0.1:" + strconv.Itoa(metrics),
		Backend:       backendAddr, ExternalBackend: o.Backend != "",
	})
	if err != nil {
		return nil, err
	}
	if o.Variant.Tollgate() {
		if err := sizeZones(o.Prefix, o.Repo, conf, o.Zones); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command("nginx", "-p", o.Prefix, "-c", conf)
	cmd.Env = os.Environ()
	if o.Variant.Tollgate() {
		cmd.Env = append(cmd.Env, "TOLLGATE_REDIS_URL="+o.RedisURL,
			"TOLLGATE_NODE_ID="+o.NodeID, "TOLLGATE_LIMITER_MODE="+o.Variant.Mode())
	}
	p, err := proc.Start("nginx "+o.Variant.Name, cmd)
	if err != nil {
		return nil, fmt.Errorf("nginxenv: %w", err)
	}
	n := &Node{
		Variant: o.Variant, BaseURL: "http://127.0.0.1:" + strconv.Itoa(listen),
		MetricsURL: "http://127.0.0.1:" + strconv.Itoa(metrics),
		BackendURL: "http://" + backendAddr,
		Prefix:     o.Prefix, app: o.AppID, p: p,
		client: &http.Client{Timeout: 2 * time.Second},
		ready:  o.ReadyTimeout,
	}
	if n.ready <= 0 {
		n.ready = readyTimeout
	}
	if err := n.waitReady(ctx); err != nil {
		n.Stop()
		return nil, fmt.Errorf("%w\n%s", err, n.ErrorLog())
	}
	return n, nil
}

// URL is the URL every benchmark request fetches.
func (n *Node) URL() string { return n.BaseURL + ObjectPath }

// PID of the nginx master.
func (n *Node) PID() int { return n.p.PID() }

// CPU is the CPU time the master and its workers have used so far.
func (n *Node) CPU() (time.Duration, error) {
	t, err := proc.TreeCPUTime(n.PID())
	if err != nil {
		return 0, fmt.Errorf("nginxenv: %w", err)
	}
	return t, nil
}

// Stop shuts nginx down (SIGTERM, fast shutdown: a graceful SIGQUIT waits seconds for the
// gateway's config subscriber), killing its process group after a grace period.
func (n *Node) Stop() {
	n.client.CloseIdleConnections()
	n.p.Stop(syscall.SIGTERM, stopGrace)
}

// ErrorLog is the content of the node's error.log.
func (n *Node) ErrorLog() string {
	b, err := os.ReadFile(n.Prefix + "/logs/error.log")
	if err != nil {
		return "(no error.log: " + err.Error() + ")"
	}
	return string(b)
}

// Probe fetches the object once and describes the answer (for reports of failed requests).
func (n *Node) Probe(ctx context.Context) string {
	body, status, err := n.get(ctx, n.URL(), true)
	if err != nil {
		return err.Error()
	}
	if status == http.StatusOK {
		return "a probe now gets 200 (the failures were transient)"
	}
	return fmt.Sprintf("a probe now gets %d: %.300s", status, body)
}

func (n *Node) waitReady(ctx context.Context) error {
	if n.Variant.Tollgate() {
		if err := n.p.Poll(ctx, n.ready, pollEvery, n.configLoaded); err != nil {
			return fmt.Errorf("nginxenv: %s: /health: %w", n.Variant.Name, err)
		}
	}
	if err := n.p.Poll(ctx, n.ready, pollEvery, n.proxies); err != nil {
		return fmt.Errorf("nginxenv: %s: %s: %w", n.Variant.Name, ObjectPath, err)
	}
	return nil
}

func (n *Node) configLoaded(ctx context.Context) (bool, error) {
	body, status, err := n.get(ctx, n.MetricsURL+"/health", false)
	if err != nil {
		return false, err
	}
	var h struct {
		ConfigVersion *int64 `json:"config_version"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return false, fmt.Errorf("health is not JSON: %w", err)
	}
	return status == http.StatusOK && h.ConfigVersion != nil, nil
}

func (n *Node) proxies(ctx context.Context) (bool, error) {
	body, status, err := n.get(ctx, n.URL(), true)
	if err != nil {
		return false, err
	}
	if status != http.StatusOK || len(body) != ObjectSize {
		return false, fmt.Errorf("status %d, %d bytes: %.200s", status, len(body), body)
	}
	return true, nil
}

func (n *Node) get(ctx context.Context, url string, withApp bool) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("nginxenv: %w", err)
	}
	if withApp {
		req.Header.Set(AppHeader, n.app)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("nginxenv: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("nginxenv: GET %s: %w", url, err)
	}
	return body, resp.StatusCode, nil
}
