package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/idemtest"
)

func TestMain(m *testing.M) { os.Exit(idemtest.Main(m)) }

const secret = "whsec_test_secret_for_the_example"

const event = `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded",` +
	`"data":{"object":{"id":"pi_3MtwBwLkdIwHu7ix28a3tqPa","object":"payment_intent","amount":2000,"currency":"eur"}}}`

func newTestReceiver(t *testing.T) (*receiver, func() int) {
	t.Helper()
	ctx := context.Background()
	d, err := postgres.Open(ctx, postgres.Config{URL: idemtest.Postgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	rc, err := newReceiver(ctx, d, secret)
	if err != nil {
		t.Fatal(err)
	}
	payments := func() int {
		tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return rc, payments
}

// delivery is one Stripe delivery of body, signed with stripe-go at ts.
func delivery(body, key string, ts time.Time) *http.Request {
	p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: []byte(body), Secret: key, Timestamp: ts})
	r := httptest.NewRequest("POST", "/webhooks/stripe", bytes.NewReader(p.Payload))
	r.Header.Set("Stripe-Signature", p.Header)
	return r
}

// The first test of idem, one line each.
func TestDeliveryIsAppliedOnce(t *testing.T) {
	t.Parallel()
	rc, payments := newTestReceiver(t)
	idemtest.SendTwice(t, rc, delivery(event, secret, time.Now()), payments)

	rc2, payments2 := newTestReceiver(t)
	idemtest.SendConcurrently(t, rc2, delivery(event, secret, time.Now()), 8, payments2)
}

// Stripe's real redelivery carries a new timestamp and signature: the
// event id, not the delivery, is the key.
func TestRedeliveryWithNewSignatureIsReplayed(t *testing.T) {
	t.Parallel()
	rc, payments := newTestReceiver(t)
	for i, ts := range []time.Time{time.Now().Add(-2 * time.Minute), time.Now()} {
		w := httptest.NewRecorder()
		rc.ServeHTTP(w, delivery(event, secret, ts))
		if w.Code != http.StatusOK {
			t.Fatalf("delivery %d: status %d: %s", i, w.Code, w.Body)
		}
		if replayed := w.Header().Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
			t.Errorf("delivery %d: replayed = %v", i, replayed)
		}
	}
	if n := payments(); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
}

// A forged or stale delivery is refused and stores nothing.
func TestForgedOrStaleDeliveryStoresNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  *http.Request
		code string
	}{
		{"wrong secret", delivery(event, "whsec_someone_else", time.Now()), "signature_invalid"},
		{"stale", delivery(event, secret, time.Now().Add(-time.Hour)), "timestamp_stale"},
		{"unsigned", httptest.NewRequest("POST", "/webhooks/stripe", bytes.NewReader([]byte(event))), "signature_missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc, payments := newTestReceiver(t)
			w := httptest.NewRecorder()
			rc.ServeHTTP(w, tt.req)
			if w.Code != http.StatusUnauthorized || !bytes.Contains(w.Body.Bytes(), []byte(tt.code)) {
				t.Errorf("status %d %s, want 401 %s", w.Code, w.Body, tt.code)
			}
			if n := payments(); n != 0 {
				t.Errorf("payments = %d, want 0", n)
			}
		})
	}
}
