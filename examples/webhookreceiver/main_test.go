package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookout"
)

func TestMain(m *testing.M) { os.Exit(idemtest.Main(m)) }

// The sender's real deliverer sends a transfer.created event, then sends
// it again (a replay, as after a lost answer); the receiver verifies both
// and applies the event once: one row, and the second delivery answered
// from the store.
func TestEventAppliedOnceAcrossRedelivery(t *testing.T) {
	ctx := context.Background()
	// The receiver, on its own database.
	rd, err := postgres.Open(ctx, postgres.Config{URL: idemtest.Postgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })

	// The sender: an idem database with one endpoint of tenant acme.
	sd, err := postgres.Open(ctx, postgres.Config{URL: idemtest.Postgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	if err := sd.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	eps, err := webhookout.New(sd, webhookout.Config{AllowNetworks: loopback})
	if err != nil {
		t.Fatal(err)
	}
	var answers, replayed atomic.Int64
	var rc *receiver
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		rc.ServeHTTP(rec, r)
		if rec.Code == http.StatusOK {
			answers.Add(1)
		}
		if rec.Header().Get("Idempotent-Replayed") == "true" {
			replayed.Add(1)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)

	tx, err := sd.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := eps.Create(ctx, tx, "acme", webhookout.NewEndpoint{URL: srv.URL + "/hooks", EventTypes: []string{"transfer.*"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if rc, err = newReceiver(ctx, rd, []string{ep.Secret}); err != nil {
		t.Fatal(err)
	}

	w, err := webhookout.NewDeliverer(sd, webhookout.DelivererConfig{AllowNetworks: loopback,
		PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fan, err := webhookout.NewFanOut(sd, webhookout.FanOutConfig{Written: w.Notify})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	// The event as the relay hands it over: the outbox row, then the fan-out.
	ob, err := outbox.New(sd, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"id": "tr_1", "amount": 500})
	m := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "transfer.created", Payload: payload}
	tx, err = sd.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Enqueue(ctx, tx, m); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m.CreatedAt = time.Now()
	if errs := fan.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	waitFor(t, func() bool { return answers.Load() == 1 })
	waitFor(t, func() bool { // the sender has recorded it
		r, err := sd.WebhookDeliveryGet(ctx, sd.Reader(), &driver.WebhookDeliveryGetParams{
			Key: driver.WebhookDeliveryKey{EndpointID: ep.ID, EventID: m.ID}})
		return err == nil && r.State == driver.WebhookDelivered
	})

	// Sent again, by a replay: the same webhook-id.
	tx, err = sd.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := eps.Replay(ctx, tx, "acme", ep.ID, webhookout.Replay{EventID: m.ID}); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	w.Notify()
	waitFor(t, func() bool { return answers.Load() == 2 })

	if replayed.Load() != 1 {
		t.Errorf("%d deliveries answered from the store, want 1", replayed.Load())
	}
	var rows int
	var eventID string
	if err := rd.Reader().QueryRow(ctx, `SELECT count(*), max(event_id) FROM received_transfers`).Scan(&rows, &eventID); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || eventID != m.ID {
		t.Fatalf("received_transfers: %d rows (event %s), want 1 of %s", rows, eventID, m.ID)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
