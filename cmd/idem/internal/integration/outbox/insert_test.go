package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
)

// A full batch of messages is one statement on either driver, and every
// row is stored as given: in order, with its headers and the enqueuing
// span's trace context.
func TestEnqueueIsOneStatement(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
		spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		state, _ := trace.ParseTraceState("vendor=x")
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID,
			TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true})
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)

		msgs := make([]outbox.Message, outbox.MaxBatch)
		for i := range msgs {
			msgs[i] = msg(fmt.Sprintf("k%d", i%7), i)
			if i%2 == 0 {
				msgs[i].Headers = map[string]string{"x-n": fmt.Sprint(i)}
			}
		}
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		counted := drivertest.Counting(tx)
		if err := ob.Enqueue(ctx, counted, msgs...); err != nil {
			t.Fatal(err)
		}
		if n := counted.Statements(); n != 1 {
			t.Fatalf("Enqueue of %d messages sent %d statements, want 1", len(msgs), n)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}

		rows, err := d.Reader().Query(ctx, `SELECT id, payload, headers, traceparent, tracestate FROM idem_outbox ORDER BY pos`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		i := 0
		wantParent := "00-4bf92f3577b34da6a3ce929d0e0e4736-"
		for ; rows.Next(); i++ {
			var id string
			var payload, headers []byte
			var parent, tstate *string
			if err := rows.Scan(&id, &payload, &headers, &parent, &tstate); err != nil {
				t.Fatal(err)
			}
			if i >= len(msgs) {
				break
			}
			m := msgs[i]
			if id != m.ID || !bytes.Equal(payload, m.Payload) || (headers != nil) != (m.Headers != nil) {
				t.Fatalf("row %d = %s %s headers %s, want %s %s headers %v", i, id, payload, headers, m.ID, m.Payload, m.Headers)
			}
			if parent == nil || len(*parent) < len(wantParent) || (*parent)[:len(wantParent)] != wantParent ||
				tstate == nil || *tstate != "vendor=x" {
				t.Fatalf("row %d trace context = %v %v", i, parent, tstate)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if i != len(msgs) {
			t.Fatalf("%d rows, want %d", i, len(msgs))
		}
	})
}
