// Package outbox sends messages with the database change that caused them.
//
// Enqueue writes a message as a row in the caller's transaction, so the
// message exists if and only if the business change committed. A Relay,
// running in the service or in its own process (idem relay), publishes the
// committed rows to a broker through a Publisher, at least once, with the
// row's id as the broker's deduplication id, in order per ordering key. A
// worker killed between commit and publish leaves the row unsent, and the
// next relay to own its shard publishes it. A worker killed after the publish
// and before marking the row sent publishes it again, with the same id: the
// broker (JetStream's duplicate window) or the consumer (package inbox)
// drops the copy. idemtest.KillRelay kills a real relay process at both
// points and checks that every message reached the broker once.
//
// See docs/outbox.md for the ordering, leasing and retry rules.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/tracing"
	"github.com/idemhq/idem/seal"
)

// Trace context headers (W3C Trace Context). Enqueue stores the context
// of its span with the row, and the relay sends its publish span's context
// in these headers of every message it publishes from a traced row, so
// that the consumer continues the producer's trace (inbox.ContinueTrace).
// They replace headers of the same names set on the Message.
const (
	HeaderTraceParent = tracing.HeaderParent
	HeaderTraceState  = tracing.HeaderState
)

// Limits on one message and one Enqueue call.
const (
	MaxTypeLen        = 255
	MaxKeyLen         = 255
	MaxTenantLen      = 128
	MaxHeaders        = 32
	MaxHeaderLen      = 1024 // a header's name and value, each
	MaxBatch          = 1000 // messages per Enqueue
	DefaultListLimit  = 100
	MaxListLimit      = 1000
	defaultMaxPayload = 1 << 20
	maxMaxPayload     = 16 << 20
)

// Message is one outgoing message.
type Message struct {
	// ID is the stable message id the broker deduplicates by. Enqueue
	// assigns a UUIDv7 when empty; set it (NewID) to know it beforehand.
	ID string
	// Tenant scopes the message; default idem.DefaultTenant. Printable ASCII
	// without spaces, '.', '*' or '>' (it is a NATS subject token).
	Tenant string
	// Type names the event, e.g. "transfer.created". Required.
	Type string
	// Key is the ordering key: messages of one key are published one at a
	// time in commit order. Empty means unordered (the id is the key).
	Key string
	// Payload is the JSON body. Required.
	Payload json.RawMessage
	// Headers travel with the message where the broker has headers.
	Headers map[string]string
	// Trace, when valid, is the span the message's trace continues from in
	// place of Enqueue's own: for one Enqueue of the messages of several
	// requests, each in its request's trace (a group-commit batch).
	Trace trace.SpanContext
	// CreatedAt is set by Enqueue.
	CreatedAt time.Time
}

// Event is a message as GET /v1/events shows it.
type Event struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	CreatedAt   time.Time       `json:"created_at"`
	Payload     json.RawMessage `json:"payload"`
	PublishedAt *time.Time      `json:"published_at"`
}

// ListQuery selects a page of a tenant's messages for List.
type ListQuery struct {
	// Tenant owns the messages. Default idem.DefaultTenant.
	Tenant string
	// After is the cursor a previous page returned; empty: the start.
	After string
	// Limit bounds the page. Default DefaultListLimit; bound
	// 1..MaxListLimit.
	Limit int
}

// DeadQuery selects a page of dead letters for Dead.
type DeadQuery struct {
	// After is the cursor a previous page returned; empty: the start.
	After string
	// Limit bounds the page. Default DefaultListLimit; bound
	// 1..MaxListLimit.
	Limit int
}

// DeadLetter is a message the relay gave up on after its attempts. It holds
// its ordering key until it is redriven.
type DeadLetter struct {
	Message
	Attempts  int
	LastError string
	DeadAt    time.Time
}

var (
	// ErrInvalidMessage is wrapped by *MessageError.
	ErrInvalidMessage = errors.New("outbox: invalid message")
	// ErrInvalidCursor: a List cursor this package did not hand out.
	ErrInvalidCursor = errors.New("outbox: invalid cursor")
	// ErrNotDead: Redrive named no dead letter.
	ErrNotDead = errors.New("outbox: no dead letter has this id")
	// ErrDialect is driver.ErrWrongDialect, which Enqueue and List wrap for
	// a transaction of another database than the outbox's driver.
	//
	// Deprecated: use driver.ErrWrongDialect.
	ErrDialect = driver.ErrWrongDialect
)

// MessageError says which field of which message is invalid.
type MessageError struct {
	Index  int // position in the Enqueue call
	Field  string
	Reason string
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("outbox: message %d: %s %s", e.Index, e.Field, e.Reason)
}

// Code is the stable error code.
func (e *MessageError) Code() string { return "invalid_message" }

func (e *MessageError) Unwrap() error { return ErrInvalidMessage }

// Config configures New. The zero value is usable.
type Config struct {
	// MaxPayloadBytes bounds one message's payload. Default 1 MiB; bound
	// 1..16 MiB.
	MaxPayloadBytes int
	// RedriveDelay is how long a redriven message waits before a relay
	// takes it. Its key stays held that long instead of being released at
	// once, so that a relay cycle that began before the redrive, and judged
	// the key held, keeps it held to its end (docs/outbox.md); the delay
	// covers clock skew between the host that redrives and the relays'
	// hosts. Default 5s; bound 1ms..1h.
	RedriveDelay time.Duration
	// Clock returns the current time: the messages' CreatedAt and the end
	// of a redrive's delay. Default time.Now.
	Clock func() time.Time
	// Sealer, when set, encrypts each message's payload and headers before
	// Enqueue writes them, bound to the row's tenant and id, and opens
	// them for List and Dead; the relay opens them with its own
	// RelayConfig.Sealer before publishing, so brokers and endpoints get
	// the plaintext. Rows written before it was set stay readable. A
	// sealed row read without one fails with idem.ErrNoSealer, and one of
	// a forgotten tenant with seal.ErrForgotten. Enqueue seals in the
	// caller's transaction: with a seal.Preparer, call its Prepare for the
	// tenant before beginning it (on SQLite a tenant's first data key,
	// written inside it, would wait for the writer it holds). Default nil:
	// stored as they are.
	Sealer seal.Sealer
	// TracerProvider receives the outbox.Enqueue span, whose context each
	// enqueued row stores. Default otel.GetTracerProvider(), the API's
	// no-op until the program sets one; then a row stores the context of
	// the caller's span, if any.
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = defaultMaxPayload
	}
	if c.RedriveDelay == 0 {
		c.RedriveDelay = 5 * time.Second
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

func (c Config) validate() error {
	if c.MaxPayloadBytes < 1 || c.MaxPayloadBytes > maxMaxPayload {
		return fmt.Errorf("outbox: MaxPayloadBytes %d is outside 1..%d", c.MaxPayloadBytes, maxMaxPayload)
	}
	if c.RedriveDelay < time.Millisecond || c.RedriveDelay > time.Hour {
		return fmt.Errorf("outbox: RedriveDelay %s is outside 1ms..1h", c.RedriveDelay)
	}
	return nil
}

// Outbox writes and reads outgoing messages on one database.
type Outbox struct {
	d       driver.Driver
	cfg     Config
	tracer  trace.Tracer
	cursors cursorSealer
}

// New returns the outbox of d.
func New(d driver.Driver, cfg Config) (*Outbox, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Outbox{d: d, cfg: cfg, tracer: cfg.TracerProvider.Tracer(tracing.Module + "/outbox")}, nil
}

// NewID returns a fresh time-ordered message id (UUIDv7).
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// Enqueue writes msgs in tx. It never commits: the messages exist once the
// caller commits tx, and never if it rolls back. After the commit, call the
// relay's Notify to publish them without waiting for its poll. A nil tx,
// or one of another database than the outbox's, is refused (driver.CheckTx).
//
// Each row stores the W3C trace context of the outbox.Enqueue span (a
// child of ctx's span), or none when tracing is off and ctx holds no span;
// a message with a valid Trace stores that instead.
func (o *Outbox) Enqueue(ctx context.Context, tx driver.Tx, msgs ...Message) (err error) {
	if err := driver.CheckTx(o.d, tx); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	ctx, span := o.tracer.Start(ctx, "outbox.Enqueue")
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("messaging.batch.message_count", len(msgs)))
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End()
	}()
	if len(msgs) > MaxBatch {
		return fmt.Errorf("%w: %d messages in one Enqueue, limit %d", ErrInvalidMessage, len(msgs), MaxBatch)
	}
	now := o.cfg.Clock().UTC()
	parent, state := tracing.Format(ctx)
	rows := make([]driver.OutboxRow, len(msgs))
	for i, m := range msgs {
		row, err := o.row(i, m, now)
		if err != nil {
			return err
		}
		row.TraceParent, row.TraceState = parent, state
		if m.Trace.IsValid() {
			row.TraceParent, row.TraceState = tracing.Format(trace.ContextWithSpanContext(ctx, m.Trace))
		}
		if err := sealRow(ctx, o.cfg.Sealer, &row); err != nil {
			return err
		}
		rows[i] = row
	}
	return o.d.OutboxInsert(ctx, tx, &driver.OutboxInsertParams{Rows: rows})
}

func (o *Outbox) row(i int, m Message, now time.Time) (driver.OutboxRow, error) {
	bad := func(field, reason string) (driver.OutboxRow, error) {
		return driver.OutboxRow{}, &MessageError{Index: i, Field: field, Reason: reason}
	}
	if m.ID == "" {
		m.ID = NewID()
	} else if _, err := uuid.Parse(m.ID); err != nil {
		return bad("id", "is not a UUID")
	}
	if m.Tenant == "" {
		m.Tenant = idem.DefaultTenant
	}
	if !validToken(m.Tenant, MaxTenantLen) {
		return bad("tenant", fmt.Sprintf("must be 1..%d printable ASCII characters without spaces, '.', '*' or '>'", MaxTenantLen))
	}
	if !validType(m.Type) {
		return bad("type", fmt.Sprintf("must be 1..%d printable ASCII characters without spaces, '*' or '>', not starting or ending with '.'", MaxTypeLen))
	}
	if len(m.Key) > MaxKeyLen || !utf8.ValidString(m.Key) {
		return bad("key", fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxKeyLen))
	}
	if len(m.Payload) == 0 || !json.Valid(m.Payload) {
		return bad("payload", "must be valid JSON")
	}
	if len(m.Payload) > o.cfg.MaxPayloadBytes {
		return bad("payload", fmt.Sprintf("has %d bytes, limit %d", len(m.Payload), o.cfg.MaxPayloadBytes))
	}
	var headers []byte
	if len(m.Headers) > 0 {
		if len(m.Headers) > MaxHeaders {
			return bad("headers", fmt.Sprintf("has %d entries, limit %d", len(m.Headers), MaxHeaders))
		}
		for k, v := range m.Headers {
			if k == "" || len(k) > MaxHeaderLen || len(v) > MaxHeaderLen {
				return bad("headers", fmt.Sprintf("names must be 1..%d bytes and values at most %d", MaxHeaderLen, MaxHeaderLen))
			}
		}
		headers, _ = json.Marshal(m.Headers) // a map of strings always encodes
	}
	key := m.Key
	if key == "" {
		key = m.ID
	}
	return driver.OutboxRow{
		ID: m.ID, Tenant: m.Tenant, Type: m.Type, Key: key, Shard: shardOf(m.Tenant, key),
		Payload: m.Payload, Headers: headers, CreatedAt: now,
	}, nil
}

// shardOf spreads keys over the shards relays lease. It must never change:
// rows already written carry the shard it gave them.
func shardOf(tenant, key string) int {
	h := fnv.New32a()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int(h.Sum32() % driver.OutboxShards)
}

func validToken(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '.' || c == '*' || c == '>' {
			return false
		}
	}
	return true
}

// validType allows dots between tokens: "transfer.created" becomes the
// subject idem.<tenant>.transfer.created.
func validType(s string) bool {
	if s == "" || len(s) > MaxTypeLen || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '*' || c == '>' || (c == '.' && s[i-1] == '.') {
			return false
		}
	}
	return true
}

// List returns a page of q.Tenant's messages in commit order, oldest
// first, after q.After, and the cursor of the following page: "" when this
// page is the last for now. On Postgres a message appears once every
// transaction that began writing before its own has ended, so that no
// message can later be listed before one already listed: following
// cursors never skips one (see docs/outbox.md). A cursor is opaque and
// the tenant's own: it says nothing of other tenants' messages, and
// another tenant's is ErrInvalidCursor (see cursor.go).
func (o *Outbox) List(ctx context.Context, tx driver.Tx, q ListQuery) ([]Event, string, error) {
	if err := driver.CheckTx(o.d, tx); err != nil {
		return nil, "", fmt.Errorf("outbox: %w", err)
	}
	_, limit, err := pageArgs("", q.Limit)
	if err != nil {
		return nil, "", err
	}
	tenant := q.Tenant
	if tenant == "" {
		tenant = idem.DefaultTenant
	}
	var c cursor
	if q.After != "" {
		if c, err = o.openCursor(ctx, tenant, q.After); err != nil {
			return nil, "", err
		}
	}
	rows, err := o.d.OutboxList(ctx, tx, &driver.OutboxListParams{Tenant: tenant, AfterTx: c.tx, AfterPos: c.pos, Limit: limit + 1})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		if next, err = o.sealCursor(ctx, tenant, cursor{tx: last.Tx, pos: last.Pos}); err != nil {
			return nil, "", err
		}
	}
	events := make([]Event, len(rows))
	for i, r := range rows {
		if err := openRow(ctx, o.cfg.Sealer, &r); err != nil {
			return nil, "", err
		}
		events[i] = Event{ID: r.ID, Type: r.Type, CreatedAt: r.CreatedAt, Payload: r.Payload}
		if !r.SentAt.IsZero() {
			t := r.SentAt
			events[i].PublishedAt = &t
		}
	}
	return events, next, nil
}

// Dead returns a page of dead letters in commit order after q.After, and
// the cursor of the following page ("" when this page is the last).
func (o *Outbox) Dead(ctx context.Context, q DeadQuery) ([]DeadLetter, string, error) {
	c, limit, err := pageArgs(q.After, q.Limit)
	if err != nil {
		return nil, "", err
	}
	rows, err := o.d.OutboxListDead(ctx, o.d.Reader(), &driver.OutboxListDeadParams{AfterPos: c.pos, Limit: limit + 1})
	if err != nil {
		return nil, "", err
	}
	rows, next := page(rows, limit)
	out := make([]DeadLetter, len(rows))
	for i, r := range rows {
		if err := openRow(ctx, o.cfg.Sealer, &r); err != nil {
			return nil, "", err
		}
		out[i] = DeadLetter{Message: messageOf(r), Attempts: r.Attempts, LastError: r.LastError, DeadAt: r.DeadAt}
	}
	return out, next, nil
}

// Redrive makes a dead letter live again, with its attempts reset; after
// Config.RedriveDelay the relay publishes it next (it is still first of its key),
// then the rest of its key.
func (o *Outbox) Redrive(ctx context.Context, id string) error {
	tx, err := o.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	p := &driver.OutboxRedriveParams{ID: id, Until: o.cfg.Clock().Add(o.cfg.RedriveDelay)}
	if err := o.d.OutboxRedrive(ctx, tx, p); err != nil {
		if errors.Is(err, driver.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNotDead, id)
		}
		return err
	}
	return tx.Commit(ctx)
}

// A cursor is the list position (driver.OutboxRow Tx and Pos) of the last
// row of a page: "pos" when Tx is 0 (SQLite), "tx.pos" otherwise.
type cursor struct{ tx, pos int64 }

func pageArgs(after string, limit int) (cursor, int, error) {
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return cursor{}, 0, fmt.Errorf("outbox: limit %d is outside 1..%d", limit, MaxListLimit)
	}
	if after == "" {
		return cursor{}, limit, nil
	}
	var c cursor
	txs, poss, two := strings.Cut(after, ".")
	if !two {
		txs, poss = "0", after
	}
	var err1, err2 error
	c.tx, err1 = strconv.ParseInt(txs, 10, 64)
	c.pos, err2 = strconv.ParseInt(poss, 10, 64)
	if err1 != nil || err2 != nil || c.tx < 0 || c.pos < 0 || (two && c.tx == 0) {
		return cursor{}, 0, fmt.Errorf("%w: %q", ErrInvalidCursor, after)
	}
	return c, limit, nil
}

func page(rows []driver.OutboxRow, limit int) ([]driver.OutboxRow, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	last := rows[len(rows)-1]
	if last.Tx == 0 {
		return rows, strconv.FormatInt(last.Pos, 10)
	}
	return rows, strconv.FormatInt(last.Tx, 10) + "." + strconv.FormatInt(last.Pos, 10)
}

func messageOf(r driver.OutboxRow) Message {
	m := Message{ID: r.ID, Tenant: r.Tenant, Type: r.Type, Key: r.Key, Payload: r.Payload, CreatedAt: r.CreatedAt}
	if len(r.Headers) > 0 {
		_ = json.Unmarshal(r.Headers, &m.Headers) // written by Enqueue as a JSON object
	}
	return m
}

// Stats is the outbox's backlog at one moment.
type Stats struct {
	Unsent       int64     // live messages not yet published
	OldestUnsent time.Time // when the oldest of them was enqueued; zero when none
	Dead         int64     // dead letters
}

// Stats counts the backlog: what operators watch (idem outbox stats, the
// console) beside the relay's metrics.
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	s, err := o.d.OutboxStats(ctx, o.d.Reader())
	if err != nil {
		return Stats{}, err
	}
	return Stats{Unsent: s.Unsent, OldestUnsent: s.OldestUnsent, Dead: s.Dead}, nil
}
