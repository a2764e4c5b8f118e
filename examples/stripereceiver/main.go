// Command stripereceiver receives Stripe webhooks and applies each event
// once, however often Stripe delivers it.
//
// Stripe redelivers an event it did not see a 2xx for — with the same
// event id (evt_…) but a new timestamp and signature. So the receiver is
// package webhook's Intake, the one `idem serve` runs: it verifies the
// signature over the raw bytes, names the delivery by the event id alone
// (webhook.DedupeRequest), and runs the handler registered for the event
// type inside the keeper's transaction: the payment row, the
// payment.received and webhook.stripe.* outbox events and the stored
// answer commit together. A redelivery gets the stored answer with
// Idempotent-Replayed: true.
//
//	DATABASE_URL=postgres://… STRIPE_WEBHOOK_SECRET=whsec_… go run ./examples/stripereceiver
package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/examples/intake"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/webhook"
)

// createPayments is the receiver's own table.
const createPayments = `CREATE TABLE IF NOT EXISTS payments (
	id             bigserial PRIMARY KEY,
	payment_intent text   NOT NULL,
	amount         bigint NOT NULL
)`

func main() {
	secret := os.Getenv("STRIPE_WEBHOOK_SECRET")
	intake.Serve("127.0.0.1:8082", "POST /webhooks/stripe", func(ctx context.Context, d driver.Driver) (http.Handler, error) {
		return newReceiver(ctx, d, secret)
	})
}

// receiver is the Stripe endpoint: package webhook's Intake, which
// verifies the delivery, deduplicates it by the event id, writes the
// webhook.stripe.<type> event and runs the handler in one transaction, and
// answers Stripe.
type receiver struct {
	http.Handler
	outbox *outbox.Outbox
}

func newReceiver(ctx context.Context, d driver.Driver, secret string) (*receiver, error) {
	k, ob, err := intake.Setup(ctx, d, createPayments)
	if err != nil {
		return nil, err
	}
	rc := &receiver{outbox: ob}
	handlers := webhook.NewRegistry()
	handlers.Handle("stripe", "payment_intent.succeeded", rc.paymentSucceeded)
	in, err := webhook.NewIntake(webhook.IntakeConfig{
		Keeper:    k,
		Outbox:    ob,
		Endpoints: []webhook.Endpoint{{Name: "stripe", Provider: "stripe", Secrets: []string{secret}, Tenant: "shop"}},
		Handlers:  handlers,
	})
	if err != nil {
		return nil, err
	}
	rc.Handler = in.Endpoint("stripe")
	return rc, nil
}

// paymentSucceeded records the payment and announces it, in the dedupe
// transaction. It calls nobody: what must leave goes through the outbox.
func (rc *receiver) paymentSucceeded(ctx context.Context, tx driver.Tx, ev webhook.Event) error {
	var body struct {
		Data struct {
			Object struct {
				ID     string `json:"id"`
				Amount int64  `json:"amount"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Body, &body); err != nil {
		return err
	}
	pi := body.Data.Object
	if _, err := tx.Exec(ctx, `INSERT INTO payments (payment_intent, amount) VALUES ($1, $2)`, pi.ID, pi.Amount); err != nil {
		return err
	}
	payload, _ := json.Marshal(map[string]any{"payment_intent": pi.ID, "amount": pi.Amount, "stripe_event": ev.ID})
	return rc.outbox.Enqueue(ctx, tx, outbox.Message{Tenant: "shop", Type: "payment.received", Key: pi.ID, Payload: payload})
}
