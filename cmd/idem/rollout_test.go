package main

import (
	"bytes"
	"net/http"
	"testing"
)

// TestIdempotencyKeyOptional: under --idempotency-key=optional (the
// rollout mode) a write without a key runs unguarded, once per request —
// two identical POSTs are two transfers, which is what unguarded means —
// and is counted per operation on /metrics; a write with a key is still
// deduplicated. The default, required, refuses it (TestContract's
// idempotency_key_missing, and the last step here with the setting's
// variable).
func TestIdempotencyKeyOptional(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil, "--idempotency-key", "optional")
		u := p.URL
		account(t, u, "alice", "EUR")
		account(t, u, "bob", "EUR")

		ids := map[string]bool{}
		for range 2 {
			r := call(t, "POST", u+"/v1/transfers", "", transfer("alice", "bob", 100))
			mustStatus(t, r, http.StatusCreated)
			if r.Header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("an unguarded write marked replayed: %v", r.Header)
			}
			id, _ := r.json(t)["id"].(string)
			mustStatus(t, call(t, "GET", u+"/v1/transfers/"+id, "", nil), http.StatusOK)
			ids[id] = true
		}
		batch := map[string]any{"transfers": []any{transfer("alice", "bob", 10)}}
		for range 2 {
			mustStatus(t, call(t, "POST", u+"/v1/transfers/batch", "", batch), http.StatusOK)
		}
		// An invalid unguarded write is refused and leaves nothing.
		if r := call(t, "POST", u+"/v1/transfers", "", transfer("alice", "bob", 0)); r.Status != 400 || r.code(t) != "invalid_request" {
			t.Fatalf("invalid unguarded write: %d %s", r.Status, r.Body)
		}
		first := call(t, "POST", u+"/v1/transfers", "pay-1", transfer("alice", "bob", 1000))
		again := call(t, "POST", u+"/v1/transfers", "pay-1", transfer("alice", "bob", 1000))
		mustStatus(t, first, http.StatusCreated)
		if !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a keyed write is not deduplicated in optional mode: %s\n%s", first.Body, again.Body)
		}
		if b := call(t, "GET", u+"/v1/accounts/bob/balance", "", nil).json(t); len(ids) != 2 || b["credits_posted"] != float64(2*100+2*10+1000) {
			t.Fatalf("%d distinct unguarded transfers, bob %v; want 2 and 1220 credited", len(ids), b)
		}
		for series, want := range map[string]int64{
			`idem_http_unguarded_requests_total{operation="POST /v1/transfers"}`:       3,
			`idem_http_unguarded_requests_total{operation="POST /v1/transfers/batch"}`: 2,
			`idem_http_idempotency_outcomes_total{outcome="unguarded"}`:                5,
			`idem_http_idempotency_outcomes_total{outcome="replayed"}`:                 1,
		} {
			if got := metric(t, u, series); got != want {
				t.Errorf("%s = %d, want %d", series, got, want)
			}
		}
	})
}

// TestIdempotencyKeyRequired: with IDEM_IDEMPOTENCY_KEY=required (the
// default, set explicitly) a write without a key is refused 400
// idempotency_key_missing and does nothing.
func TestIdempotencyKeyRequired(t *testing.T) {
	t.Parallel()
	p, _ := serveDB(t, "sqlite", []string{"IDEM_IDEMPOTENCY_KEY=required"})
	u := p.URL
	account(t, u, "alice", "EUR")
	account(t, u, "bob", "EUR")
	for _, path := range []string{"/v1/transfers", "/v1/transfers/batch"} {
		body := any(transfer("alice", "bob", 100))
		if path == "/v1/transfers/batch" {
			body = map[string]any{"transfers": []any{body}}
		}
		if r := call(t, "POST", u+path, "", body); r.Status != 400 || r.code(t) != "idempotency_key_missing" {
			t.Fatalf("%s without a key: %d %s", path, r.Status, r.Body)
		}
	}
	if b := call(t, "GET", u+"/v1/accounts/bob/balance", "", nil).json(t); b["credits_posted"] != float64(0) {
		t.Fatalf("bob %v after refused writes, want nothing credited", b)
	}
	if got := metric(t, u, `idem_http_idempotency_outcomes_total{outcome="missing_key"}`); got != 2 {
		t.Fatalf("missing_key outcomes %d, want 2", got)
	}
}
