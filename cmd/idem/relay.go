package main

import (
	"context"
	"fmt"
	"io"
	"os"

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
	r, closePub, err := server.NewRelay(ctx, cfg, d, log, nil, stdout)
	if err != nil {
		return err
	}
	defer closePub()
	log.Info("idem relay running", "db", d.Dialect(), "publish", storage.Redact(cfg.Publish))
	return r.Run(ctx)
}
