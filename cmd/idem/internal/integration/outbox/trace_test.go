package outbox_test

import (
	"context"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
)

// capture is a publisher that keeps every message it is given.
type capture struct {
	mu   sync.Mutex
	msgs map[string]outbox.Message
}

func (c *capture) Publish(_ context.Context, msgs []outbox.Message) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		c.msgs[m.ID] = m
	}
	return make([]error, len(msgs))
}

func (c *capture) Close() error { return nil }

func (c *capture) get(id string) (outbox.Message, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.msgs[id]
	return m, ok
}

// With no TracerProvider configured (this package's tests set none, so the
// global one is the API's no-op), a message enqueued without a span stores
// no trace context (NULL) and is published without trace headers; one
// enqueued under a caller's span context, here a remote one as an HTTP
// server extracts it, stores that context and is published with it
// unchanged.
func TestTraceContextWithoutProvider(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		plain := msg("plain", 1)
		enqueueCtx(t, ctx, d, ob, plain)

		traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
		spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		state, _ := trace.ParseTraceState("vendor=x")
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID,
			TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true})
		const wantParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traced := msg("traced", 1)
		enqueueCtx(t, trace.ContextWithRemoteSpanContext(ctx, sc), d, ob, traced)

		var nulls int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_outbox WHERE traceparent IS NULL AND tracestate IS NULL`).Scan(&nulls); err != nil {
			t.Fatal(err)
		}
		var parent, tstate string
		if err := d.Reader().QueryRow(ctx, `SELECT traceparent, tracestate FROM idem_outbox WHERE traceparent IS NOT NULL`).Scan(&parent, &tstate); err != nil {
			t.Fatal(err)
		}
		if nulls != 1 || parent != wantParent || tstate != "vendor=x" {
			t.Fatalf("stored: %d rows without a trace context (want 1), traced row %q %q", nulls, parent, tstate)
		}

		pub := &capture{msgs: map[string]outbox.Message{}}
		runRelay(t, d, outbox.RelayConfig{Publisher: pub})
		waitFor(t, "both messages published", func() bool {
			_, a := pub.get(plain.ID)
			_, b := pub.get(traced.ID)
			return a && b
		})
		p, _ := pub.get(plain.ID)
		if len(p.Headers) != 0 {
			t.Errorf("untraced message published with headers %v", p.Headers)
		}
		m, _ := pub.get(traced.ID)
		if m.Headers[outbox.HeaderTraceParent] != wantParent || m.Headers[outbox.HeaderTraceState] != "vendor=x" {
			t.Errorf("traced message published with headers %v, want the stored context", m.Headers)
		}
	})
}

// With tracing on, the relay's publish span continues the trace stored
// with a row, and a row stored without one gets no span at all: no root
// trace of one span per untraced message, and no trace headers on it.
func TestRelayStartsNoTraceForUntracedRow(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		plain := msg("plain", 1)
		enqueueCtx(t, ctx, d, ob, plain)
		traceID, _ := trace.TraceIDFromHex("5bf92f3577b34da6a3ce929d0e0e4736")
		spanID, _ := trace.SpanIDFromHex("10f067aa0ba902b7")
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID,
			TraceFlags: trace.FlagsSampled, Remote: true})
		traced := msg("traced", 1)
		enqueueCtx(t, trace.ContextWithRemoteSpanContext(ctx, sc), d, ob, traced)

		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		pub := &capture{msgs: map[string]outbox.Message{}}
		runRelay(t, d, outbox.RelayConfig{Publisher: pub, TracerProvider: tp})
		waitFor(t, "both messages published", func() bool {
			_, a := pub.get(plain.ID)
			_, b := pub.get(traced.ID)
			return a && b
		})
		if p, _ := pub.get(plain.ID); len(p.Headers) != 0 {
			t.Errorf("untraced message published with headers %v", p.Headers)
		}
		m, _ := pub.get(traced.ID)
		if h := m.Headers[outbox.HeaderTraceParent]; len(h) < 36 || h[3:35] != traceID.String() {
			t.Errorf("traced message's traceparent %q, want trace %s", h, traceID)
		}
		waitFor(t, "the traced message's publish span", func() bool { return len(exp.GetSpans()) > 0 })
		for _, s := range exp.GetSpans() {
			var id string
			for _, a := range s.Attributes {
				if a.Key == "messaging.message.id" {
					id = a.Value.AsString()
				}
			}
			switch {
			case id == plain.ID:
				t.Errorf("span %q (trace %s) started for the untraced message", s.Name, s.SpanContext.TraceID())
			case s.SpanContext.TraceID() != traceID || s.Parent.SpanID() != spanID:
				t.Errorf("span %q in trace %s with parent %s, want a child of the stored %s/%s",
					s.Name, s.SpanContext.TraceID(), s.Parent.SpanID(), traceID, spanID)
			}
		}
	})
}

func enqueueCtx(t *testing.T, ctx context.Context, d driver.Driver, ob *outbox.Outbox, msgs ...outbox.Message) {
	t.Helper()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := ob.Enqueue(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
