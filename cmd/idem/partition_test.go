package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/netfault"
	"github.com/idemhq/idem/internal/testpg"
)

// A network between idem and PostgreSQL that drops everything without
// refusing (a blackhole): requests are answered 503 with Retry-After by
// their deadline instead of hanging, hold no claim (their keys run once
// the network is back, not replayed, not in flight), and the service
// recovers by itself. Afterwards no connection, server session or
// goroutine is left behind.
func TestPartitionBlackhole(t *testing.T) {
	t.Parallel()
	// A schema of its own on the shared server: the proxy needs only its
	// address.
	pgURL, err := url.Parse(drivertest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(pgURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	viaProxy := *pgURL
	viaProxy.Host = proxy.Addr()
	q := viaProxy.Query()
	// The schema's name makes the sessions counted below this test's,
	// though other runs share the server.
	appName := "idem-partition-" + q.Get("search_path")
	q.Set("application_name", appName)
	viaProxy.RawQuery = q.Encode()

	// Bounds a loaded machine fits. Every connection that served a
	// request during the partition was broken when the request's
	// deadline passed (none is left dead in the pool: the proxy loses no
	// byte), so the first transfer after the heal connects anew and
	// prepares its statements. Under the race detector on a loaded
	// machine, a connection took more than 500ms (serve even failed to
	// start) and that transfer more than 1s: it answered 503 though the
	// service had recovered. With 2s a transfer has the budget /readyz
	// has, so a service ready again is one that can answer it.
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", viaProxy.String(),
		"--db-timeout", "2s", "--db-connect-timeout", "2s", "--relay-lease", "3s", "--in-flight-wait", "200ms")
	u := p.URL
	account(t, u, "a", "EUR")
	account(t, u, "b", "EUR")
	post := func(i int) response {
		return call(t, "POST", u+"/v1/transfers", fmt.Sprintf("partition-%d", i),
			map[string]any{"id": fmt.Sprintf("t%d", i), "debit_account_id": "a", "credit_account_id": "b", "amount": 1, "currency": "EUR"})
	}
	mustStatus(t, post(0), http.StatusCreated)
	// The goroutines counted before the partition are taken once the
	// relay has published what was written: its first publishes start
	// the embedded NATS server's stream goroutines for good.
	waitFor(t, func() bool {
		return metric(t, u, "idem_outbox_published_total") > 0 && metric(t, u, "idem_outbox_backlog") == 0
	})
	goroutines := metric(t, u, "go_goroutines")
	if goroutines == 0 {
		t.Fatal("no go_goroutines in /metrics")
	}

	t0 := time.Now()
	proxy.Blackhole()
	var wg sync.WaitGroup
	answers := make([]response, 4)
	for i := range answers {
		wg.Go(func() { answers[i] = post(i + 1) })
	}
	wg.Wait()
	answered := time.Since(t0)
	for i, r := range answers {
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.code(t) != "unavailable" {
			t.Fatalf("transfer %d during the partition: %d %v %s", i+1, r.Status, r.Header, r.Body)
		}
	}
	if r := call(t, "GET", u+"/readyz", "", nil); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("readyz during the partition: %d %s", r.Status, r.Body)
	}
	t.Logf("partition: transfers answered after %s, /readyz after %s", answered, time.Since(t0))
	proxy.Heal()
	healed := time.Now()

	waitFor(t, func() bool { return call(t, "GET", u+"/readyz", "", nil).Status == http.StatusOK })
	for i := 1; i <= len(answers); i++ {
		r := post(i)
		mustStatus(t, r, http.StatusCreated)
		if r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("transfer %d replayed an answer from the partition", i)
		}
	}
	t.Logf("recovered %s after the heal", time.Since(healed))
	if b := call(t, "GET", u+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(1+len(answers)) {
		t.Fatalf("b credited %v for %d transfers", b["credits_posted"], 1+len(answers))
	}

	// Nothing left behind: no server session of idem's in a transaction
	// (a claim held), no more proxied connections than the pool holds
	// open, and the process's goroutines back to where they were.
	conn, err := pgx.Connect(context.Background(), testpg.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	waitFor(t, func() bool {
		var inTx, sessions int
		if err := conn.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE state LIKE 'idle in transaction%'), count(*)
  FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&inTx, &sessions); err != nil {
			t.Fatal(err)
		}
		open := metric(t, u, `idem_db_pool_connections{state="in_use"}`) + metric(t, u, `idem_db_pool_connections{state="idle"}`)
		g := metric(t, u, "go_goroutines")
		ok := inTx == 0 && int64(sessions) == open && int64(proxy.Conns()) == open && g <= goroutines+2
		if !ok {
			t.Logf("in transaction %d, sessions %d, proxied %d, pool %d; goroutines %d (before %d)",
				inTx, sessions, proxy.Conns(), open, g, goroutines)
		}
		return ok
	})
}
