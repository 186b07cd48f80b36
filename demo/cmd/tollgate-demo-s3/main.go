// Command tollgate-demo-s3 is the in-memory S3 storage backend of tollgate's demo (gofakes3 with
// signature checks, aws-chunked uploads, UploadPartCopy and a failure switch).
//
// Environment:
//
//	TOLLGATE_BACKEND_ADDR        storage API (default 127.0.0.1:9000)
//	TOLLGATE_BACKEND_ADMIN_ADDR  the failure switch (/_demo/fail, /_demo/heal); a loopback
//	                             address, never the one a gateway proxies to (unset: no switch)
//	TOLLGATE_DEMO_CREDENTIALS    access keys the backend accepts: "AKID:SECRET[,AKID:SECRET…]"
//	                             (unset: only anonymous requests are served; signed ones get
//	                             403 InvalidAccessKeyId)
//	TOLLGATE_S3_DOMAINS          comma-separated domains of virtual-hosted style
//	                             (<bucket>.<domain>); default s3.localhost
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tollgate/demo/s3"
	"tollgate/internal/version"
)

const (
	envAddr         = "TOLLGATE_BACKEND_ADDR"         // listen address of the S3 API (127.0.0.1:9000; host:port)
	envAdminAddr    = "TOLLGATE_BACKEND_ADMIN_ADDR"   // listen address of the failure switch /_demo/fail, /_demo/heal (none: off; a loopback host:port)
	envCredentials  = "TOLLGATE_DEMO_CREDENTIALS"     // access keys and secrets whose signatures are checked (none: anonymous requests only; AKID:SECRET,…)
	envDomains      = "TOLLGATE_S3_DOMAINS"           // domains of virtual-hosted addressing, bucket.<domain> (s3.localhost; comma list)
	envMaxObject    = "TOLLGATE_DEMO_MAX_OBJECT_SIZE" // largest object or part kept, in bytes (64 MiB; objects live in memory)
	defaultAddr     = "127.0.0.1:9000"
	defaultDomains  = "s3.localhost"
	shutdownTimeout = 10 * time.Second
)

func main() {
	if len(os.Args) > 1 {
		if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
			fmt.Println(version.String("tollgate-demo-s3"))
			return
		}
		fmt.Fprintln(os.Stderr, "usage: tollgate-demo-s3 [--version] (address from TOLLGATE_BACKEND_ADDR)")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("tollgate-demo-s3 stopped", "err", err)
		os.Exit(1)
	}
}

// parseCredentials reads "AKID:SECRET,…"; every entry needs both parts.
func parseCredentials(v string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(v) == "" {
		return out, nil
	}
	for i, e := range strings.Split(v, ",") {
		k, sec, ok := strings.Cut(strings.TrimSpace(e), ":")
		if !ok || k == "" || sec == "" || strings.ContainsAny(k, "/ \t") {
			return nil, fmt.Errorf("%s: entry %d is not AKID:SECRET", envCredentials, i+1)
		}
		out[k] = sec
	}
	return out, nil
}

func loopbackAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %w", envAdminAddr, err)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" {
		return fmt.Errorf("%s must be a loopback address, not %q", envAdminAddr, addr)
	}
	return nil
}

func run(log *slog.Logger) error {
	addr := os.Getenv(envAddr)
	if addr == "" {
		addr = defaultAddr
	}
	creds, err := parseCredentials(os.Getenv(envCredentials))
	if err != nil {
		return err
	}
	domains := os.Getenv(envDomains)
	if domains == "" {
		domains = defaultDomains
	}
	var ds []string
	for _, d := range strings.Split(domains, ",") {
		if d = strings.Trim(strings.TrimSpace(d), "."); d != "" {
			ds = append(ds, d)
		}
	}
	maxObject := s3.DefaultMaxObjectSize
	if v := os.Getenv(envMaxObject); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s: %q is not a positive number of bytes", envMaxObject, v)
		}
		maxObject = n
	}
	backend := s3.New(s3.Options{Credentials: creds, Domains: ds, MaxObjectSize: maxObject})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	servers := []*http.Server{{Addr: addr, Handler: backend, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}}
	if admin := os.Getenv(envAdminAddr); admin != "" {
		if err := loopbackAddr(admin); err != nil {
			return err
		}
		servers = append(servers, &http.Server{Addr: admin, Handler: backend.Admin(), ReadHeaderTimeout: 10 * time.Second})
	}
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errc <- srv.ListenAndServe() }()
	}
	log.Info("tollgate-demo-s3 listening", "addr", addr, "admin_addr", os.Getenv(envAdminAddr),
		"access_keys", len(creds), "domains", ds, "max_object_bytes", maxObject)
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	shCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shCtx); err != nil {
			return fmt.Errorf("http shutdown: %w", err)
		}
	}
	for range servers {
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
	}
	log.Info("stopped")
	return nil
}
