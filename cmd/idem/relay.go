package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/server"
	"github.com/idemhq/idem/internal/storage"
)

// relay runs the outbox relay alone, for deployments that run it apart from
// serve (serve --relay=false): any number of relay processes may share one
// database; shard leases keep them from publishing the same message.
func relay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := config.Load("relay", args, os.Getenv, config.RelaySettings...)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	d, err := storage.Open(ctx, cfg.DB)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	reg := prometheus.NewRegistry()
	r, closePub, err := server.NewRelay(ctx, cfg, d, log, reg, stdout)
	if err != nil {
		return err
	}
	defer closePub()
	if cfg.MetricsAddr != "" {
		stop, err := serveOps(cfg.MetricsAddr, d, reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("idem relay running", "db", d.Dialect(), "publish", storage.Redact(cfg.Publish))
	return r.Run(ctx)
}

// serveOps answers /healthz, /readyz and /metrics on addr until the returned
// func stops it: without them a relay is invisible to Prometheus and to a
// container's health check.
func serveOps(addr string, d driver.Driver, reg *prometheus.Registry, log *slog.Logger) (func(), error) {
	h, err := server.OpsHandler(d, reg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("idem relay: metrics listener stopped", "err", err)
		}
	}()
	log.Info("idem relay listening", "addr", ln.Addr().String(), "paths", "/healthz /readyz /metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
