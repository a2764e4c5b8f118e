package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testpg"
)

// Postgres stopped mid-run: requests answer 503 with Retry-After and store
// nothing; when it returns, the service recovers by itself, and no
// acknowledged transfer is lost.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	pg := testpg.NewCluster(t)
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", pg.URL)
	u := p.URL
	account(t, u, "a", "EUR")
	account(t, u, "b", "EUR")

	acked := map[string]bool{} // transfer id → acknowledged with 201
	post := func(i int) response {
		r := call(t, "POST", u+"/v1/transfers", fmt.Sprintf("down-%d", i),
			map[string]any{"id": fmt.Sprintf("t%d", i), "debit_account_id": "a", "credit_account_id": "b", "amount": 1, "currency": "EUR"})
		if r.Status == http.StatusCreated {
			acked[fmt.Sprintf("t%d", i)] = true
		}
		return r
	}
	for i := range 10 {
		mustStatus(t, post(i), http.StatusCreated)
	}

	pg.Pause(t)
	for i := 10; i < 15; i++ {
		r := post(i)
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.code(t) != "unavailable" {
			t.Fatalf("database down: %d %v %s", r.Status, r.Header, r.Body)
		}
	}
	if r := call(t, "GET", u+"/readyz", "", nil); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the database down: %d", r.Status)
	}
	// A read and a write say the same thing of the same outage.
	write, read := post(15).json(t)["detail"], call(t, "GET", u+"/v1/accounts/a", "", nil).json(t)["detail"]
	if write != read || write == nil {
		t.Errorf("503 of a write %q, of a read %q: want one wording", write, read)
	}
	if r := call(t, "GET", u+"/healthz", "", nil); r.Status != http.StatusOK {
		t.Fatalf("healthz is liveness and must not depend on the database: %d", r.Status)
	}
	pg.Resume(t)

	// The same keys again: nothing was stored for them, so they run now.
	waitFor(t, func() bool { return call(t, "GET", u+"/readyz", "", nil).Status == http.StatusOK })
	for i := 10; i < 20; i++ {
		r := post(i)
		mustStatus(t, r, http.StatusCreated)
		if r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("transfer %d replayed an answer stored while the database was down", i)
		}
	}
	for id := range acked {
		mustStatus(t, call(t, "GET", u+"/v1/transfers/"+id, "", nil), http.StatusOK)
	}
	if b := call(t, "GET", u+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(len(acked)) || len(acked) != 20 {
		t.Fatalf("b credited %v for %d acknowledged transfers", b["credits_posted"], len(acked))
	}

	// The log tells the outage once: a line when the 503s began and one
	// when they ended (seven requests answered 503), and the relay inside
	// serve a line when the database went away, not one per retry.
	logs := p.Stderr()
	for msg, want := range map[string]int{`msg="idem: API unavailable"`: 1, `msg="idem: API available again"`: 1,
		`msg="outbox relay: cycle"`: 0, `msg="outbox relay: leases"`: 0} {
		if n := strings.Count(logs, msg); n != want {
			t.Errorf("%d log lines with %s, want %d:\n%s", n, msg, want, logs)
		}
	}
	if n := strings.Count(logs, `msg="outbox relay: database unavailable"`); n > 1 {
		t.Errorf("%d lines say the relay's database is unavailable, want at most 1 for a short outage:\n%s", n, logs)
	}
	if !strings.Contains(logs, `msg="idem: API available again" after=`) || !strings.Contains(logs, "failures=7") {
		t.Errorf("the recovery line does not count the five 503s:\n%s", logs)
	}
}

// serve and relay started on a database that cannot be reached fail at
// once, naming the command that failed: "idem: migrate: …" read as if
// idem migrate had run.
func TestStartOnDatabaseDown(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"serve", "relay"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			_, stderr, code := runIdem(t, noEnv, cmd, "--db", "postgres://idem@127.0.0.1:1/idem", "--db-connect-timeout", "200ms")
			last := strings.TrimSpace(stderr)
			if i := strings.LastIndex(last, "\n"); i >= 0 {
				last = last[i+1:]
			}
			if code != 1 || !strings.HasPrefix(last, "idem: "+cmd+": ") {
				t.Fatalf("idem %s on a database that is down: exit %d, last line %q, want exit 1 and \"idem: %s: …\"\n%s", cmd, code, last, cmd, stderr)
			}
		})
	}
}
