// Package inbox makes a consumer apply each broker message once. Brokers
// deliver at least once (a consumer killed after its commit and before its
// ack gets the message again), so the consumer records the message id under
// a unique constraint in the same transaction as the message's effects: a
// redelivery finds the id and does nothing. Call Process in the transaction
// of the work and ack the message only after that transaction commits: an
// ack before the commit loses the message if the process dies in between.
// The id is the producer's stable message id (for idem's outbox, the outbox
// row's id), never a broker sequence number; see docs/keys.md.
//
// Process runs in a span (kind consumer) of Config.TracerProvider; put the
// message's trace headers in ctx first (ContinueTrace) and that span
// continues the producer's trace.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/tracing"
)

// Limits on names and ids.
const (
	MaxConsumerLen = 200
	MaxIDLen       = 255
	MaxSourceLen   = 255
)

// ErrInvalid: an empty or too long consumer name or message id, or a too
// long source.
var ErrInvalid = errors.New("inbox: invalid consumer or message id")

// Config configures New. The zero value is usable.
type Config struct {
	// Clock returns the current time, recorded as the time a message was
	// processed (DeleteBefore's measure). Default time.Now.
	Clock func() time.Time
	// TracerProvider receives Process's spans. Default
	// otel.GetTracerProvider(), the API's no-op until the program sets one.
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

// Inbox records processed messages on one database.
type Inbox struct {
	d      driver.Driver
	cfg    Config
	tracer trace.Tracer
}

// New returns the inbox of d.
func New(d driver.Driver, cfg Config) (*Inbox, error) {
	if d == nil {
		return nil, errors.New("inbox: nil driver")
	}
	cfg = cfg.withDefaults()
	return &Inbox{d: d, cfg: cfg, tracer: cfg.TracerProvider.Tracer(tracing.Module + "/inbox")}, nil
}

// ContinueTrace returns ctx with the producer's trace context read from a
// delivered message's headers by header (the W3C traceparent and
// tracestate, which idem's relay sets: outbox.HeaderTraceParent), so that
// Process's span, and the spans of its fn, join the producer's trace. It
// returns ctx unchanged when the message has no valid traceparent. For
// NATS pass msg.Header.Get, for a webhook r.Header.Get; for a Kafka record
// a function that finds the record header of that name.
func ContinueTrace(ctx context.Context, header func(name string) string) context.Context {
	return tracing.Parse(ctx, header(tracing.HeaderParent), header(tracing.HeaderState))
}

// Delivery names one message delivered to one consumer: Process records it
// under a unique constraint on the pair.
type Delivery struct {
	// Consumer names the consumer (a queue group, a projection); each
	// consumer applies a message once. 1 to MaxConsumerLen bytes.
	Consumer string
	// MessageID is the producer's stable message id (for idem's outbox the
	// row's id: Nats-Msg-Id, Kafka's idem-id header, webhook-id), never a
	// broker sequence number. 1 to MaxIDLen bytes.
	MessageID string
	// Source is the CloudEvents source of a CloudEvent (ce-source,
	// ce_source, cloudEvents:source), whose MessageID is its id: an event is
	// identified by its source and id together, so two sources' equal ids
	// are two messages. Empty for a message that is not a CloudEvent.
	// At most MaxSourceLen bytes.
	Source string
}

// recordID is the id recorded for dl: a CloudEvent's is "ce:", Source's
// length, ":", Source and MessageID; a plain message's is MessageID, or
// "ce:0:" and MessageID when that starts with "ce:". No two deliveries
// share one: the length prefix splits source from id, and the three forms
// begin differently (a source is never empty, so its length is never 0).
func (dl Delivery) recordID() string {
	switch {
	case dl.Source != "":
		return cePrefix + strconv.Itoa(len(dl.Source)) + ":" + dl.Source + dl.MessageID
	case strings.HasPrefix(dl.MessageID, cePrefix):
		return cePrefix + "0:" + dl.MessageID
	}
	return dl.MessageID
}

const cePrefix = "ce:"

// Process runs fn in tx once per delivery (consumer and message id): the
// first call records it and runs fn; later calls (after that transaction
// committed) return duplicate true without running fn. A concurrent twin
// waits for the first transaction's end. fn's error is returned as is; the
// caller then rolls tx back, which also forgets the id, so a redelivery
// tries again. Ack the message only after committing tx. A nil tx, or one
// of another database than the inbox's, is refused (driver.CheckTx).
//
// Process runs in a span "process <consumer>" of kind consumer, a child of
// ctx's span or of the remote context ContinueTrace put in ctx; fn gets
// the span's context.
func (in *Inbox) Process(ctx context.Context, tx driver.Tx, dl Delivery, fn func(ctx context.Context, tx driver.Tx) error) (duplicate bool, err error) {
	consumer, msgID := dl.Consumer, dl.MessageID
	if len(dl.Source) > MaxSourceLen {
		return false, fmt.Errorf("%w: source of %d bytes, more than %d", ErrInvalid, len(dl.Source), MaxSourceLen)
	}
	if err := driver.CheckTx(in.d, tx); err != nil {
		return false, fmt.Errorf("inbox: %w", err)
	}
	ctx, span := in.tracer.Start(ctx, "process "+consumer, trace.WithSpanKind(trace.SpanKindConsumer))
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.consumer.group.name", consumer),
				attribute.String("messaging.message.id", msgID),
				attribute.Bool("idem.duplicate", duplicate))
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End()
	}()
	if consumer == "" || len(consumer) > MaxConsumerLen || msgID == "" || len(msgID) > MaxIDLen {
		return false, fmt.Errorf("%w: consumer %q, id %q", ErrInvalid, consumer, msgID)
	}
	claimed, err := in.d.InboxClaim(ctx, tx, &driver.InboxClaimParams{Consumer: consumer, MessageID: dl.recordID(), Now: in.cfg.Clock()})
	if err != nil {
		return false, err
	}
	if !claimed {
		return true, nil
	}
	return false, fn(ctx, tx)
}

// DeleteBefore forgets at most limit (1..100000) records processed before
// before, and returns how many it deleted. Keep records longer than the
// broker may redeliver.
func (in *Inbox) DeleteBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 1 || limit > 100000 {
		return 0, fmt.Errorf("inbox: limit %d is outside 1..100000", limit)
	}
	tx, err := in.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	n, err := in.d.InboxDeleteBefore(ctx, tx, &driver.InboxDeleteBeforeParams{Before: before, Limit: limit})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}
