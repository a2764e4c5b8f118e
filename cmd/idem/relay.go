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

	"github.com/idemhq/idem/cmd/idem/internal/broker"
	"github.com/idemhq/idem/cmd/idem/internal/server"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/storage"
	"github.com/idemhq/idem/outbox"
)

// relay runs the outbox relay alone, for deployments that run it apart from
// serve (serve --relay=false): any number of relay processes may share one
// database; shard leases keep them from publishing the same message. With
// --metrics-addr it serves /metrics, /healthz and /readyz there.
func relay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := config.Load("relay", args, os.Getenv, config.RelaySettings...)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	stopTracing, err := setupTracing(ctx, os.Getenv, log)
	if err != nil {
		return err
	}
	defer stopTracing() // after the relay stopped
	d, err := storage.OpenServing(ctx, cfg.DB, storage.Limits{
		Timeout: cfg.DBTimeout, ConnectTimeout: cfg.DBConnectTimeout, Logger: log})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer d.Close()
	if err := storage.Prepare(ctx, d, cfg.Migrate); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	// The Sealer opens the outbox payloads serve sealed, before they are
	// published: brokers receive what they would without encryption. Nil
	// without --encryption-key-file.
	if cfg.Sealer, err = openSealer(ctx, cfg, d, log); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	// reg stays a nil interface without --metrics-addr: the relay then
	// registers no metrics.
	var reg prometheus.Registerer
	var gatherer prometheus.Gatherer
	var ln net.Listener
	if cfg.MetricsAddr != "" {
		r := prometheus.NewRegistry()
		reg, gatherer = r, r
		if err := server.RegisterProcessMetrics(reg, d); err != nil {
			return err
		}
		// Listen before the relay starts, so a taken port stops the
		// process at once instead of leaving it running unwatched.
		if ln, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics-addr: %w", err)
		}
		defer ln.Close()
	}
	r, closePub, err := server.NewRelay(ctx, cfg, d, log, reg, stdout)
	if err != nil {
		return err
	}
	defer closePub()
	if ln != nil {
		stop := serveOps(ln, d, gatherer, log, r.Relay)
		defer stop()
		log.Info("idem relay metrics", "addr", ln.Addr().String())
	}
	log.Info("idem relay running", "db", d.Dialect(), "publish", broker.Redact(cfg.Publish),
		"encryption", encryptionMode(cfg.Sealer))
	return r.Run(ctx)
}

// serveOps serves /metrics, /healthz and /readyz on ln (--metrics-addr of
// relay and serve) until the returned stop is called.
func serveOps(ln net.Listener, d driver.Driver, g prometheus.Gatherer, log *slog.Logger, relay *outbox.Relay) (stop func()) {
	srv := &http.Server{
		Handler:           server.OpsHandler(d, g, log, relay),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("idem: metrics server stopped", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}
