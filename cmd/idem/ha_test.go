package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testpg"
)

// A PostgreSQL that requires a synchronous standby it does not have (a
// promoted node still naming its lost standby): a transfer is answered 503
// with Retry-After by its deadline, not acknowledged although the primary
// committed it, logged and counted; the relay's lease renewals fail loudly
// instead of hanging it, and the relay says what blocks it once (its
// commits are not confirmed replicated), not "database unavailable" and
// "available again after=0s" at each renewal, while /readyz shows it.
// When the standby requirement goes, the retry with the same key replays
// the transfer, which exists once, and the relay publishes its event.
func TestUnreplicatedCommitNotAcknowledged(t *testing.T) {
	t.Parallel()
	pg := testpg.NewCluster(t)
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", pg.URL,
		"--db-timeout", "1s", "--relay-lease", "3s", "--in-flight-wait", "200ms")
	u := p.URL
	// The standby is not required yet: an account's creation that outruns
	// the 1 s deadline while a loaded machine makes the first connections
	// is retried under its key.
	for _, id := range []string{"a", "b"} {
		waitFor(t, func() bool {
			return call(t, "POST", u+"/v1/accounts", "acct-"+id, map[string]any{"id": id, "currency": "EUR"}).Status == http.StatusCreated
		})
	}

	pg.RequireStandby(t, true)
	body := map[string]any{"id": "t1", "debit_account_id": "a", "credit_account_id": "b", "amount": 5, "currency": "EUR"}
	r := call(t, "POST", u+"/v1/transfers", "unreplicated-1", body)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.code(t) != "unavailable" ||
		!strings.Contains(string(r.Body), "could not confirm") {
		t.Fatalf("a transfer without its standby: %d %v %s", r.Status, r.Header, r.Body)
	}
	if n := metric(t, u, "idem_db_unreplicated_commits_total"); n < 1 {
		t.Fatalf("idem_db_unreplicated_commits_total = %d", n)
	}
	waitFor(t, func() bool {
		return strings.Contains(p.Stderr(), "leases expired without renewal")
	})
	if !strings.Contains(p.Stderr(), "commit not confirmed replicated") {
		t.Fatalf("no log line for the unreplicated commit:\n%s", p.Stderr())
	}
	ready := call(t, "GET", u+"/readyz", "", nil)
	if ready.Status != http.StatusServiceUnavailable || !strings.Contains(string(ready.Body), "database commits not confirmed replicated") {
		t.Fatalf("/readyz while the relay's commits are not confirmed replicated: %d %s", ready.Status, ready.Body)
	}
	for msg, want := range map[string]int{`msg="outbox relay: database commits not confirmed replicated`: 1,
		`msg="outbox relay: database unavailable"`: 0, `msg="outbox relay: database available again"`: 0} {
		if n := strings.Count(p.Stderr(), msg); n != want {
			t.Errorf("%d log lines with %s, want %d:\n%s", n, msg, want, p.Stderr())
		}
	}

	pg.RequireStandby(t, false)
	waitFor(t, func() bool { return call(t, "GET", u+"/readyz", "", nil).Status == http.StatusOK })
	if !strings.Contains(p.Stderr(), `msg="outbox relay: database commits confirmed replicated again"`) {
		t.Errorf("no log line for the relay's commits confirmed again:\n%s", p.Stderr())
	}
	r = call(t, "POST", u+"/v1/transfers", "unreplicated-1", body)
	mustStatus(t, r, http.StatusCreated)
	if r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry did the transfer again instead of replaying what the primary holds: %v", r.Header)
	}
	body["id"] = "t2"
	mustStatus(t, call(t, "POST", u+"/v1/transfers", "unreplicated-2", body), http.StatusCreated)
	if b := call(t, "GET", u+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(10) {
		t.Fatalf("b credited %v for two transfers of 5", b["credits_posted"])
	}
	// The relay recovered by itself: both transfers' events go out, once.
	waitFor(t, func() bool {
		published := map[string]int{}
		for _, e := range allEvents(t, u) {
			if e.Type == "transfer.created" && e.PublishedAt != nil {
				published[string(e.Payload)]++
			}
		}
		return len(published) == 2
	})
}

// The deadline settings on SQLite: nothing to bound beyond the contexts,
// and the service works as before.
func TestDeadlinesOnSQLite(t *testing.T) {
	t.Parallel()
	p, _ := serveDB(t, "sqlite", nil, "--db-timeout", "500ms", "--db-connect-timeout", "100ms", "--relay-lease", "2s")
	u := p.URL
	// A request that outruns the 500 ms deadline on a loaded machine is
	// answered 503 and retried under its key, as a client does: each is
	// done once (b's credits below).
	created := func(path, key string, body map[string]any) {
		t.Helper()
		waitFor(t, func() bool { return call(t, "POST", u+path, key, body).Status == http.StatusCreated })
	}
	for _, id := range []string{"a", "b"} {
		created("/v1/accounts", "acct-"+id, map[string]any{"id": id, "currency": "EUR"})
	}
	for i := range 3 {
		created("/v1/transfers", fmt.Sprintf("sqlite-%d", i),
			map[string]any{"id": fmt.Sprintf("t%d", i), "debit_account_id": "a", "credit_account_id": "b", "amount": 1, "currency": "EUR"})
	}
	if b := call(t, "GET", u+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(3) {
		t.Fatalf("b credited %v for three transfers of 1", b["credits_posted"])
	}
	waitFor(t, func() bool {
		n := 0
		for _, e := range allEvents(t, u) {
			if e.Type == "transfer.created" && e.PublishedAt != nil {
				n++
			}
		}
		return n == 3
	})
}
