package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/cmd/idem/internal/server"
	"github.com/idemhq/idem/internal/benchknob"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/storage"
)

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := config.Load("serve", args, os.Getenv, config.ServeSettings...)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	if bad := benchknob.Unknown(); len(bad) > 0 {
		return fmt.Errorf("IDEM_BENCH_OFF: unknown mechanism %s (known: %s)", strings.Join(bad, ", "), strings.Join(benchknob.Names, ", "))
	}
	if os.Getenv("IDEM_BENCH_OFF") != "" {
		log.Warn("idem: hot-path mechanisms turned off for a benchmark", "IDEM_BENCH_OFF", os.Getenv("IDEM_BENCH_OFF"))
	}
	stopTracing, err := setupTracing(ctx, os.Getenv, log)
	if err != nil {
		return err
	}
	defer stopTracing() // after the server and its relay stopped

	// Bind before anything is created: a taken port stops serve before it
	// makes ./idem-data, a database or the embedded NATS store. Connections
	// that arrive while the database is opened and migrated wait in the
	// listen backlog.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("addr: %w", err)
	}
	defer ln.Close()
	var opsLn net.Listener
	if cfg.MetricsAddr != "" {
		if opsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics-addr: %w", err)
		}
		defer opsLn.Close()
	}
	var debugLn net.Listener
	if cfg.DebugAddr != "" {
		if debugLn, err = net.Listen("tcp", cfg.DebugAddr); err != nil {
			return fmt.Errorf("debug-addr: %w", err)
		}
		defer debugLn.Close()
	}

	d, err := storage.OpenServing(ctx, cfg.DB, storage.Limits{
		Timeout: cfg.DBTimeout, ConnectTimeout: cfg.DBConnectTimeout, Logger: log})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer d.Close()
	// The command's name leads: "migrate" alone would read as idem migrate.
	if err := storage.Prepare(ctx, d, cfg.Migrate); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	// The Sealer encrypts what the server stores at rest: the keeper's
	// answers, outbox payloads, webhook deliveries' copies of them and,
	// through its keeper and outbox, the webhook intake's. It is nil
	// without --encryption-key-file, and records are then stored as they
	// are. A key file that cannot open the database's data keys stops serve
	// here, before it answers anything.
	if cfg.Sealer, err = openSealer(ctx, cfg, d, log); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	reg := prometheus.NewRegistry()
	srv, err := server.New(ctx, cfg, d, log, reg)
	if err != nil {
		return err
	}
	if opsLn != nil {
		stop := serveOps(opsLn, d, reg, log, srv.Relay())
		defer stop()
		log.Info("idem metrics", "addr", opsLn.Addr().String())
	}
	if debugLn != nil {
		stop := serveDebug(debugLn, cfg.AdminKeyHash, log)
		defer stop()
		log.Info("idem profiler", "addr", debugLn.Addr().String())
	}
	log.Info("idem serving", "addr", ln.Addr().String(), "db", d.Dialect(), "tenants", tenantMode(cfg),
		"encryption", encryptionMode(cfg.Sealer))
	return srv.Run(ctx, ln)
}

func tenantMode(cfg config.Config) string {
	if len(cfg.APIKeys) == 0 {
		return "default (no API keys)"
	}
	return fmt.Sprintf("%d API keys", len(cfg.APIKeys))
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
