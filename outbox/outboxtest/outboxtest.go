// Package outboxtest is the conformance suite every outbox publisher
// passes: run it from the publisher's tests with a real broker (embedded
// NATS, franz-go's kfake, an httptest server, a buffer).
package outboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/outbox"
)

// Received is a message as the broker delivered it.
type Received struct {
	ID      string
	Type    string
	Key     string // "" where the broker does not carry it
	Payload []byte
}

// Harness is one publisher on a fresh broker.
type Harness struct {
	Publisher outbox.Publisher
	// Received returns every message the broker holds so far.
	Received func(t *testing.T) []Received
	// Dedupes says the broker drops a republished id (JetStream).
	Dedupes bool
}

// Run runs the suite; newHarness gives each case a fresh broker.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"DeliversEachMessageWithItsID", deliversEach},
		{"RepublishIsSafe", republish},
		{"EmptyBatch", emptyBatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			t.Cleanup(func() { _ = h.Publisher.Close() })
			c.fn(t, h)
		})
	}
}

func message(i int) outbox.Message {
	return outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "thing.done", Key: fmt.Sprintf("key-%d", i),
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), CreatedAt: time.Now().UTC()}
}

func publish(t *testing.T, h Harness, msgs []outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := h.Publisher.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

func byID(rs []Received) map[string][]Received {
	m := map[string][]Received{}
	for _, r := range rs {
		m[r.ID] = append(m[r.ID], r)
	}
	return m
}

func deliversEach(t *testing.T, h Harness) {
	var msgs []outbox.Message
	for i := range 5 {
		msgs = append(msgs, message(i))
	}
	publish(t, h, msgs)
	got := byID(h.Received(t))
	if len(got) != len(msgs) {
		t.Fatalf("broker holds %d ids, want %d", len(got), len(msgs))
	}
	for _, m := range msgs {
		rs := got[m.ID]
		if len(rs) != 1 {
			t.Fatalf("id %s delivered %d times", m.ID, len(rs))
		}
		r := rs[0]
		if r.Type != m.Type || !jsonEqual(r.Payload, m.Payload) || (r.Key != "" && r.Key != m.Key) {
			t.Fatalf("delivered %+v, want type %s payload %s key %s", r, m.Type, m.Payload, m.Key)
		}
	}
}

func republish(t *testing.T, h Harness) {
	m := message(1)
	publish(t, h, []outbox.Message{m})
	publish(t, h, []outbox.Message{m})
	n := len(byID(h.Received(t))[m.ID])
	switch {
	case h.Dedupes && n != 1:
		t.Fatalf("a deduplicating broker holds %d copies, want 1", n)
	case n < 1 || n > 2:
		t.Fatalf("broker holds %d copies, want 1 or 2 (with the same id)", n)
	}
}

func emptyBatch(t *testing.T, h Harness) {
	if errs := h.Publisher.Publish(context.Background(), nil); len(errs) != 0 {
		t.Fatalf("empty batch gave %d results", len(errs))
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}
