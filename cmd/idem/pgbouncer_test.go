package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/internal/testpgbouncer"
)

// idem load --chaos through PgBouncer in transaction mode: servers
// SIGKILLed, the pooler SIGKILLed and restarted by --chaos-db-restart
// (cutting every client and server connection at once), and NATS nodes
// shut down in turn. Nothing acknowledged is lost or doubled, every event
// is in the stream once, and the operator's commands (ledger verify,
// migrate, keys, outbox) work through the pooler too.
func TestLoadChaosPgBouncer(t *testing.T) {
	t.Parallel()
	pgb := testpgbouncer.New(t, testpg.URL(t), testpgbouncer.Options{PoolSize: 10})
	db := pgb.URL + "&search_path=" + testpg.Schema(t) + "&idem_pooler=transaction"
	serveCfg := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(serveCfg, []byte("relay_lease: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := loadRun(t, "--chaos", "--db", db, "--serve-bin", binary(t), "--serve-config", serveCfg, "--kill-every", "3s",
		"--chaos-db-restart", pgb.RestartCommand(), "--chaos-db-every", "4s",
		"--chaos-nats", "--chaos-nats-every", "5s", "--chaos-nats-down", "2s",
		"--duration", "14s", "--operations", "1000000", "--concurrency", "8", "--seed", "13")
	if err != nil || r.Violations != 0 {
		t.Fatalf("chaos through PgBouncer: %v; %d violations: %v\npooler log:\n%s", err, r.Violations, r.Details, pgb.Log())
	}
	if r.Restarts == 0 || r.DBRestarts == 0 || r.NATSKills == 0 || r.Applied == 0 || r.EventsChecked == 0 || r.Unresolved != 0 {
		t.Fatalf("chaos report: %+v", r)
	}
	t.Logf("chaos through PgBouncer: %d kills, %d pooler restarts, %d NATS node kills; %d operations applied, %d events checked in the stream, %d requests, %d retries",
		r.Restarts, r.DBRestarts, r.NATSKills, r.Applied, r.EventsChecked, r.Requests, r.Retries)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ledger", "verify", "--db", db}, "ledger OK"},
		{[]string{"migrate", "--db", db}, ""},
		{[]string{"outbox", "stats", "--db", db}, ""},
	} {
		out, stderr, code := runIdem(t, nil, c.args...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("idem %s through PgBouncer (%d): %s%s", strings.Join(c.args[:2], " "), code, out, stderr)
		}
	}
}

// A pooler in session mode with fewer server connections than idem's pool
// (bad input): the connections it cannot serve fail at connect instead of
// hanging each request until its deadline, the requests that needed them
// answer 503, and /readyz and the log say what is wrong.
func TestPoolerSessionModeTooSmall(t *testing.T) {
	t.Parallel()
	pgb := testpgbouncer.New(t, testpg.URL(t), testpgbouncer.Options{Session: true, PoolSize: 3})
	db := pgb.URL + "&search_path=" + testpg.Schema(t) + "&idem_pooler=transaction&pool_max_conns=8"
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--db-timeout", "2s", "--db-connect-timeout", "500ms")
	u := p.URL
	// The relay and the janitor hold connections too: an account's
	// creation may meet the shortage already, and is retried.
	for _, id := range []string{"a", "b"} {
		waitFor(t, func() bool {
			return call(t, "POST", u+"/v1/accounts", "acct-"+id, map[string]any{"id": id, "currency": "EUR"}).Status == http.StatusCreated
		})
	}
	var wg sync.WaitGroup
	answers := make([]response, 8)
	for i := range answers {
		wg.Go(func() {
			answers[i] = call(t, "POST", u+"/v1/transfers", fmt.Sprintf("short-%d", i),
				map[string]any{"id": fmt.Sprintf("t%d", i), "debit_account_id": "a", "credit_account_id": "b", "amount": 1, "currency": "EUR"})
		})
	}
	wg.Wait()
	refused := 0
	for i, r := range answers {
		switch r.Status {
		case http.StatusCreated:
		case http.StatusServiceUnavailable:
			if r.Header.Get("Retry-After") == "" {
				t.Errorf("transfer %d: 503 without Retry-After", i)
			}
			refused++
		default:
			t.Errorf("transfer %d through a pooler short of connections: %d %s", i, r.Status, r.Body)
		}
	}
	ready := call(t, "GET", u+"/readyz", "", nil)
	if ready.Status != http.StatusServiceUnavailable || ready.json(t)["reason"] != "database pooler has no server connection free for idem" {
		t.Fatalf("readyz with the pooler short: %d %s", ready.Status, ready.Body)
	}
	// The log is read by a goroutine of the harness: wait for it.
	waitFor(t, func() bool {
		log := p.Stderr()
		return strings.Contains(log, "pool_mode = transaction") && strings.Contains(log, "not ready: database pooler")
	})
	t.Logf("%d of %d transfers refused (503) while the pooler had no server connection for them", refused, len(answers))
}
