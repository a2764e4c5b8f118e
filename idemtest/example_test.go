package idemtest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemtest"
)

// The first test: the same request twice, and eight copies at once, give
// one side effect and one answer. count is your measure of the side effect,
// such as rows in your orders table.
func ExampleSendTwice() {
	var t *testing.T // your test's t
	var handler http.Handler
	var countOrders func() int

	req, _ := http.NewRequest("POST", "/orders", strings.NewReader(`{"sku":"tea"}`))
	req.Header.Set("Idempotency-Key", "order-1")
	idemtest.SendTwice(t, handler, req, countOrders)
	idemtest.SendConcurrently(t, handler, req, 8, countOrders)
}

// The second test, for a relay in your own main: TestMain turns the test
// binary into the relay when KillRelay starts it, and KillRelay kills it
// after its publish, restarts it and checks every message reached NATS once.
func ExampleKillRelay() {
	// In TestMain, before anything else:
	idemtest.RelayMain("my-relay", func(ctx context.Context) error {
		return nil // open the database and run your outbox.Relay until ctx ends
	})

	// In the test:
	var t *testing.T
	var eventIDs []string // outbox message ids your requests enqueued
	dbURL := idemtest.Postgres(t)
	natsURL, messages := idemtest.NATS(t)
	idemtest.KillRelay(t, idemtest.RelayCrash{
		Command:   idemtest.RelayCommand("my-relay", "DATABASE_URL="+dbURL, "NATS_URL="+natsURL),
		Failpoint: idemtest.AfterPublish,
		DB:        dbURL,
		Messages:  messages,
		Want:      eventIDs,
	})
	// With the idem binary instead:
	// Command: idemtest.IdemRelay(idemtest.IdemRelayParams{Bin: "idem", DB: dbURL, Publish: natsURL}).
}
