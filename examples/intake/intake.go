// Package intake is what the webhook receiver examples (stripereceiver,
// webhookreceiver) share: the service around package webhook's Intake.
// Each example keeps only what is its sender's: the profile and secrets of
// its endpoint, its own table, and the handler that applies an event.
package intake

import (
	"context"
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

// Setup migrates d, creates the receiver's own table (ddl, idempotent) and
// returns the keeper and outbox an Intake runs its handlers with. Senders
// retry for days and replay on demand, so the keeper keeps event ids for
// webhook.Retention, longer than any of them.
func Setup(ctx context.Context, d driver.Driver, ddl string) (*idem.Keeper, *outbox.Outbox, error) {
	if err := d.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	k, err := idem.New(d, idem.Config{Retention: webhook.Retention})
	if err != nil {
		return nil, nil, err
	}
	ob, err := outbox.New(d, outbox.Config{MaxPayloadBytes: webhook.MaxEventPayloadBytes})
	if err != nil {
		return nil, nil, err
	}
	return k, ob, nil
}

// Serve opens the database at $DATABASE_URL, makes the receiver with
// newHandler and serves it at route on $ADDR (addr when unset), until the
// server fails.
func Serve(addr, route string, newHandler func(context.Context, driver.Driver) (http.Handler, error)) {
	ctx := context.Background()
	d, err := postgres.Open(ctx, postgres.Config{URL: os.Getenv("DATABASE_URL")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	h, err := newHandler(ctx, d)
	if err != nil {
		log.Fatal(err)
	}
	if a := os.Getenv("ADDR"); a != "" {
		addr = a
	}
	mux := http.NewServeMux()
	mux.Handle(route, h)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
