// Command webhookreceiver receives the webhooks an idem service sends to a
// tenant's endpoint (/v1/webhook-endpoints) and applies each event once,
// however often it is delivered: after a retry, a replay, or a relay
// killed between the send and its record.
//
// Every attempt and every replay of an event carries the event's id as
// webhook-id. The receiver is package webhook's Intake with the standard
// profile (Standard Webhooks, the scheme the sender signs with): it
// verifies webhook-signature over the raw bytes with the endpoint's
// secret (any of them during a rotation), names the delivery by
// webhook-id alone, and runs the handler of the event's type in the
// keeper's transaction, so that the effect and the stored answer commit
// together and a second delivery gets the stored answer. So the event goes
// from the sender's commit to the receiver's effect exactly once.
//
//	DATABASE_URL=postgres://… WEBHOOK_SECRET=whsec_… go run ./examples/webhookreceiver
//
// then register http://127.0.0.1:8083/hooks as an endpoint (idem serve
// --webhook-allow-networks 127.0.0.0/8), with the secret it answers.
package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/examples/intake"
	"github.com/idemhq/idem/webhook"
)

// createReceived is the receiver's own table: one row per transfer it
// learnt of.
const createReceived = `CREATE TABLE IF NOT EXISTS received_transfers (
	transfer_id text   PRIMARY KEY,
	amount      bigint NOT NULL,
	event_id    text   NOT NULL
)`

func main() {
	secrets := strings.Fields(os.Getenv("WEBHOOK_SECRET"))
	intake.Serve("127.0.0.1:8083", "POST /hooks", func(ctx context.Context, d driver.Driver) (http.Handler, error) {
		return newReceiver(ctx, d, secrets)
	})
}

// receiver is the endpoint: package webhook's Intake, which verifies the
// delivery, deduplicates it by webhook-id and runs the handler in one
// transaction.
type receiver struct {
	http.Handler
}

// newReceiver takes the endpoint's secrets: one, or two while the sender
// rotates it.
func newReceiver(ctx context.Context, d driver.Driver, secrets []string) (*receiver, error) {
	k, ob, err := intake.Setup(ctx, d, createReceived)
	if err != nil {
		return nil, err
	}
	handlers := webhook.NewRegistry()
	handlers.Handle(webhook.ProviderStandard, "transfer.created", transferCreated)
	in, err := webhook.NewIntake(webhook.IntakeConfig{
		Keeper:    k,
		Outbox:    ob,
		Endpoints: []webhook.Endpoint{{Name: "idem", Provider: webhook.ProviderStandard, Secrets: secrets, Tenant: "receiver"}},
		Handlers:  handlers,
	})
	if err != nil {
		return nil, err
	}
	return &receiver{Handler: in.Endpoint("idem")}, nil
}

// transferCreated records the transfer, in the dedupe transaction.
func transferCreated(ctx context.Context, tx driver.Tx, ev webhook.Event) error {
	var body struct {
		Data struct {
			ID     string `json:"id"`
			Amount int64  `json:"amount"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Body, &body); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO received_transfers (transfer_id, amount, event_id) VALUES ($1, $2, $3)`,
		body.Data.ID, body.Data.Amount, ev.ID)
	return err
}
