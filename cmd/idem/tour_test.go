package main

import (
	"net/http"
	"testing"
	"time"
)

// The README's five-minute tour, as a test: two accounts, a transfer, its
// retry, a reversal, and the balance as believed before the reversal.
func TestTour(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil)
		u := p.URL
		mustStatus(t, call(t, "POST", u+"/v1/accounts", "create-alice", `{"id":"alice","currency":"EUR"}`), 201)
		mustStatus(t, call(t, "POST", u+"/v1/accounts", "create-bob", `{"id":"bob","currency":"EUR"}`), 201)

		body := `{"debit_account_id":"alice","credit_account_id":"bob","amount":1250,"currency":"EUR"}`
		first := call(t, "POST", u+"/v1/transfers", "order-1042", body)
		mustStatus(t, first, 201)
		retry := call(t, "POST", u+"/v1/transfers", "order-1042", body)
		if retry.Header.Get("Idempotent-Replayed") != "true" || string(retry.Body) != string(first.Body) {
			t.Fatalf("retry: %v %s", retry.Header, retry.Body)
		}
		id := first.json(t)["id"].(string)

		time.Sleep(5 * time.Millisecond)
		beforeReversal := time.Now().UTC()
		time.Sleep(5 * time.Millisecond)
		rev := call(t, "POST", u+"/v1/transfers/"+id+"/reversals", "refund-1042", `{"amount":250,"reason":"one item returned"}`)
		mustStatus(t, rev, 201)
		if r := rev.json(t); r["reverses_id"] != id || r["reason"] != "one item returned" || r["debit_account_id"] != "bob" {
			t.Fatalf("reversal: %s", rev.Body)
		}

		now := call(t, "GET", u+"/v1/accounts/bob/balance", "", nil).json(t)
		then := call(t, "GET", u+"/v1/accounts/bob/balance?as_of="+beforeReversal.Format(time.RFC3339Nano), "", nil).json(t)
		if now["balance"] != float64(1000) || then["balance"] != float64(1250) {
			t.Fatalf("bob now %v, before the reversal %v; want 1000 and 1250", now["balance"], then["balance"])
		}
		tr := call(t, "GET", u+"/v1/transfers/"+id, "", nil)
		mustStatus(t, tr, http.StatusOK)
		if revs, _ := tr.json(t)["reversals"].([]any); len(revs) != 1 || tr.json(t)["amount"] != float64(1250) {
			t.Fatalf("transfer with reversals: %s", tr.Body)
		}

		// The hold: reserved, listed, captured in part; a void after it refused.
		mustStatus(t, call(t, "POST", u+"/v1/transfers", "auth-77",
			`{"id":"auth-77","debit_account_id":"bob","credit_account_id":"alice","amount":800,"currency":"EUR","pending":true,"timeout_seconds":3600}`), 201)
		if b := call(t, "GET", u+"/v1/accounts/bob", "", nil).json(t); b["balance"] != float64(1000) || b["available"] != float64(200) {
			t.Fatalf("bob with the hold: %v", b)
		}
		if open, _ := call(t, "GET", u+"/v1/transfers?status=pending", "", nil).json(t)["data"].([]any); len(open) != 1 {
			t.Fatalf("open holds: %v", open)
		}
		mustStatus(t, call(t, "POST", u+"/v1/transfers/auth-77/post", "capture-77", `{"amount":650}`), 201)
		if r := call(t, "POST", u+"/v1/transfers/auth-77/void", "void-77", `{}`); r.Status != 422 || r.code(t) != "pending_transfer_already_posted" {
			t.Fatalf("void after the capture: %d %s", r.Status, r.Body)
		}
		if b := call(t, "GET", u+"/v1/accounts/bob", "", nil).json(t); b["balance"] != float64(350) || b["debits_pending"] != float64(0) {
			t.Fatalf("bob after the capture: %v", b)
		}
	})
}
