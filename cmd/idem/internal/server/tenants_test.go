package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
)

// smallPool opens a fresh migrated database of the dialect whose pool
// holds conns connections (SQLite: its readers), so that a test can take
// them all.
func smallPool(t *testing.T, dialect string, conns int) driver.Driver {
	t.Helper()
	ctx := context.Background()
	var (
		d   driver.Driver
		err error
	)
	switch dialect {
	case "postgres":
		d, err = postgres.Open(ctx, postgres.Config{URL: testpg.URL(t), SearchPath: testpg.Schema(t), MaxConns: int32(conns)})
	case "sqlite":
		d, err = sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "idem.db"), ReadConns: conns})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

// tenantCall is one tenant's request: its answer's status and body.
func tenantCall(t *testing.T, ts *httptest.Server, token, method, path, key, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Error(err)
	}
	return res.StatusCode, b
}

const (
	tokenA = "key-for-tenant-a-0123"
	tokenB = "key-for-tenant-b-0123"
)

// twoTenants is the service on d without a relay, with API keys for
// tenants "a" and "b", each with accounts x and y and one transfer x → y
// of 5, and its handler wrapped by wrap.
func twoTenants(t *testing.T, d driver.Driver, wrap func(http.Handler) http.Handler, edit func(*config.Config)) (*Server, *httptest.Server) {
	t.Helper()
	cfg := config.Default()
	cfg.Relay = false
	var err error
	if cfg.APIKeys, err = config.ParseAPIKeys("a:" + tokenA + ",b:" + tokenB); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	for _, token := range []string{tokenA, tokenB} {
		for _, acct := range []string{"x", "y"} {
			if st, b := tenantCall(t, ts, token, "POST", "/v1/accounts", "acct-"+acct, `{"id":"`+acct+`","currency":"EUR"}`); st != 201 {
				t.Fatalf("create account %s: %d %s", acct, st, b)
			}
		}
		if st, b := tenantCall(t, ts, token, "POST", "/v1/transfers", "t-0", `{"debit_account_id":"x","credit_account_id":"y","amount":5,"currency":"EUR"}`); st != 201 {
			t.Fatalf("transfer: %d %s", st, b)
		}
	}
	return s, ts
}

// TestAsOfWaitHoldsNoConnection is the two-tenant scenario of a future
// as_of: tenant A's clients ask balances as of a moment 950 ms ahead, more
// of them than the pool has connections. While they wait for the moment,
// the pool holds none of their connections (none in use, so none idle in
// a transaction), and tenant B's write and reads are answered while every
// one of A's requests is still waiting. A's answers come once the moment
// has passed, and are right.
func TestAsOfWaitHoldsNoConnection(t *testing.T) {
	t.Parallel()
	const conns, clientsA = 4, 8
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			d := smallPool(t, dialect, conns)
			var waitingA atomic.Int64 // A's as-of requests entered and not answered
			_, ts := twoTenants(t, d, func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Query().Has("as_of") {
						waitingA.Add(1)
						defer waitingA.Add(-1)
					}
					next.ServeHTTP(w, r)
				})
			}, nil)

			at := time.Now().Add(950 * time.Millisecond)
			q := "?as_of=" + url.QueryEscape(at.UTC().Format(time.RFC3339Nano))
			var wg sync.WaitGroup
			answers := make([]ledger.Balance, clientsA)
			for i := range clientsA {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, b := tenantCall(t, ts, tokenA, "GET", "/v1/accounts/y/balance"+q, "", "")
					if st != 200 {
						t.Errorf("A's as-of read: %d %s", st, b)
						return
					}
					if err := json.Unmarshal(b, &answers[i]); err != nil {
						t.Error(err)
					}
				}()
			}
			// Every one of A's requests has arrived; then, while they all
			// wait, the pool's connections are all given back.
			for arrived := time.Now(); waitingA.Load() < clientsA; time.Sleep(time.Millisecond) {
				if time.Since(arrived) > 10*time.Second {
					t.Fatalf("only %d of A's requests arrived", waitingA.Load())
				}
			}
			for d.PoolStats().InUse > 0 && waitingA.Load() == clientsA {
				time.Sleep(time.Millisecond)
			}
			if n := waitingA.Load(); n != clientsA {
				t.Fatalf("%d of A's requests answered while the pool still had %d connections in use: "+
					"they held them while waiting for the moment", clientsA-n, d.PoolStats().InUse)
			}

			// B writes and reads with every connection free.
			if st, b := tenantCall(t, ts, tokenB, "POST", "/v1/transfers", "t-1", `{"debit_account_id":"x","credit_account_id":"y","amount":7,"currency":"EUR"}`); st != 201 {
				t.Fatalf("B's transfer: %d %s", st, b)
			}
			st, b := tenantCall(t, ts, tokenB, "GET", "/v1/accounts/y/balance", "", "")
			var bal ledger.Balance
			if err := json.Unmarshal(b, &bal); st != 200 || err != nil || bal.Balance != 12 {
				t.Fatalf("B's balance: %d %s", st, b)
			}
			if n := waitingA.Load(); n != clientsA {
				t.Fatalf("B was answered after %d of A's waiting requests: it waited for them", clientsA-n)
			}

			wg.Wait()
			for i, a := range answers {
				if a.Balance != 5 || !a.AsOf.Equal(at.UTC()) {
					t.Errorf("A's answer %d: %+v, want a balance of 5 as of %s", i, a, at.UTC())
				}
			}
			if !time.Now().After(at) {
				t.Error("A was answered before the moment passed")
			}
		})
	}
}

// eventsPage is a page of GET /v1/events.
type eventsPage struct {
	Data []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	} `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// TestEventCursorsAreTenantsOwn: tenant B pages through its events one at
// a time while tenant A's events are interleaved with them. B lists each
// of its events once, in order; its cursors are opaque (not the shared
// outbox position, so the gap between two says nothing of A's events),
// all of one length; and another tenant presenting one of B's cursors is
// refused, as is a cursor altered by one character or a plain position.
func TestEventCursorsAreTenantsOwn(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		_, ts := twoTenants(t, d, nil, nil)
		// B's transfers, with 0, 1, 5 and 20 of A's between them.
		for i, between := range []int{0, 1, 5, 20} {
			for j := range between {
				if st, b := tenantCall(t, ts, tokenA, "POST", "/v1/transfers", fmt.Sprintf("a-%d-%d", i, j), `{"debit_account_id":"x","credit_account_id":"y","amount":1,"currency":"EUR"}`); st != 201 {
					t.Fatalf("A's transfer: %d %s", st, b)
				}
			}
			if st, b := tenantCall(t, ts, tokenB, "POST", "/v1/transfers", fmt.Sprintf("b-%d", i), fmt.Sprintf(`{"id":"b%d","debit_account_id":"x","credit_account_id":"y","amount":1,"currency":"EUR"}`, i)); st != 201 {
				t.Fatalf("B's transfer: %d %s", st, b)
			}
		}
		var (
			ids     []string
			cursors []string
		)
		// An event is listed once no transaction older than its own is
		// still open on the database (docs/api.md, GET /v1/events): other
		// tests' transactions on the same server may delay that, so B
		// lists again until its seven are visible, for at most 30 s.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ids, cursors = nil, nil
			for after := ""; ; {
				st, b := tenantCall(t, ts, tokenB, "GET", "/v1/events?limit=1&after="+url.QueryEscape(after), "", "")
				var p eventsPage
				if err := json.Unmarshal(b, &p); st != 200 || err != nil {
					t.Fatalf("B's events after %q: %d %s", after, st, b)
				}
				for _, e := range p.Data {
					ids = append(ids, e.Type+" "+e.ID)
				}
				if p.NextCursor == nil {
					break
				}
				after = *p.NextCursor
				cursors = append(cursors, after)
			}
			if len(ids) >= 7 || time.Now().After(deadline) {
				break
			}
		}
		// Two accounts, the setup transfer and four: seven events.
		if len(ids) != 7 || len(slices.Compact(slices.Clone(ids))) != 7 {
			t.Fatalf("B listed %d events: %v", len(ids), ids)
		}
		for _, c := range cursors {
			if len(c) != len(cursors[0]) {
				t.Fatalf("cursors of different lengths: %q", cursors)
			}
			if strings.Trim(c, "0123456789.") == "" {
				t.Fatalf("cursor %q is a list position, shared by every tenant", c)
			}
		}
		// A plain list position (the form of releases before sealed
		// cursors) is refused: with it a tenant could probe the shared
		// positions around its own events.
		for _, plain := range []string{"0", "1", "7", "0.0", "1.5", "9223372036854775807"} {
			if st, b := tenantCall(t, ts, tokenB, "GET", "/v1/events?limit=1&after="+plain, "", ""); st != 400 || !strings.Contains(string(b), "after") {
				t.Fatalf("plain cursor %q: %d %s, want 400 for after", plain, st, b)
			}
		}
		for _, c := range cursors {
			for _, try := range []struct{ token, after string }{
				{tokenA, c}, // another tenant's cursor
				{tokenB, c[:len(c)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(c, "AA")]},
			} {
				st, b := tenantCall(t, ts, try.token, "GET", "/v1/events?limit=1&after="+url.QueryEscape(try.after), "", "")
				if st != 400 || !strings.Contains(string(b), "after") {
					t.Fatalf("cursor %q (of B's %q): %d %s, want 400 for after", try.after, c, st, b)
				}
			}
		}
	})
}

// limitedCount is idem_tenant_requests_limited_total{tenant, limit}.
func limitedCount(t *testing.T, s *Server, tenant, limit string) float64 {
	t.Helper()
	mfs, err := s.metrics.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idem_tenant_requests_limited_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tenant"] == tenant && labels["limit"] == limit {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// inFlight is idem_tenant_requests_in_flight{tenant}.
func inFlight(t *testing.T, s *Server, tenant string) float64 {
	t.Helper()
	mfs, err := s.metrics.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idem_tenant_requests_in_flight" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == tenant {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestTenantLimits: over its request rate or its concurrency, a tenant is
// answered 429 rate_limited with Retry-After (never 503), nothing done,
// counted per tenant and limit; the other tenant is served meanwhile.
func TestTenantLimits(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		t.Run("rate", func(t *testing.T) {
			s, ts := twoTenants(t, d, nil, func(c *config.Config) { c.TenantRate, c.TenantBurst = 0.01, 9 })
			// The setup spent 3 of each tenant's 9; three more reads, then
			// a transfer over the rate.
			for range 6 {
				if st, b := tenantCall(t, ts, tokenA, "GET", "/v1/accounts/y/balance", "", ""); st != 200 {
					t.Fatalf("A's read within its burst: %d %s", st, b)
				}
			}
			req, err := http.NewRequest("POST", ts.URL+"/v1/transfers", strings.NewReader(`{"id":"over","debit_account_id":"x","credit_account_id":"y","amount":1,"currency":"EUR"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tokenA)
			req.Header.Set("Idempotency-Key", "over")
			req.Header.Set("Content-Type", "application/json")
			res, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 429 || !strings.Contains(string(b), `"rate_limited"`) || res.Header.Get("Retry-After") == "" {
				t.Fatalf("A over its rate: %d %q %s", res.StatusCode, res.Header.Get("Retry-After"), b)
			}
			var n int
			if err := d.Reader().QueryRow(context.Background(), "SELECT count(*) FROM ledger_transfers WHERE id = 'over'").Scan(&n); err != nil || n != 0 {
				t.Fatalf("the refused transfer: %d rows (%v)", n, err)
			}
			if st, b := tenantCall(t, ts, tokenB, "GET", "/v1/accounts/y/balance", "", ""); st != 200 {
				t.Fatalf("B while A is over its rate: %d %s", st, b)
			}
			if got := limitedCount(t, s, "a", "rate"); got != 1 {
				t.Fatalf("limited{a, rate} = %v, want 1", got)
			}
			if got := limitedCount(t, s, "b", "rate"); got != 0 {
				t.Fatalf("limited{b, rate} = %v, want 0", got)
			}
		})
		t.Run("concurrency", func(t *testing.T) {
			s, ts := twoTenants(t, d, nil, func(c *config.Config) { c.TenantConcurrency = 2 })
			// Two of A's requests in progress: reads as of a moment ahead.
			q := "?as_of=" + url.QueryEscape(time.Now().Add(900*time.Millisecond).UTC().Format(time.RFC3339Nano))
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if st, b := tenantCall(t, ts, tokenA, "GET", "/v1/accounts/y/balance"+q, "", ""); st != 200 {
						t.Errorf("A's waiting read: %d %s", st, b)
					}
				}()
			}
			for inFlight(t, s, "a") < 2 {
				time.Sleep(time.Millisecond)
			}
			st, b := tenantCall(t, ts, tokenA, "GET", "/v1/accounts/y/balance", "", "")
			stB, bB := tenantCall(t, ts, tokenB, "GET", "/v1/accounts/y/balance", "", "")
			wg.Wait()
			if st != 429 || !strings.Contains(string(b), `"rate_limited"`) {
				t.Fatalf("A's third request at once: %d %s", st, b)
			}
			if stB != 200 {
				t.Fatalf("B meanwhile: %d %s", stB, bB)
			}
			if got := limitedCount(t, s, "a", "concurrency"); got != 1 {
				t.Fatalf("limited{a, concurrency} = %v, want 1", got)
			}
			if st, b := tenantCall(t, ts, tokenA, "GET", "/v1/accounts/y/balance", "", ""); st != 200 {
				t.Fatalf("A once its requests ended: %d %s", st, b)
			}
		})
	})
}

// TestEventsListingWaitsOnlyForEarlierWriters pins down what docs/api.md
// says the listing delay of GET /v1/events depends on, on PostgreSQL:
// tenant B's event is held back exactly while a transaction that began
// writing before B's, here tenant A's, is open, and not by one of A's
// that began writing after it. (SQLite has one writer: B's write would
// wait for A's transaction instead, and its event is listed at commit.)
func TestEventsListingWaitsOnlyForEarlierWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := drivertest.Open(t, "postgres")
	s, ts := twoTenants(t, d, nil, nil)
	openWriter := func() driver.TxCloser {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		if err := s.outbox.Enqueue(ctx, tx, outbox.Message{Tenant: "a", Type: "test.long", Key: "k", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		// The insert may travel with the next statement: send one, so the
		// transaction has written (and has its id) now.
		var xid string
		if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	listedB := func() bool {
		st, b := tenantCall(t, ts, tokenB, "GET", "/v1/events?limit=1000", "", "")
		var p eventsPage
		if err := json.Unmarshal(b, &p); st != 200 || err != nil {
			t.Fatalf("B's events: %d %s", st, b)
		}
		return len(p.Data) == 4 // the setup's three events, then the transfer's
	}
	earlier := openWriter()
	if st, b := tenantCall(t, ts, tokenB, "POST", "/v1/transfers", "b-late", `{"debit_account_id":"x","credit_account_id":"y","amount":1,"currency":"EUR"}`); st != 201 {
		t.Fatalf("B's transfer: %d %s", st, b)
	}
	if listedB() {
		t.Fatal("B's event listed while an earlier writer of A's is open: the listing would not be in order")
	}
	later := openWriter()
	if err := earlier.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Other tests' transactions on the same server delay it too, briefly.
	for start := time.Now(); !listedB(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("B's event not listed once the earlier writer ended, with a later one of A's open")
		}
	}
	_ = later.Rollback(ctx)
}
