package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/problem"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/webhook"
)

// WebhookRetention is the least time a webhook delivery's dedupe key is
// kept. Providers retry for days (Stripe for up to three) and people press
// "redeliver" later still, so the service's KeyRetention (24h by default)
// is too short; the webhook keeper keeps keys for the longer of the two.
const WebhookRetention = 30 * 24 * time.Hour

// webhookMaxPayloadBytes bounds a webhook event's outbox payload: the
// provider's body (up to the endpoint's max_body_bytes) plus a few fields.
// It is the outbox's own upper bound, above the 1 MiB the service's other
// events are held to.
const webhookMaxPayloadBytes = 16 << 20

// Problem codes of the intake, beside the webhook package's.
const (
	codeHandlerFailed = "handler_failed"
)

// webhookPanicked is the deliveries metric's outcome for a delivery whose
// handler panicked (answered 500 internal_error, nothing stored).
const webhookPanicked = "panicked"

// webhooks is the intake's state: the configured endpoints with their
// verifiers, the keeper that deduplicates deliveries, the outbox that
// carries their events and the Go handlers registered for them.
type webhooks struct {
	endpoints map[string]webhookEndpoint
	keeper    *idem.Keeper
	outbox    *outbox.Outbox
	registry  *webhook.Registry
}

type webhookEndpoint struct {
	webhook.Endpoint
	verifier webhook.Verifier
}

// newWebhooks parses the configuration file's webhooks block and builds one
// verifier per endpoint. A configuration error stops the service at start,
// not at the first delivery.
func newWebhooks(d driver.Driver, raw []byte, keyRetention, wait time.Duration, log *slog.Logger) (*webhooks, error) {
	w := &webhooks{endpoints: map[string]webhookEndpoint{}, registry: webhook.NewRegistry()}
	if len(raw) > 0 {
		eps, err := webhook.ParseConfig(raw)
		if err != nil {
			return nil, err
		}
		for name, ep := range eps {
			if err := checkEventTenant(ep.Tenant); err != nil {
				return nil, &webhook.ConfigError{Endpoint: name, Field: "tenant", Reason: err.Error()}
			}
			v, err := webhook.NewVerifier(ep)
			if err != nil {
				return nil, err
			}
			w.endpoints[name] = webhookEndpoint{Endpoint: ep, verifier: v}
		}
	}
	retention := max(WebhookRetention, keyRetention)
	var err error
	// A keeper of its own: the service's keeper keeps keys for
	// KeyRetention, the webhook keys must outlive the providers' retries.
	// The service keeper's janitor deletes the expired keys of both.
	if w.keeper, err = idem.New(d, idem.Config{Retention: retention, Wait: wait, Logger: log}); err != nil {
		return nil, err
	}
	if w.outbox, err = outbox.New(d, outbox.Config{MaxPayloadBytes: webhookMaxPayloadBytes}); err != nil {
		return nil, err
	}
	return w, nil
}

// checkEventTenant refuses a tenant that cannot be an outbox tenant (a NATS
// subject token): the endpoint's events could never be written.
func checkEventTenant(t string) error {
	if strings.ContainsAny(t, ".*>") {
		return errors.New("must not contain '.', '*' or '>': it is a token of the events' subjects")
	}
	return nil
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

// webhookIntake answers POST /v1/webhooks/{endpoint}: read the raw body
// within the endpoint's limit, verify the signature and timestamp over
// those bytes, then, keyed by the sender's stable event id, store the event
// and run its handler once.
func (s *Server) webhookIntake(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("endpoint")
	ep, ok := s.webhooks.endpoints[name]
	if !ok {
		// 404, never 410: senders disable an endpoint that answers 410.
		problem.Write(w, http.StatusNotFound, codeNotFound, "no webhook endpoint "+clipName(name)+" is configured")
		return
	}
	count := func(outcome string) { s.metrics.webhooks.WithLabelValues(name, outcome).Inc() }

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(ep.MaxBodyBytes)))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			count("rejected_" + webhook.CodeBodyTooLarge)
			problem.Write(w, http.StatusRequestEntityTooLarge, webhook.CodeBodyTooLarge,
				fmt.Sprintf("the body is over this endpoint's limit of %d bytes", ep.MaxBodyBytes))
			return
		}
		count("rejected_" + webhook.CodeMalformedBody)
		problem.Write(w, http.StatusBadRequest, webhook.CodeMalformedBody, "could not read the body")
		return
	}
	ev, err := ep.verifier.Verify(r.Header, body, time.Now())
	if err != nil {
		status, code := webhook.HTTPStatus(err)
		count("rejected_" + code)
		s.log.Info("idem: webhook refused", "endpoint", name, "code", code, "err", err)
		problem.Write(w, status, code, err.Error())
		return
	}
	if ev.Challenge != "" {
		// Slack's url_verification proves we own the URL; it is no event.
		count("challenge")
		writeJSON(w, http.StatusOK, map[string]string{"challenge": ev.Challenge})
		return
	}

	handler, hasHandler := s.webhooks.registry.Lookup(ev.Provider, ev.Type)
	var handlerErr error
	res, err := s.webhooks.keeper.Do(r.Context(), webhook.DedupeRequest(ep.Endpoint, ev),
		func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			if err := s.enqueueWebhookEvent(ctx, tx, ep.Endpoint, ev); err != nil {
				return idem.Outcome{}, err
			}
			if hasHandler {
				if err := handler(ctx, tx, ev); err != nil {
					handlerErr = err
					return idem.Outcome{}, err
				}
			}
			answer, err := json.Marshal(map[string]any{"received": true, "event_id": ev.ID})
			if err != nil {
				return idem.Outcome{}, err
			}
			return idem.Outcome{
				Status: http.StatusOK,
				Header: http.Header{"Content-Type": {"application/json"}},
				Body:   append(answer, '\n'),
			}, nil
		})
	var reused *idem.ReusedError
	switch {
	case err == nil:
	case errors.As(err, &reused):
		// The fingerprint is the key's own, so this cannot happen; if it
		// did, the stored answer is still the one to give: a duplicate is a
		// success.
		res = idem.Result{Outcome: reused.Stored, Replayed: true}
	case errors.Is(err, idem.ErrInFlight):
		count("in_flight")
		w.Header().Set("Retry-After", retryAfterSeconds(s.webhooks.keeper.Config().Wait))
		problem.Write(w, http.StatusConflict, idemhttp.CodeInFlight,
			"a copy of this delivery is still being processed; retry later")
		return
	case errors.Is(err, idem.ErrPanicked):
		// A bug in a handler (or in the intake): the keeper recovered it,
		// rolled back the event, the handler's rows and the key, and logged
		// it with the key and the stack. A 500 makes the provider redeliver,
		// and the redelivery runs the handler again.
		count(webhookPanicked)
		problem.Write(w, http.StatusInternalServerError, codeInternal,
			"the event's handler failed unexpectedly; nothing was stored, retry later")
		return
	case handlerErr != nil:
		count(codeHandlerFailed)
		s.log.Warn("idem: webhook handler failed; nothing stored, the provider will retry",
			"endpoint", name, "event_id", ev.ID, "type", ev.Type, "err", err)
		w.Header().Set("Retry-After", "1")
		problem.Write(w, http.StatusServiceUnavailable, codeHandlerFailed,
			"the event's handler failed; nothing was stored, retry later")
		return
	case errors.Is(err, outbox.ErrInvalidMessage):
		// Only the payload's size can make the event invalid: the type is
		// sanitised and the tenant checked at start.
		count("rejected_" + webhook.CodeBodyTooLarge)
		problem.Write(w, http.StatusRequestEntityTooLarge, webhook.CodeBodyTooLarge, err.Error())
		return
	default:
		if driver.IsRetryable(err) {
			count(codeUnavailable)
		} else {
			count("error")
		}
		s.fail(w, r, err)
		return
	}

	if res.Replayed {
		count("replayed")
		w.Header().Set("Idempotent-Replayed", "true")
	} else {
		count("first")
		if s.relay != nil {
			s.relay.Notify()
		}
	}
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.Body)
}

// webhookPayload is the payload of a webhook.* event (docs/webhooks.md): the
// provider, the stable event id, the event type and the provider's JSON
// body as JSON. A body that is not JSON (a form-encoded GitHub delivery, a
// generic hmac sender) is carried byte for byte as BodyBase64 instead.
type webhookPayload struct {
	Provider   string          `json:"provider"`
	Endpoint   string          `json:"endpoint"`
	EventID    string          `json:"event_id"`
	Type       string          `json:"type"`
	Body       json.RawMessage `json:"body,omitempty"`
	BodyBase64 string          `json:"body_base64,omitempty"`
}

// enqueueWebhookEvent writes the webhook.<provider>.<type> event in the
// delivery's transaction, in the endpoint's tenant.
func (s *Server) enqueueWebhookEvent(ctx context.Context, tx driver.Tx, ep webhook.Endpoint, ev webhook.Event) error {
	p := webhookPayload{Provider: ev.Provider, Endpoint: ep.Name, EventID: ev.ID, Type: ev.Type}
	if json.Valid(ev.Body) {
		p.Body = ev.Body
	} else {
		p.BodyBase64 = base64.StdEncoding.EncodeToString(ev.Body)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep the provider's "<" and "&" as they came
	if err := enc.Encode(p); err != nil {
		return fmt.Errorf("encode webhook event: %w", err)
	}
	return s.webhooks.outbox.Enqueue(ctx, tx, outbox.Message{
		Tenant:  ep.Tenant,
		Type:    webhookEventType(ev.Provider, ev.Type),
		Key:     "webhook/" + ep.Name + "/" + webhook.DedupeKey(ep, ev).Key,
		Payload: bytes.TrimRight(buf.Bytes(), "\n"),
	})
}

// webhookEventType is "webhook.<provider>.<type>", with the provider's type
// made a valid event type (and NATS subject tail): a character outside
// printable ASCII, a space, '*' or '>' becomes '_', and empty dot-separated
// tokens are dropped. A delivery without a type is "webhook.<provider>".
// The payload keeps the type exactly as the provider sent it.
func webhookEventType(provider, typ string) string {
	var b strings.Builder
	b.WriteString("webhook.")
	b.WriteString(provider)
	for _, tok := range strings.Split(typ, ".") {
		if tok == "" {
			continue
		}
		b.WriteByte('.')
		for _, c := range []byte(tok) {
			if c <= ' ' || c > '~' || c == '*' || c == '>' {
				c = '_'
			}
			b.WriteByte(c)
		}
	}
	out := b.String()
	if len(out) > outbox.MaxTypeLen {
		out = strings.TrimRight(out[:outbox.MaxTypeLen], ".")
	}
	return out
}

// retryAfterSeconds renders d as whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int((d+time.Second-1)/time.Second)))
}

// clipName shortens a path segment before it is echoed in an answer.
func clipName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return fmt.Sprintf("%q", s)
}
