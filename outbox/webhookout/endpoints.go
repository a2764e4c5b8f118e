// Package webhookout sends outbox events to the webhook endpoints that
// each tenant registers for itself: endpoints as data, one delivery per
// (event, endpoint), signed as Standard Webhooks, retried on a schedule of
// days, every attempt logged, failing endpoints disabled, deliveries
// replayed on demand.
//
// The pieces, each on one driver.Driver:
//
//   - Endpoints registers, changes and lists a tenant's endpoints in the
//     caller's transaction, and reads their attempts and replays their
//     deliveries.
//   - FanOut is an outbox.Publisher: the relay hands it each event once
//     or more, and it writes one delivery row per enabled endpoint whose
//     filter matches. The row's primary key (endpoint, event) makes a
//     second hand-over a no-op, so the relay's at-least-once becomes one
//     delivery each.
//   - Deliverer sends the due deliveries, each under a lease so that no
//     two workers send one at once, with a bounded number in flight per
//     endpoint so that a slow endpoint holds only its own slots.
//
// Every connection goes through an SSRF guard that checks the address it
// resolved to (Config.AllowNetworks). See docs/webhooks-out.md.
package webhookout

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookpub"
	"github.com/idemhq/idem/seal"
)

// Limits on an endpoint and on the reads.
const (
	MaxURLLen         = 2048
	MaxDescriptionLen = 1024
	MaxEventTypes     = 100
	MaxRateLimit      = 10000 // deliveries a second
	MaxEndpoints      = 100   // a tenant's
	DefaultListLimit  = 100
	MaxListLimit      = 1000
	// MaxReplay bounds the deliveries one replay makes pending again.
	MaxReplay = 10000
	// ResponseBytes is how much of an answer each attempt logs.
	ResponseBytes = 1024
)

// EventEndpointDisabled is the type of the event written, in the tenant's
// outbox, when an endpoint is disabled for failing.
const EventEndpointDisabled = "webhook_endpoint.disabled"

var (
	// ErrNotFound: the tenant has no endpoint (or delivery) of that id.
	ErrNotFound = errors.New("webhookout: not found")
	// ErrInvalid is wrapped by *InputError.
	ErrInvalid = errors.New("webhookout: invalid input")
	// ErrTooMany: the tenant has MaxEndpoints endpoints already.
	ErrTooMany = errors.New("webhookout: too many endpoints")
)

// InputError says which field is invalid and why.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string { return "webhookout: " + e.Field + " " + e.Reason }

func (e *InputError) Unwrap() error { return ErrInvalid }

func invalid(field, reason string) error { return &InputError{Field: field, Reason: reason} }

// Endpoint is a tenant's receiving URL as the API shows it.
type Endpoint struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	Description string   `json:"description"`
	EventTypes  []string `json:"event_types"`
	Enabled     bool     `json:"enabled"`
	// RateLimit bounds the deliveries a second to the endpoint, per
	// deliverer; 0: unbounded.
	RateLimit int       `json:"rate_limit"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// FailingSince is the first failure since the last success; nil while
	// healthy.
	FailingSince *time.Time `json:"failing_since"`
	// DisabledAt and DisabledReason are set when failures disabled it.
	DisabledAt     *time.Time `json:"disabled_at"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	// Secret is the signing secret, in the answers of Create and
	// RotateSecret only: it is never shown again.
	Secret string `json:"secret,omitempty"`
	// SecretsActive counts the secrets signing now (2 during a rotation's
	// overlap).
	SecretsActive int `json:"secrets_active"`
}

// NewEndpoint is what Create takes.
type NewEndpoint struct {
	URL         string   `json:"url"`
	Description string   `json:"description"`
	EventTypes  []string `json:"event_types"`
	// Enabled defaults to true.
	Enabled   *bool `json:"enabled"`
	RateLimit int   `json:"rate_limit"`
	// Secret, when set, is the signing secret (whsec_ and base64 of 24..64
	// bytes); otherwise one is generated.
	Secret string `json:"secret"`
}

// EndpointPatch is what Update takes: nil fields are left as they are.
type EndpointPatch struct {
	URL         *string   `json:"url"`
	Description *string   `json:"description"`
	EventTypes  *[]string `json:"event_types"`
	// Enabled true re-enables an endpoint that failures disabled, and
	// forgets its failures.
	Enabled   *bool `json:"enabled"`
	RateLimit *int  `json:"rate_limit"`
}

// Config configures New. The zero value is usable.
type Config struct {
	// AllowNetworks are the networks deliveries may reach although they are
	// internal (loopback, private, link-local…), and the only ones plain
	// http may reach. Default none: https to public addresses only.
	AllowNetworks []netip.Prefix
	// RotationOverlap is how long a rotated-out secret keeps signing beside
	// the new one. Default 24h; bound 0..720h.
	RotationOverlap time.Duration
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
	// Sealer opens the outbox rows a replay by event id copies into a
	// delivery (outbox.Config.Sealer sealed them), and seals the copy.
	// Default nil: sealed rows cannot be replayed that way.
	Sealer seal.Sealer
}

func (c Config) withDefaults() Config {
	if c.RotationOverlap == 0 {
		c.RotationOverlap = 24 * time.Hour
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.RotationOverlap < 0 || c.RotationOverlap > 720*time.Hour {
		return fmt.Errorf("webhookout: RotationOverlap %s is outside 0..720h", c.RotationOverlap)
	}
	if len(c.AllowNetworks) > 256 {
		return errors.New("webhookout: more than 256 allowed networks")
	}
	return nil
}

// Endpoints manages the tenants' endpoints on one database.
type Endpoints struct {
	d     driver.Driver
	cfg   Config
	guard guard
}

// New returns the endpoints of d.
func New(d driver.Driver, cfg Config) (*Endpoints, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Endpoints{d: d, cfg: cfg, guard: guard{allow: cfg.AllowNetworks}}, nil
}

// secret is one signing secret; Until is when it stops signing (zero: the
// current one).
type secret struct {
	Secret string     `json:"secret"`
	Until  *time.Time `json:"until,omitempty"`
}

// activeKeys are the HMAC keys of the secrets signing at now, the newest
// first.
func activeKeys(raw []byte, now time.Time) ([][]byte, error) {
	var ss []secret
	if err := json.Unmarshal(raw, &ss); err != nil {
		return nil, fmt.Errorf("webhookout: stored secrets: %w", err)
	}
	var keys [][]byte
	for _, s := range ss {
		if s.Until != nil && !now.Before(*s.Until) {
			continue
		}
		k, err := webhookpub.DecodeSecret(s.Secret)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// NewSecret returns a fresh whsec_ secret of 32 random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return webhookpub.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

func validTenant(t string) bool {
	if t == "" || len(t) > outbox.MaxTenantLen {
		return false
	}
	return true
}

// checkTypes validates a filter: exact type names, or a prefix and ".*".
// "*" alone matches every type, as an empty filter does.
func checkTypes(types []string) error {
	if len(types) > MaxEventTypes {
		return invalid("event_types", fmt.Sprintf("has %d entries, limit %d", len(types), MaxEventTypes))
	}
	for _, t := range types {
		if t == "*" {
			continue
		}
		name := strings.TrimSuffix(t, ".*")
		if name == "" || len(t) > outbox.MaxTypeLen || strings.ContainsAny(name, "*> ") || !utf8.ValidString(t) ||
			strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
			return invalid("event_types", fmt.Sprintf("entry %q: want a type name or a prefix followed by .*", t))
		}
	}
	return nil
}

// Matches reports whether an event of type typ goes to an endpoint with
// filter types: empty or "*" matches all, "a.*" matches a.x and a.x.y
// (not "a" itself), any other entry its exact name.
func Matches(types []string, typ string) bool {
	if len(types) == 0 {
		return true
	}
	for _, t := range types {
		if t == "*" || t == typ {
			return true
		}
		if p, ok := strings.CutSuffix(t, "*"); ok && strings.HasSuffix(p, ".") && strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

func (e *Endpoints) checkURL(raw string) error {
	if raw == "" || len(raw) > MaxURLLen {
		return invalid("url", fmt.Sprintf("must be 1..%d bytes", MaxURLLen))
	}
	if _, err := e.guard.checkURL(raw); err != nil {
		return invalid("url", err.Error())
	}
	return nil
}

func endpointOf(r *driver.WebhookEndpointRow, now time.Time) Endpoint {
	ep := Endpoint{ID: r.ID, URL: r.URL, Description: r.Description, Enabled: r.Enabled, RateLimit: r.RateLimit,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), DisabledReason: r.DisabledReason, EventTypes: []string{}}
	_ = json.Unmarshal(r.EventTypes, &ep.EventTypes)
	if !r.FailingSince.IsZero() {
		t := r.FailingSince.UTC()
		ep.FailingSince = &t
	}
	if !r.DisabledAt.IsZero() {
		t := r.DisabledAt.UTC()
		ep.DisabledAt = &t
	}
	keys, _ := activeKeys(r.Secrets, now)
	ep.SecretsActive = len(keys)
	return ep
}

func checkText(field, s string, max int) error {
	if len(s) > max || !utf8.ValidString(s) {
		return invalid(field, fmt.Sprintf("must be valid UTF-8 of at most %d bytes", max))
	}
	return nil
}

func checkRate(r int) error {
	if r < 0 || r > MaxRateLimit {
		return invalid("rate_limit", fmt.Sprintf("must be 0 (unbounded) to %d deliveries a second", MaxRateLimit))
	}
	return nil
}

// Create registers an endpoint of tenant in tx. The answer holds its
// secret; no later read shows it.
func (e *Endpoints) Create(ctx context.Context, tx driver.Tx, tenant string, in NewEndpoint) (Endpoint, error) {
	if err := driver.CheckTx(e.d, tx); err != nil {
		return Endpoint{}, fmt.Errorf("webhookout: %w", err)
	}
	if !validTenant(tenant) {
		return Endpoint{}, invalid("tenant", "is not valid")
	}
	if err := e.checkURL(in.URL); err != nil {
		return Endpoint{}, err
	}
	if err := checkText("description", in.Description, MaxDescriptionLen); err != nil {
		return Endpoint{}, err
	}
	if err := checkTypes(in.EventTypes); err != nil {
		return Endpoint{}, err
	}
	if err := checkRate(in.RateLimit); err != nil {
		return Endpoint{}, err
	}
	sec := in.Secret
	if sec == "" {
		sec = NewSecret()
	} else if _, err := webhookpub.DecodeSecret(sec); err != nil {
		return Endpoint{}, invalid("secret", "must be whsec_ followed by base64 of 24..64 bytes")
	}
	existing, err := e.d.WebhookEndpointList(ctx, tx, &driver.WebhookEndpointListParams{Tenant: tenant, Limit: MaxEndpoints})
	if err != nil {
		return Endpoint{}, err
	}
	if len(existing) >= MaxEndpoints {
		return Endpoint{}, fmt.Errorf("%w: a tenant has at most %d", ErrTooMany, MaxEndpoints)
	}
	types := in.EventTypes
	if types == nil {
		types = []string{}
	}
	typesJSON, _ := json.Marshal(types)
	secretsJSON, _ := json.Marshal([]secret{{Secret: sec}})
	now := e.cfg.Clock().UTC()
	row := driver.WebhookEndpointRow{
		ID: "ep_" + uuid.Must(uuid.NewV7()).String(), Tenant: tenant, URL: in.URL, Description: in.Description,
		EventTypes: typesJSON, Enabled: in.Enabled == nil || *in.Enabled, Secrets: secretsJSON,
		RateLimit: in.RateLimit, CreatedAt: now, UpdatedAt: now,
	}
	if err := e.d.WebhookEndpointInsert(ctx, tx, &driver.WebhookEndpointInsertParams{Row: row}); err != nil {
		return Endpoint{}, err
	}
	ep := endpointOf(&row, now)
	ep.Secret = sec
	return ep, nil
}

func (e *Endpoints) get(ctx context.Context, tx driver.Tx, tenant, id string, lock bool) (*driver.WebhookEndpointRow, error) {
	if err := driver.CheckTx(e.d, tx); err != nil {
		return nil, fmt.Errorf("webhookout: %w", err)
	}
	r, err := e.d.WebhookEndpointGet(ctx, tx, &driver.WebhookEndpointGetParams{Tenant: tenant, ID: id, Lock: lock})
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("%w: endpoint %q", ErrNotFound, id)
	}
	return r, err
}

// Get reads one of tenant's endpoints, without its secret.
func (e *Endpoints) Get(ctx context.Context, tx driver.Tx, tenant, id string) (Endpoint, error) {
	r, err := e.get(ctx, tx, tenant, id, false)
	if err != nil {
		return Endpoint{}, err
	}
	return endpointOf(r, e.cfg.Clock()), nil
}

// List returns a page of tenant's endpoints in id order after the cursor
// after (an endpoint id; "" for the start), and the next page's cursor
// ("" on the last page).
func (e *Endpoints) List(ctx context.Context, tx driver.Tx, tenant, after string, limit int) ([]Endpoint, string, error) {
	if err := driver.CheckTx(e.d, tx); err != nil {
		return nil, "", fmt.Errorf("webhookout: %w", err)
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, "", invalid("limit", fmt.Sprintf("must be 1..%d", MaxListLimit))
	}
	rows, err := e.d.WebhookEndpointList(ctx, tx, &driver.WebhookEndpointListParams{Tenant: tenant, AfterID: after, Limit: limit + 1})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = rows[limit-1].ID
	}
	now := e.cfg.Clock()
	out := make([]Endpoint, len(rows))
	for i := range rows {
		out[i] = endpointOf(&rows[i], now)
	}
	return out, next, nil
}

// Update applies p to one of tenant's endpoints.
func (e *Endpoints) Update(ctx context.Context, tx driver.Tx, tenant, id string, p EndpointPatch) (Endpoint, error) {
	r, err := e.get(ctx, tx, tenant, id, true)
	if err != nil {
		return Endpoint{}, err
	}
	if p.URL != nil {
		if err := e.checkURL(*p.URL); err != nil {
			return Endpoint{}, err
		}
		r.URL = *p.URL
	}
	if p.Description != nil {
		if err := checkText("description", *p.Description, MaxDescriptionLen); err != nil {
			return Endpoint{}, err
		}
		r.Description = *p.Description
	}
	if p.EventTypes != nil {
		if err := checkTypes(*p.EventTypes); err != nil {
			return Endpoint{}, err
		}
		types := *p.EventTypes
		if types == nil {
			types = []string{}
		}
		r.EventTypes, _ = json.Marshal(types)
	}
	if p.RateLimit != nil {
		if err := checkRate(*p.RateLimit); err != nil {
			return Endpoint{}, err
		}
		r.RateLimit = *p.RateLimit
	}
	if p.Enabled != nil {
		if *p.Enabled && !r.Enabled {
			// Re-enabled: its failures are forgotten, so that the next one
			// does not disable it at once.
			r.FailingSince, r.DisabledAt, r.DisabledReason = time.Time{}, time.Time{}, ""
		}
		r.Enabled = *p.Enabled
	}
	now := e.cfg.Clock().UTC()
	r.UpdatedAt = now
	if err := e.d.WebhookEndpointUpdate(ctx, tx, &driver.WebhookEndpointUpdateParams{Row: *r}); err != nil {
		return Endpoint{}, err
	}
	return endpointOf(r, now), nil
}

// Delete removes one of tenant's endpoints with its pending deliveries and
// its attempts.
func (e *Endpoints) Delete(ctx context.Context, tx driver.Tx, tenant, id string) error {
	if err := driver.CheckTx(e.d, tx); err != nil {
		return fmt.Errorf("webhookout: %w", err)
	}
	err := e.d.WebhookEndpointDelete(ctx, tx, &driver.WebhookEndpointDeleteParams{Tenant: tenant, ID: id})
	if errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("%w: endpoint %q", ErrNotFound, id)
	}
	return err
}

// RotateSecret gives an endpoint a new secret (generated when newSecret is
// empty) and keeps the current one signing beside it for
// Config.RotationOverlap; secrets already past their overlap are dropped.
// The answer holds the new secret.
func (e *Endpoints) RotateSecret(ctx context.Context, tx driver.Tx, tenant, id, newSecret string) (Endpoint, error) {
	r, err := e.get(ctx, tx, tenant, id, true)
	if err != nil {
		return Endpoint{}, err
	}
	if newSecret == "" {
		newSecret = NewSecret()
	} else if _, err := webhookpub.DecodeSecret(newSecret); err != nil {
		return Endpoint{}, invalid("secret", "must be whsec_ followed by base64 of 24..64 bytes")
	}
	var ss []secret
	if err := json.Unmarshal(r.Secrets, &ss); err != nil {
		return Endpoint{}, fmt.Errorf("webhookout: stored secrets: %w", err)
	}
	now := e.cfg.Clock().UTC()
	until := now.Add(e.cfg.RotationOverlap)
	kept := []secret{{Secret: newSecret}}
	for _, s := range ss {
		switch {
		case s.Until == nil:
			if e.cfg.RotationOverlap > 0 {
				kept = append(kept, secret{Secret: s.Secret, Until: &until})
			}
		case now.Before(*s.Until):
			kept = append(kept, s)
		}
	}
	r.Secrets, _ = json.Marshal(kept)
	r.UpdatedAt = now
	if err := e.d.WebhookEndpointUpdate(ctx, tx, &driver.WebhookEndpointUpdateParams{Row: *r}); err != nil {
		return Endpoint{}, err
	}
	ep := endpointOf(r, now)
	ep.Secret = newSecret
	return ep, nil
}

// Attempt is one logged attempt of a delivery.
type Attempt struct {
	ID        string    `json:"id"`
	EventID   string    `json:"event_id"`
	Attempt   int       `json:"attempt"`
	At        time.Time `json:"at"`
	Status    int       `json:"status"` // the HTTP status; 0 when no answer came
	LatencyMS int64     `json:"latency_ms"`
	// Response is the answer's first ResponseBytes bytes.
	Response string `json:"response"`
	Error    string `json:"error,omitempty"`
}

// AttemptQuery selects a page of an endpoint's attempts.
type AttemptQuery struct {
	// EventID, when set, keeps the attempts of that event only.
	EventID string
	// After is the cursor a previous page returned; "" for the newest.
	After string
	// Limit bounds the page. Default DefaultListLimit; bound 1..MaxListLimit.
	Limit int
}

// Attempts returns a page of the attempts of one of tenant's endpoints,
// newest first, and the next page's cursor ("" on the last page).
func (e *Endpoints) Attempts(ctx context.Context, tx driver.Tx, tenant, id string, q AttemptQuery) ([]Attempt, string, error) {
	if _, err := e.get(ctx, tx, tenant, id, false); err != nil {
		return nil, "", err
	}
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return nil, "", invalid("limit", fmt.Sprintf("must be 1..%d", MaxListLimit))
	}
	var before int64
	if q.After != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(q.After, "att_"), 10, 64)
		if err != nil || n <= 0 || !strings.HasPrefix(q.After, "att_") {
			return nil, "", invalid("after", "is not a cursor this API returned")
		}
		before = n
	}
	rows, err := e.d.WebhookAttemptList(ctx, tx, &driver.WebhookAttemptListParams{Tenant: tenant, EndpointID: id,
		EventID: q.EventID, BeforeID: before, Limit: q.Limit + 1})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
		next = attemptID(rows[q.Limit-1].ID)
	}
	out := make([]Attempt, len(rows))
	for i, r := range rows {
		out[i] = Attempt{ID: attemptID(r.ID), EventID: r.EventID, Attempt: r.Attempt, At: r.At.UTC(), Status: r.Status,
			LatencyMS: r.LatencyMS, Response: r.Response, Error: r.Error}
	}
	return out, next, nil
}

func attemptID(id int64) string { return "att_" + strconv.FormatInt(id, 10) }

// Replay selects what Replay sends again: the one event EventID, or else
// the endpoint's finished deliveries of events created at or after Since.
type Replay struct {
	Since   time.Time `json:"since"`
	EventID string    `json:"event_id"`
}

// Replay makes deliveries of one of tenant's endpoints pending again, due
// now, with their attempts reset; they keep their webhook-id (the event's
// id). An event the endpoint never had a delivery of (it was registered
// later, or its filter did not match then) is delivered anew while the
// outbox still holds it. It returns how many deliveries it made pending:
// at most MaxReplay (replay again from a later Since for more); 0 for an
// event whose delivery is being attempted at this moment.
func (e *Endpoints) Replay(ctx context.Context, tx driver.Tx, tenant, id string, q Replay) (int, error) {
	if _, err := e.get(ctx, tx, tenant, id, false); err != nil {
		return 0, err
	}
	if (q.EventID == "") == q.Since.IsZero() {
		return 0, invalid("replay", "wants either since or event_id")
	}
	now := e.cfg.Clock().UTC()
	if q.EventID != "" {
		if _, err := uuid.Parse(q.EventID); err != nil {
			return 0, invalid("event_id", "is not an event id")
		}
		q.EventID = strings.ToLower(q.EventID)
		key := driver.WebhookDeliveryKey{EndpointID: id, EventID: q.EventID}
		d, err := e.d.WebhookDeliveryGet(ctx, tx, &driver.WebhookDeliveryGetParams{Key: key})
		switch {
		case err == nil && d.Tenant == tenant:
			// A pending delivery is made due now with its attempts reset;
			// one a worker is sending now (0) keeps that attempt's outcome.
			return e.d.WebhookDeliveryReplay(ctx, tx, &driver.WebhookDeliveryReplayParams{Tenant: tenant, EndpointID: id,
				EventID: q.EventID, Now: now, Limit: 1})
		case err != nil && !errors.Is(err, driver.ErrNotFound):
			return 0, err
		}
		m, err := e.d.OutboxGet(ctx, tx, &driver.OutboxGetParams{ID: q.EventID})
		if errors.Is(err, driver.ErrNotFound) || (err == nil && m.Tenant != tenant) {
			return 0, fmt.Errorf("%w: event %q (the outbox keeps events for its retention only)", ErrNotFound, q.EventID)
		}
		if err != nil {
			return 0, err
		}
		// The endpoint gets the plaintext, as the relay's fan-out gives it.
		if err := outbox.OpenRow(ctx, e.cfg.Sealer, m); err != nil {
			return 0, err
		}
		row := driver.WebhookDeliveryRow{WebhookDeliveryKey: key, Tenant: tenant, Type: m.Type, Payload: m.Payload,
			EventCreatedAt: m.CreatedAt, NextAt: now}
		if err := sealDelivery(ctx, e.cfg.Sealer, &row); err != nil {
			return 0, err
		}
		return e.d.WebhookDeliveryInsert(ctx, tx, &driver.WebhookDeliveryInsertParams{Rows: []driver.WebhookDeliveryRow{row}})
	}
	return e.d.WebhookDeliveryReplay(ctx, tx, &driver.WebhookDeliveryReplayParams{Tenant: tenant, EndpointID: id,
		Since: q.Since, Now: now, Limit: MaxReplay})
}
