package server

import (
	"log/slog"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/seal"
	"github.com/idemhq/idem/webhook"
)

// WebhookRetention is the least time a webhook delivery's dedupe key is
// kept (webhook.Retention). Providers retry for days (Stripe for up to
// three) and people press "redeliver" later still, so the service's
// KeyRetention (24h by default) is too short; the webhook keeper keeps keys
// for the longer of the two.
const WebhookRetention = webhook.Retention

// webhooks is the service's webhook intake (package webhook's Intake)
// with the keeper that deduplicates its deliveries and the registry of the
// Go handlers registered for them.
type webhooks struct {
	intake   *webhook.Intake
	keeper   *idem.Keeper
	registry *webhook.Registry
}

// newWebhooks parses the configuration file's webhooks block and builds
// the intake, one verifier per endpoint. A configuration error stops the
// service at start, not at the first delivery. onAnswer counts each
// delivery.
func newWebhooks(d driver.Driver, raw []byte, keyRetention, wait time.Duration, sealer seal.Sealer, log *slog.Logger,
	onAnswer func(endpoint string, kind webhook.Kind)) (*webhooks, error) {
	var endpoints []webhook.Endpoint
	if len(raw) > 0 {
		eps, err := webhook.ParseConfig(raw)
		if err != nil {
			return nil, err
		}
		for _, ep := range eps {
			endpoints = append(endpoints, ep)
		}
	}
	w := &webhooks{registry: webhook.NewRegistry()}
	var err error
	// A keeper of its own: the service's keeper keeps keys for
	// KeyRetention, the webhook keys must outlive the providers' retries.
	// The service keeper's janitor deletes the expired keys of both.
	retention := max(WebhookRetention, keyRetention)
	if w.keeper, err = idem.New(d, idem.Config{Retention: retention, Wait: wait, Logger: log, Sealer: sealer}); err != nil {
		return nil, err
	}
	ob, err := outbox.New(d, outbox.Config{MaxPayloadBytes: webhook.MaxEventPayloadBytes, Sealer: sealer})
	if err != nil {
		return nil, err
	}
	w.intake, err = webhook.NewIntake(webhook.IntakeConfig{
		Keeper:     w.keeper,
		Outbox:     ob,
		Endpoints:  endpoints,
		Handlers:   w.registry,
		Logger:     log,
		OnAnswer:   onAnswer,
		RetryAfter: retryAfter,
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// HandleWebhook registers h to run, inside the delivery's dedupe
// transaction, for every first delivery of the provider's eventType (or
// webhook.AnyType) on any endpoint of that provider. What h writes through
// its tx commits with the dedupe key and the webhook.* event, or not at
// all: an error from h rolls everything back and the delivery is answered
// 503, so the provider retries it; a panic in h rolls back the same way,
// is logged with the event's key and stack, and is answered 500, which
// providers retry too. Call it before serving; like
// http.ServeMux it panics on a nil handler, an unknown provider or a
// second registration of the same pair.
func (s *Server) HandleWebhook(provider, eventType string, h webhook.Handler) {
	s.webhooks.registry.Handle(provider, eventType, h)
}

// countWebhook is the intake's OnAnswer: the deliveries metric, and a
// wake-up of the relay when a first delivery has just committed its event.
func (s *Server) countWebhook(endpoint string, kind webhook.Kind) {
	s.metrics.webhooks.WithLabelValues(endpoint, string(kind)).Inc()
	if kind == webhook.KindFirst && s.relay != nil {
		s.relay.Notify()
	}
}

// webhookEventType is the outbox event type of a delivery
// (webhook.EventType).
func webhookEventType(provider, typ string) string {
	return webhook.EventType(webhook.Event{Provider: provider, Type: typ})
}
