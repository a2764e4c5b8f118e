package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/problem"
	"github.com/idemhq/idem/outbox"
)

// Retention is the least time an intake's keeper should keep a delivery's
// dedupe key. Providers retry for days (Stripe for up to three) and people
// press "redeliver" later still; a delivery that arrives after its key
// expired is a new delivery and runs its handler again.
const Retention = 30 * 24 * time.Hour

// MaxEventPayloadBytes is the outbox payload limit that holds the
// webhook.* event of any body up to 16 MiB, plus its few fields. Give the
// intake's outbox this limit (outbox.Config.MaxPayloadBytes): the 1 MiB
// default refuses the event of a larger body as body_too_large (413).
const MaxEventPayloadBytes = 16 << 20

// Problem codes of the intake, beside Verify's (CodeSignatureInvalid, ...)
// and idemhttp.CodeInFlight.
const (
	// CodeNotFound: no endpoint of that name is configured (404).
	CodeNotFound = idemhttp.CodeNotFound
	// CodeHandlerFailed: the event's handler returned an error; nothing was
	// stored (503).
	CodeHandlerFailed = "handler_failed"
	// CodeUnavailable: the database is unavailable or the request ended
	// (canceled, its deadline passed); nothing was stored (503).
	CodeUnavailable = idemhttp.CodeUnavailable
)

// Kind classifies how the intake answered a delivery, for metrics
// (IntakeConfig.OnAnswer). It is a label, not the answer: the stored answer
// is an idem.Outcome. A refused delivery is KindRejected followed by its
// code ("rejected_signature_invalid", "rejected_body_too_large", ...). The
// values are stable (idem serve's idem_webhook_deliveries_total counts by
// them).
type Kind string

const (
	KindFirst         Kind = "first"           // stored and handled now
	KindReplayed      Kind = "replayed"        // a copy of a stored event: its answer again
	KindInFlight      Kind = "in_flight"       // a copy still running elsewhere: 409
	KindChallenge     Kind = "challenge"       // Slack's url_verification, answered
	KindHandlerFailed Kind = CodeHandlerFailed // the handler's error: 503, nothing stored
	KindPanicked      Kind = "panicked"        // the handler panicked: 500, nothing stored
	KindUnavailable   Kind = CodeUnavailable   // the database failed: 503, nothing stored
	KindError         Kind = "error"           // any other failure: 500, nothing stored
	KindRejected      Kind = "rejected_"       // prefix of a refused delivery's kind
)

// IntakeConfig configures NewIntake; Keeper and Outbox are required.
type IntakeConfig struct {
	// Keeper deduplicates deliveries by their sender's event id. Required.
	// Give it a Retention of at least Retention (30 days): its Wait is how
	// long a copy waits for a twin still in its handler before it is
	// answered 409 request_in_flight.
	Keeper *idem.Keeper
	// Outbox receives the webhook.<provider>.<type> event of every first
	// delivery, in the delivery's transaction. Required. Give it
	// MaxPayloadBytes: MaxEventPayloadBytes.
	Outbox *outbox.Outbox
	// Endpoints are served by name; each is defaulted and validated as
	// NewVerifier does, and its tenant must be a subject token of the
	// events (no '.', '*' or '>'). Up to MaxEndpoints, names distinct. May
	// be empty: every delivery is then 404 not_found.
	Endpoints []Endpoint
	// Handlers maps (provider, event type) to the handler run inside the
	// delivery's transaction. Handlers may be registered on it after
	// NewIntake, before serving. Default none: events are only recorded
	// (dedupe key and outbox event). At most one of Handlers and Handler.
	Handlers *Registry
	// Handler, when set, runs for every event of every endpoint, inside
	// the delivery's transaction. At most one of Handlers and Handler.
	Handler Handler
	// Logger receives refused deliveries (info), failed handlers (warn)
	// and unexpected errors (error). A handler's panic is logged by the
	// keeper, through its Config.Logger. Default slog.Default().
	Logger *slog.Logger
	// OnAnswer, when set, is called once per delivery to a configured
	// endpoint with the endpoint's name and the Kind of answer it got (a
	// metrics counter). It runs on the request's goroutine after the
	// transaction ended, before the answer is written: keep it short. A
	// delivery to an unknown endpoint is not reported (its name is the
	// sender's choice). Default none.
	OnAnswer func(endpoint string, kind Kind)
	// RetryAfter is the Retry-After of a 503 (handler failed, database
	// unavailable, the request's deadline passed). Default 1s; bound
	// 1s..1h. A 409 in flight carries the keeper's Wait instead.
	RetryAfter time.Duration
	// Clock returns the current time, which signed timestamps are checked
	// against. Default time.Now.
	Clock func() time.Time
}

func (c IntakeConfig) withDefaults() IntakeConfig {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = time.Second
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Handler != nil && c.Handlers == nil {
		all := c.Handler
		c.Handlers = NewRegistry()
		for _, p := range Providers {
			c.Handlers.Handle(p, AnyType, all)
		}
	} else if c.Handlers == nil {
		c.Handlers = NewRegistry()
	}
	return c
}

// Intake is the webhook intake as an http.Handler: it reads the raw body
// within the endpoint's limit, verifies the signature and timestamp over
// those bytes, then, keyed by the sender's stable event id (DedupeRequest),
// writes the webhook.<provider>.<type> event to the outbox and runs the
// event's handler in one keeper transaction, and answers the provider. A
// redelivery of the event id is answered the stored answer with
// Idempotent-Replayed: true and runs nothing. Every refusal is
// application/problem+json with a stable code.
//
// ServeHTTP finds the endpoint by the request's {endpoint} path value
// (mount it at "POST /webhooks/{endpoint}"); Endpoint serves one endpoint
// at a path of your choosing.
type Intake struct {
	cfg       IntakeConfig
	endpoints map[string]intakeEndpoint
}

type intakeEndpoint struct {
	Endpoint
	verifier Verifier
}

// NewIntake checks cfg and builds one verifier per endpoint. A
// configuration error is a *ConfigError (wrapping ErrConfig) or, for the
// config itself, an error naming the field.
func NewIntake(cfg IntakeConfig) (*Intake, error) {
	switch {
	case cfg.Keeper == nil:
		return nil, errors.New("webhook: IntakeConfig.Keeper is required")
	case cfg.Outbox == nil:
		return nil, errors.New("webhook: IntakeConfig.Outbox is required")
	case cfg.Handler != nil && cfg.Handlers != nil:
		return nil, errors.New("webhook: set at most one of IntakeConfig.Handlers and IntakeConfig.Handler")
	case cfg.RetryAfter != 0 && (cfg.RetryAfter < time.Second || cfg.RetryAfter > time.Hour):
		return nil, fmt.Errorf("webhook: IntakeConfig.RetryAfter %s is outside 1s..1h", cfg.RetryAfter)
	case len(cfg.Endpoints) > MaxEndpoints:
		return nil, &ConfigError{Field: "webhooks", Reason: fmt.Sprintf("%d endpoints, at most %d", len(cfg.Endpoints), MaxEndpoints)}
	}
	in := &Intake{cfg: cfg.withDefaults(), endpoints: make(map[string]intakeEndpoint, len(cfg.Endpoints))}
	for _, ep := range cfg.Endpoints {
		if _, dup := in.endpoints[ep.Name]; dup {
			return nil, &ConfigError{Endpoint: ep.Name, Field: "name", Reason: "configured twice"}
		}
		v, err := NewVerifier(ep)
		if err != nil {
			return nil, err
		}
		ep = ep.withDefaults()
		if strings.ContainsAny(ep.Tenant, ".*>") {
			return nil, &ConfigError{Endpoint: ep.Name, Field: "tenant",
				Reason: "must not contain '.', '*' or '>': it is a token of the events' subjects"}
		}
		in.endpoints[ep.Name] = intakeEndpoint{Endpoint: ep, verifier: v}
	}
	return in, nil
}

// ServeHTTP serves the endpoint named by the request's {endpoint} path
// value. An unknown name is 404 not_found — never 410, on which senders
// disable the endpoint.
func (in *Intake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("endpoint")
	ep, ok := in.endpoints[name]
	if !ok {
		idemhttp.Problem{Status: http.StatusNotFound, Code: CodeNotFound,
			Detail: "no webhook endpoint " + clipName(name) + " is configured"}.Write(w)
		return
	}
	in.serve(w, r, ep)
}

// Endpoint returns the handler of the named endpoint alone, for a route
// without an {endpoint} path value. Like http.ServeMux it panics on a
// programming error: a name that is not configured.
func (in *Intake) Endpoint(name string) http.Handler {
	ep, ok := in.endpoints[name]
	if !ok {
		panic(fmt.Sprintf("webhook: Intake.Endpoint: no endpoint %q is configured", name))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { in.serve(w, r, ep) })
}

// Handlers is the registry the intake looks handlers up in.
func (in *Intake) Handlers() *Registry { return in.cfg.Handlers }

func (in *Intake) serve(w http.ResponseWriter, r *http.Request, ep intakeEndpoint) {
	count := func(kind Kind) {
		if in.cfg.OnAnswer != nil {
			in.cfg.OnAnswer(ep.Name, kind)
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(ep.MaxBodyBytes)))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			count(KindRejected + Kind(CodeBodyTooLarge))
			idemhttp.Problem{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
				Detail: fmt.Sprintf("the body is over this endpoint's limit of %d bytes", ep.MaxBodyBytes)}.Write(w)
			return
		}
		count(KindRejected + Kind(CodeMalformedBody))
		idemhttp.Problem{Status: http.StatusBadRequest, Code: CodeMalformedBody, Detail: "could not read the body"}.Write(w)
		return
	}
	ev, err := ep.verifier.Verify(r.Header, body, in.cfg.Clock())
	if err != nil {
		status, code := HTTPStatus(err)
		count(KindRejected + Kind(code))
		in.cfg.Logger.Info("idem: webhook refused", "endpoint", ep.Name, "code", code, "err", err)
		idemhttp.Problem{Status: status, Code: code, Detail: err.Error()}.Write(w)
		return
	}
	if ev.Challenge != "" {
		// Slack's url_verification proves we own the URL; it is no event.
		count(KindChallenge)
		writeJSON(w, http.StatusOK, map[string]string{"challenge": ev.Challenge})
		return
	}

	handler, hasHandler := in.cfg.Handlers.Lookup(ev)
	var handlerErr error
	res, err := in.cfg.Keeper.Do(r.Context(), DedupeRequest(ep.Endpoint, ev),
		func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			if err := in.enqueue(ctx, tx, ep.Endpoint, ev); err != nil {
				return idem.Outcome{}, err
			}
			if hasHandler {
				if err := handler(ctx, tx, ev); err != nil {
					handlerErr = err
					return idem.Outcome{}, err
				}
			}
			return received(ev.ID)
		})
	var reused *idem.ReusedError
	switch {
	case err == nil:
	case errors.As(err, &reused):
		// The fingerprint is the key's own, so this cannot happen; if it
		// did, the stored answer is still the one to give: a duplicate is a
		// success.
		res = idem.Result{Outcome: reused.Stored, Replayed: true}
	case errors.Is(err, idem.ErrKeyExpired), errors.Is(err, idem.ErrForgotten):
		// The event was handled, and its answer is no longer kept (a
		// keeper whose Memory outlasts its Retention) or cannot be read
		// (its tenant was forgotten): the delivery is a duplicate, and
		// what the first answer said is said again, so that the provider
		// stops. A refusal would only make it redeliver for days.
		if res.Outcome, err = received(ev.ID); err != nil {
			in.fail(w, r, err, count)
			return
		}
		res.Replayed = true
	case errors.Is(err, idem.ErrInFlight):
		// A delivery's words, and the keeper's Wait: how long the copy
		// already waited for its twin.
		count(KindInFlight)
		idemhttp.Problem{Status: http.StatusConflict, Code: idemhttp.CodeInFlight,
			Detail:     "a copy of this delivery is still being processed; retry later",
			RetryAfter: in.cfg.Keeper.Config().Wait}.Write(w)
		return
	case errors.Is(err, idem.ErrPanicked):
		// A bug in a handler (or in the intake): the keeper recovered it,
		// rolled back the event, the handler's rows and the key, and logged
		// it with the key and the stack. A 500 makes the provider redeliver,
		// and the redelivery runs the handler again.
		count(KindPanicked)
		idemhttp.Problem{Status: http.StatusInternalServerError, Code: CodeInternal,
			Detail: "the event's handler failed unexpectedly; nothing was stored, retry later"}.Write(w)
		return
	case handlerErr != nil:
		count(KindHandlerFailed)
		in.cfg.Logger.Warn("idem: webhook handler failed; nothing stored, the provider will retry",
			"endpoint", ep.Name, "event_id", ev.ID, "type", ev.Type, "err", err)
		idemhttp.Problem{Status: http.StatusServiceUnavailable, Code: CodeHandlerFailed,
			Detail:     "the event's handler failed; nothing was stored, retry later",
			RetryAfter: in.cfg.RetryAfter}.Write(w)
		return
	case errors.Is(err, outbox.ErrInvalidMessage):
		// Only the payload's size can make the event invalid: the type is
		// sanitised, the tenant checked by NewIntake and the ordering key
		// bounded (orderingKey).
		count(KindRejected + Kind(CodeBodyTooLarge))
		idemhttp.Problem{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Detail: err.Error()}.Write(w)
		return
	default:
		in.fail(w, r, err, count)
		return
	}

	if res.Replayed {
		count(KindReplayed)
		w.Header().Set(idemhttp.HeaderReplayed, "true")
	} else {
		count(KindFirst)
	}
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.Body)
}

// fail answers an error of the keeper or the outbox (a handler's error is
// answered before) as idemhttp.ProblemFor maps it: a database fault is 503
// with the configured Retry-After, which the provider retries; anything
// unexpected is logged and 500. Nothing was stored either way.
func (in *Intake) fail(w http.ResponseWriter, r *http.Request, err error, count func(Kind)) {
	p := idemhttp.ProblemFor(err, in.cfg.RetryAfter)
	switch {
	case p.Status == http.StatusInternalServerError:
		count(KindError)
		in.cfg.Logger.Error("idem: request failed", "method", r.Method, "route", r.Pattern, "err", err)
	case p.Code == CodeUnavailable && !errors.Is(err, context.Canceled):
		count(KindUnavailable)
	default:
		// The sender went away (canceled), or a row vanished.
		count(KindError)
	}
	p.Write(w)
}

// received is the intake's answer to a delivery it took: stored with the
// key and replayed to its redeliveries.
func received(eventID string) (idem.Outcome, error) {
	answer, err := json.Marshal(map[string]any{"received": true, "event_id": eventID})
	if err != nil {
		return idem.Outcome{}, err
	}
	return idem.Outcome{
		Status: http.StatusOK,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   append(answer, '\n'),
	}, nil
}

// eventPayload is the payload of a webhook.* event: the provider, the
// endpoint, the stable event id, the event type and the provider's JSON
// body as JSON. A body that is not JSON (a form-encoded GitHub delivery, a
// generic hmac sender) is carried byte for byte as BodyBase64 instead.
// Unsigned names the fields ("event_id", "type") the sender did not sign,
// so that a consumer routing on the type knows to check it against the
// body.
type eventPayload struct {
	Provider   string          `json:"provider"`
	Endpoint   string          `json:"endpoint"`
	EventID    string          `json:"event_id"`
	Type       string          `json:"type"`
	Unsigned   []string        `json:"unsigned,omitempty"`
	Body       json.RawMessage `json:"body,omitempty"`
	BodyBase64 string          `json:"body_base64,omitempty"`
}

// enqueue writes the webhook.<provider>.<type> event in the delivery's
// transaction, in the endpoint's tenant, ordered by its event id.
func (in *Intake) enqueue(ctx context.Context, tx driver.Tx, ep Endpoint, ev Event) error {
	p := eventPayload{Provider: ev.Provider, Endpoint: ep.Name, EventID: ev.ID, Type: ev.Type}
	if ev.IDUnsigned {
		p.Unsigned = append(p.Unsigned, "event_id")
	}
	if ev.TypeUnsigned {
		p.Unsigned = append(p.Unsigned, "type")
	}
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
	return in.cfg.Outbox.Enqueue(ctx, tx, outbox.Message{
		Tenant:  ep.Tenant,
		Type:    EventType(ev),
		Key:     orderingKey(ep, ev),
		Payload: bytes.TrimRight(buf.Bytes(), "\n"),
	})
}

// orderingKey is the outbox ordering key of a delivery's event,
// "webhook/<endpoint>/<dedupe key>". A dedupe key may be up to
// idem.MaxKeyLength (255) bytes, and with its prefix the ordering key
// would pass outbox.MaxKeyLen: then it is
// "webhook/<endpoint>/key-sha256:<hex of the dedupe key's SHA-256>",
// still one per event, so that no id the keeper takes is refused by the
// outbox (413 on every redelivery).
func orderingKey(ep Endpoint, ev Event) string {
	k := "webhook/" + ep.Name + "/" + DedupeKey(ep, ev).Key
	if len(k) <= outbox.MaxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(DedupeKey(ep, ev).Key))
	return "webhook/" + ep.Name + "/key-sha256:" + hex.EncodeToString(sum[:])
}

// EventType is the outbox event type of a delivery,
// "webhook.<provider>.<type>" of ev's Provider and Type, with the
// provider's type made a valid event type (and NATS subject tail): a
// character outside printable ASCII, a space, '*' or '>' becomes '_', and
// empty dot-separated tokens are dropped. A delivery without a type is
// "webhook.<provider>". The event's payload keeps the type exactly as the
// provider sent it.
func EventType(ev Event) string {
	var b strings.Builder
	b.WriteString("webhook.")
	b.WriteString(ev.Provider)
	for _, tok := range strings.Split(ev.Type, ".") {
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

// writeJSON answers v as JSON (problem.JSON).
func writeJSON(w http.ResponseWriter, status int, v any) { problem.JSON(w, status, v) }

// clipName shortens a path segment before it is echoed in an answer.
func clipName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}
