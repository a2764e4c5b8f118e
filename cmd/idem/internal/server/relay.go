package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/cmd/idem/internal/broker"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/storage"
	"github.com/idemhq/idem/outbox"
)

// natsDir is where the embedded NATS server keeps its data: beside an
// explicit SQLite file (PATH.nats), else ./idem-data/nats.
func natsDir(db string) string {
	for _, prefix := range []string{"sqlite:", "file:"} {
		if path, ok := strings.CutPrefix(db, prefix); ok && path != "" {
			return strings.TrimPrefix(path, "//") + ".nats"
		}
	}
	return filepath.Join(storage.DefaultDir, "nats")
}

// NewRelay opens the publisher cfg.Publish names and a relay on d. The
// returned func closes the publisher (and an embedded NATS server) once the
// relay has stopped. stdout receives the stdout publisher's lines.
func NewRelay(ctx context.Context, cfg config.Config, d driver.Driver, log *slog.Logger,
	reg prometheus.Registerer, stdout io.Writer) (*outbox.Relay, func(), error) {
	pub, err := broker.Open(ctx, cfg.Publish, broker.Config{
		DataDir:       natsDir(cfg.DB),
		WebhookSecret: cfg.WebhookSecret,
		WebhookFormat: cfg.WebhookFormat,
		Stdout:        stdout,
	})
	if err != nil {
		return nil, nil, err
	}
	r, err := outbox.NewRelay(d, outbox.RelayConfig{
		Publisher:    pub,
		BatchSize:    cfg.RelayBatch,
		PollInterval: cfg.RelayPoll,
		LeaseTTL:     cfg.RelayLease,
		DBTimeout:    min(cfg.DBTimeout, cfg.RelayLease/3),
		MaxAttempts:  cfg.RelayMaxAttempts,
		Registerer:   reg,
		Logger:       log,
	})
	if err != nil {
		_ = pub.Close()
		return nil, nil, err
	}
	return r, func() { _ = pub.Close() }, nil
}
