package console_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/cmd/idem/internal/server"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/ledger"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }

// leakChecked fails the run when goroutines outlive the tests (a server,
// a pool, a browser connection the tests forgot).
// fakeOutbox is an in-memory OutboxView: the real one arrives with the
// outbox package; these tests check the console's side of the seam.
type fakeOutbox struct {
	mu       sync.Mutex
	stats    inspect.OutboxStats
	dead     []inspect.DeadLetter
	redriven []string
}

func (f *fakeOutbox) Stats(ctx context.Context) (inspect.OutboxStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Dead = int64(len(f.dead))
	return s, nil
}

func (f *fakeOutbox) ListDead(ctx context.Context, limit int) ([]inspect.DeadLetter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]inspect.DeadLetter(nil), f.dead[:min(limit, len(f.dead))]...), nil
}

func (f *fakeOutbox) Redrive(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, d := range f.dead {
		if d.ID == id {
			f.dead = append(f.dead[:i], f.dead[i+1:]...)
			f.redriven = append(f.redriven, id)
			return nil
		}
	}
	return fmt.Errorf("redrive %q: %w", id, inspect.ErrDeadLetterNotFound)
}

func (f *fakeOutbox) Redriven() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.redriven...)
}

func newFakeOutbox(now time.Time) *fakeOutbox {
	return &fakeOutbox{
		stats: inspect.OutboxStats{Pending: 7, OldestPendingAt: now.Add(-90 * time.Second)},
		dead: []inspect.DeadLetter{
			{ID: "msg-1", Tenant: "default", Type: "transfer.created", Attempts: 12, LastError: "nats: timeout",
				CreatedAt: now.Add(-time.Hour), DeadAt: now.Add(-time.Minute)},
			{ID: "msg-2", Tenant: "default", Type: "transfer.reversed", Attempts: 12, LastError: "nats: no responders",
				CreatedAt: now.Add(-time.Hour), DeadAt: now.Add(-time.Minute)},
		},
	}
}

const adminKey = "admin-0123456789abcdef"

func adminHash() *[32]byte {
	h := sha256.Sum256([]byte(adminKey))
	return &h
}

// env is a running service: the HTTP API (internal/server) and the console
// on one real database, behind one real listener.
type env struct {
	D       driver.Driver
	Ledger  *ledger.Ledger
	Console *console.Console
	Outbox  *fakeOutbox
	URL     string
}

// newEnv serves the API and the console on a fresh database of the dialect.
// adminKeyHash nil leaves the console to loopback clients. The console's
// outbox page shows a fake; newRealOutboxEnv shows the database's outbox.
func newEnv(t *testing.T, dialect string, adminKeyHash *[32]byte) *env {
	t.Helper()
	return newEnvWith(t, drivertest.Open(t, dialect), adminKeyHash, nil)
}

func newEnvWith(t *testing.T, d driver.Driver, adminKeyHash *[32]byte, view inspect.OutboxView) *env {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Default()
	cfg.Relay = false // the outbox page here shows the fake below
	srv, err := server.New(context.Background(), cfg, d, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(d, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fo := newFakeOutbox(time.Now())
	if view == nil {
		view = fo
	}
	c, err := console.New(console.Config{Driver: d, Ledger: l, AdminKeyHash: adminKeyHash, Outbox: view, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, c.Handler())
	mux.Handle("/", srv.Handler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &env{D: d, Ledger: l, Console: c, Outbox: fo, URL: hs.URL}
}

var client = &http.Client{Timeout: 30 * time.Second}

// post sends a JSON POST to the API with an Idempotency-Key and decodes the
// answer into out.
func (e *env) post(t *testing.T, path, key string, body, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, e.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, rb)
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			t.Fatal(err)
		}
	}
}

// story is what happened to a customer charged twice: two identical
// charges of 500 from wallet to merchant (the second with another key),
// then the duplicate reversed. The wallet's entries are 1: +2000 funding,
// 2: −500, 3: −500, 4: +500 (the reversal).
type story struct {
	First, Second, Reversal ledger.Transfer
}

func (e *env) tellStory(t *testing.T) story {
	t.Helper()
	var s story
	e.post(t, "/v1/accounts", "acct-bank", map[string]any{"id": "bank", "currency": "EUR"}, nil)
	e.post(t, "/v1/accounts", "acct-wallet", map[string]any{"id": "wallet", "currency": "EUR",
		"flags": map[string]bool{"debits_must_not_exceed_credits": true}}, nil)
	e.post(t, "/v1/accounts", "acct-merchant", map[string]any{"id": "merchant", "currency": "EUR"}, nil)
	e.post(t, "/v1/transfers", "fund-1", map[string]any{"debit_account_id": "bank", "credit_account_id": "wallet",
		"amount": 2000, "currency": "EUR"}, nil)
	e.post(t, "/v1/transfers", "charge-1", map[string]any{"debit_account_id": "wallet", "credit_account_id": "merchant",
		"amount": 500, "currency": "EUR"}, &s.First)
	e.post(t, "/v1/transfers", "charge-1-retry-new-key", map[string]any{"debit_account_id": "wallet", "credit_account_id": "merchant",
		"amount": 500, "currency": "EUR"}, &s.Second)
	e.post(t, "/v1/transfers/"+s.Second.ID+"/reversals", "refund-1", map[string]any{"reason": "charged twice"}, &s.Reversal)
	return s
}

func mustLedger(t *testing.T, d driver.Driver) *ledger.Ledger {
	t.Helper()
	l, err := ledger.New(d, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
