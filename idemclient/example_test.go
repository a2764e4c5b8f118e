package idemclient_test

import (
	"context"
	"errors"
	"log"
	"net/http"

	"github.com/idemhq/idem/idemclient"
)

// order is the caller's own record: its key is stored with it before the
// first attempt, in the same transaction that creates the order.
type order struct {
	ID             string
	IdempotencyKey string
}

// The durable intent: the key comes from the caller's own record, so a
// process started after a crash sends the same one and gets the first
// answer, marked replayed, instead of making a second transfer.
func ExampleWithKey() {
	ctx := context.Background()
	o := order{ID: "o-1001", IdempotencyKey: "order-o-1001"} // stored before any call
	c, err := idemclient.New(idemclient.Config{BaseURL: "http://localhost:8080"})
	if err != nil {
		log.Fatal(err)
	}
	tr, err := c.CreateTransfer(ctx, idemclient.TransferParams{DebitAccountID: "bank", CreditAccountID: "alice",
		Amount: 5000, Currency: "EUR"}, idemclient.WithKey(o.IdempotencyKey))
	switch {
	case errors.Is(err, idemclient.ErrInsufficientFunds):
		log.Printf("order %s refused for good: %v", o.ID, err)
	case errors.Is(err, idemclient.ErrBudgetExhausted):
		log.Printf("order %s: unknown yet; send again later with the same key", o.ID)
	case err != nil:
		log.Fatal(err)
	default:
		log.Printf("order %s: transfer %s (replayed: %v)", o.ID, tr.ID, tr.Replayed)
	}
}

// Any http.Client gets the same rules from the round tripper.
func ExampleNewTransport() {
	tr, err := idemclient.NewTransport(nil, idemclient.Policy{MaxAttempts: 5})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	_ = client // client.Post(...) now keeps one key per request and retries what is safe
}
