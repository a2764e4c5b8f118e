package webhookout_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/sealtest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookout"
)

// A replay by event id copies a sealed outbox row into a delivery opened,
// as the relay's fan-out would have: the endpoint gets the plaintext. The
// endpoints without the Sealer refuse to copy it (idem.ErrNoSealer).
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
		if got := e.delivery(t, ep.ID, m.ID); string(got.Payload) != string(m.Payload) {
			t.Fatalf("the delivery's payload %s; want the plaintext %s", got.Payload, m.Payload)
		}
	})
}
