package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/cmd/idem/internal/broker"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/storage"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
	"github.com/idemhq/idem/outbox/webhookout"
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

// Relay is the outbox relay and, with cfg.WebhookEndpoints, beside it the
// deliverer of the events to the tenants' own endpoints: the relay's
// publisher writes their deliveries (webhookout.FanOut) before it hands
// each event to the broker.
type Relay struct {
	*outbox.Relay
	deliverer *webhookout.Deliverer // nil without cfg.WebhookEndpoints
}

// Run runs the relay and the deliverer until ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	if r.deliverer == nil {
		return r.Relay.Run(ctx)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.deliverer.Run(ctx) // it returns only when ctx ends
	}()
	err := r.Relay.Run(ctx)
	<-done
	return err
}

// NewRelay opens the publisher cfg.Publish names and a relay on d. The
// returned func closes the publisher (and an embedded NATS server) once the
// relay has stopped. stdout receives the stdout publisher's lines.
func NewRelay(ctx context.Context, cfg config.Config, d driver.Driver, log *slog.Logger,
	reg prometheus.Registerer, stdout io.Writer) (*Relay, func(), error) {
	pub, err := broker.Open(ctx, cfg.Publish, broker.Config{
		DataDir:       natsDir(cfg.DB),
		WebhookSecret: cfg.WebhookSecret,
		WebhookFormat: cfg.WebhookFormat,
		Stdout:        stdout,
	})
	if err != nil {
		return nil, nil, err
	}
	var deliverer *webhookout.Deliverer
	if cfg.WebhookEndpoints {
		format, ferr := cloudevent.ParseFormat(cfg.WebhookFormat)
		if ferr == nil {
			deliverer, ferr = webhookout.NewDeliverer(d, webhookout.DelivererConfig{
				Schedule:      cfg.WebhookSchedule,
				DisableAfter:  cfg.WebhookDisableAfter,
				Timeout:       cfg.WebhookTimeout,
				AllowNetworks: cfg.WebhookAllowNetworks,
				DBTimeout:     cfg.DBTimeout,
				CloudEvents:   cloudevent.Config{Format: format},
				Registerer:    reg,
				Logger:        log,
				Sealer:        cfg.Sealer,
			})
		}
		if ferr == nil {
			pub, ferr = webhookout.NewFanOut(d, webhookout.FanOutConfig{Next: pub, Written: deliverer.Notify,
				DBTimeout: min(cfg.DBTimeout, time.Minute), Sealer: cfg.Sealer})
		}
		if ferr != nil {
			_ = pub.Close()
			return nil, nil, fmt.Errorf("webhook endpoints: %w", ferr)
		}
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
		Sealer:       cfg.Sealer,
	})
	if err != nil {
		_ = pub.Close()
		return nil, nil, err
	}
	return &Relay{Relay: r, deliverer: deliverer}, func() { _ = pub.Close() }, nil
}
