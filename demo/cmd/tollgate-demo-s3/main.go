// Command tollgate-demo-s3 is the in-memory S3-like storage backend of tollgate's demo.
// Environment: TOLLGATE_BACKEND_ADDR (default 127.0.0.1:9000).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"tollgate/demo/s3"
	"tollgate/internal/version"
)

const (
	envAddr         = "TOLLGATE_BACKEND_ADDR"
	defaultAddr     = "127.0.0.1:9000"
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

func run(log *slog.Logger) error {
	addr := os.Getenv(envAddr)
	if addr == "" {
		addr = defaultAddr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{
		Addr:              addr,
		Handler:           s3.New(s3.Options{}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("tollgate-demo-s3 listening", "addr", addr,
		"max_object_bytes", s3.DefaultMaxObjectSize, "max_total_bytes", s3.DefaultMaxTotalSize)
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	shCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shCtx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped")
	return nil
}
