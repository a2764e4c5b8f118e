// Command stripereceiver receives Stripe webhooks and applies each event
// once, however often Stripe delivers it.
//
// Stripe redelivers an event it did not see a 2xx for — with the same
// event id (evt_…) but a new timestamp and signature. So the receiver
// verifies the signature over the raw bytes (package webhook), names the
// delivery by the event id alone (webhook.DedupeRequest), and runs the
// handler registered for the event type inside the keeper's transaction:
// the payment row, the outbox event and the stored answer commit together.
// A redelivery gets the stored answer with Idempotent-Replayed: true.
//
//	DATABASE_URL=postgres://… STRIPE_WEBHOOK_SECRET=whsec_… go run ./examples/stripereceiver
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
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
	ctx := context.Background()
	d, err := postgres.Open(ctx, postgres.Config{URL: os.Getenv("DATABASE_URL")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	rc, err := newReceiver(ctx, d, os.Getenv("STRIPE_WEBHOOK_SECRET"))
	if err != nil {
		log.Fatal(err)
	}
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8082"
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe", rc)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// receiver is the Stripe endpoint.
type receiver struct {
	ep       webhook.Endpoint
	verifier webhook.Verifier
	keeper   *idem.Keeper
	outbox   *outbox.Outbox
	handlers *webhook.Registry
	now      func() time.Time
}

func newReceiver(ctx context.Context, d driver.Driver, secret string) (*receiver, error) {
	if err := d.Migrate(ctx); err != nil {
		return nil, err
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, createPayments); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	ep := webhook.Endpoint{Name: "stripe", Provider: "stripe", Secrets: []string{secret}, Tenant: "shop"}
	v, err := webhook.NewVerifier(ep)
	if err != nil {
		return nil, err
	}
	k, err := idem.New(d, idem.Config{})
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		return nil, err
	}
	rc := &receiver{ep: ep, verifier: v, keeper: k, outbox: ob, handlers: webhook.NewRegistry(), now: time.Now}
	rc.handlers.Handle("stripe", "payment_intent.succeeded", rc.paymentSucceeded)
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

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// One byte over the endpoint's limit is enough for Verify to refuse it.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<20+1))
	if err != nil {
		var tooBig *http.MaxBytesError
		if !errors.As(err, &tooBig) {
			problem(w, http.StatusBadRequest, "invalid_request")
			return
		}
	}
	ev, err := rc.verifier.Verify(r.Header, body, rc.now())
	if err != nil {
		// Nothing is stored for a delivery that is not Stripe's.
		status, code := webhook.HTTPStatus(err)
		problem(w, status, code)
		return
	}
	res, err := rc.keeper.Do(r.Context(), webhook.DedupeRequest(rc.ep, ev), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		if h, ok := rc.handlers.Lookup(ev.Provider, ev.Type); ok {
			if err := h(ctx, tx, ev); err != nil {
				return idem.Outcome{}, err // rolled back; Stripe's retry runs it again
			}
		}
		b, _ := json.Marshal(map[string]any{"received": true, "event_id": ev.ID, "type": ev.Type})
		return idem.Outcome{Status: http.StatusOK, Body: b}, nil
	})
	switch {
	case errors.Is(err, idem.ErrInFlight):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "request_in_flight")
		return
	case err != nil:
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "unavailable")
		return
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.Body)
}

func problem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d,"code":%q}`, http.StatusText(status), status, code)
}
