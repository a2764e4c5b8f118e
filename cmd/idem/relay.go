package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/idemhq/idem/internal/storage"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/broker"
)

func relay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", envDefault("IDEM_DB", ""), "database URL (env IDEM_DB; default SQLite in ./idem-data/)")
	publish := fs.String("publish", envDefault("IDEM_PUBLISH", ""), "broker: nats://…, kafka://…, http(s)://…, stdout (env IDEM_PUBLISH; default embedded NATS in ./idem-data/nats)")
	secret := fs.String("webhook-secret", envDefault("IDEM_WEBHOOK_SECRET", ""), "whsec_… secret signing webhooks (env IDEM_WEBHOOK_SECRET)")
	lease := fs.Duration("lease", 30*time.Second, "shard lease TTL: how long a crashed relay's rows wait for another (1s..10m)")
	poll := fs.Duration("poll", 100*time.Millisecond, "poll interval for rows committed by other processes (1ms..1m)")
	batch := fs.Int("batch", 1000, "rows per publish cycle (1..10000)")
	attempts := fs.Int("max-attempts", 10, "refusals before a message becomes a dead letter (1..1000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	d, err := storage.Open(ctx, *db)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	pub, err := broker.Open(ctx, *publish, broker.Options{
		DataDir: filepath.Join(storage.DefaultDir, "nats"), WebhookSecret: *secret, Stdout: stdout})
	if err != nil {
		return err
	}
	defer pub.Close()
	r, err := outbox.NewRelay(d, outbox.RelayConfig{
		Publisher: pub, LeaseTTL: *lease, PollInterval: *poll, BatchSize: *batch,
		MaxAttempts: *attempts, Logger: log,
	})
	if err != nil {
		return err
	}
	log.Info("idem relay running", "db", d.Dialect())
	return r.Run(ctx)
}
