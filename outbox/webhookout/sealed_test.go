package webhookout_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/sealtest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookout"
)

// A replay by event id copies a sealed outbox row into a delivery as the
// relay's fan-out would have: opened, then sealed as a delivery's copy,
// so the endpoint gets the plaintext. The endpoints without the Sealer
// refuse to copy it (idem.ErrNoSealer).
func TestReplaySealedEvent(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		s := sealtest.New()
		e := newEnv(t, d, webhookout.DelivererConfig{})
		sealedEps, err := webhookout.New(d, webhookout.Config{AllowNetworks: loopback, Sealer: s})
		if err != nil {
			t.Fatal(err)
		}
		ob, err := outbox.New(d, outbox.Config{Sealer: s})
		if err != nil {
			t.Fatal(err)
		}
		ep := e.create(t, "acme", webhookout.NewEndpoint{URL: "http://127.0.0.1:9/hook"})
		m := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "transfer.created", Payload: json.RawMessage(`{"card":"4111"}`)}
		e.tx(t, func(tx driver.Tx) error { return ob.Enqueue(ctx, tx, m) })

		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.eps.Replay(ctx, tx, "acme", ep.ID, webhookout.Replay{EventID: m.ID}); !errors.Is(err, idem.ErrNoSealer) {
			t.Fatalf("replay of a sealed event without the Sealer: %v; want idem.ErrNoSealer", err)
		}
		_ = tx.Rollback(ctx)
		e.tx(t, func(tx driver.Tx) error {
			_, err := sealedEps.Replay(ctx, tx, "acme", ep.ID, webhookout.Replay{EventID: m.ID})
			return err
		})
		got := e.delivery(t, ep.ID, m.ID)
		plain, err := s.Open(ctx, "idem_webhook_deliveries", "acme", ep.ID+"\x00"+m.ID, got.Payload)
		if !got.Sealed || err != nil || string(plain) != string(m.Payload) {
			t.Fatalf("the delivery (sealed %v) opens to %s (%v); want the event's plaintext %s", got.Sealed, plain, err, m.Payload)
		}
	})
}

// With a Sealer the fan-out stores each delivery's copy of its event
// sealed, and the deliverer sends the plaintext, signed as before.
func TestSealedDeliveries(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		const marker = "MARKER-DELIVERY-30569309025904"
		rc := newReceiver(t, ok)
		e := newEnv(t, d, webhookout.DelivererConfig{Sealer: sealtest.New()})
		ep := e.create(t, "acme", webhookout.NewEndpoint{URL: rc.URL})
		e.run(t)
		m := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "transfer.created", Payload: json.RawMessage(`{"card":"` + marker + `"}`)}
		e.tx(t, func(tx driver.Tx) error { return e.ob.Enqueue(ctx, tx, m) })
		m.CreatedAt = time.Now().UTC()
		if errs := e.fan.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		eventually(t, "delivered", func() bool { return e.delivery(t, ep.ID, m.ID).State == driver.WebhookDelivered })
		got := rc.requests()
		if len(got) != 1 || !strings.Contains(string(got[0].body), marker) || got[0].header.Get("webhook-signature") == "" {
			t.Fatalf("received %d requests, first %s; want the plaintext, signed", len(got), got[0].body)
		}
		if row := e.delivery(t, ep.ID, m.ID); !row.Sealed || strings.Contains(string(row.Payload), marker) {
			t.Fatalf("the stored delivery (sealed %v) holds the plaintext", row.Sealed)
		}
		var plain int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_outbox WHERE NOT sealed`).Scan(&plain); err != nil || plain != 0 {
			t.Fatalf("%d plaintext outbox rows (%v)", plain, err)
		}
	})
}
