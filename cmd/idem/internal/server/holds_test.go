package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
)

// newHoldServers builds two services on one database, as two serve
// processes would be, and serves the first's API.
func newHoldServers(t *testing.T, d driver.Driver) (*apiClient, [2]*Server) {
	t.Helper()
	var ss [2]*Server
	for i := range ss {
		cfg := config.Default()
		cfg.Relay = false
		s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ss[i] = s
	}
	ts := httptest.NewServer(ss[0].Handler())
	t.Cleanup(ts.Close)
	return &apiClient{t: t, base: ts.URL, doc: loadDoc(t), seen: map[string]bool{}}, ss
}

// eventsOf counts the outbox rows of each type, as committed.
func eventsOf(t *testing.T, d driver.Driver) map[string]int {
	t.Helper()
	rows, err := d.Reader().Query(context.Background(), "SELECT type, count(*) FROM idem_outbox GROUP BY type")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			t.Fatal(err)
		}
		out[typ] = n
	}
	return out
}

func holdBody[T any](t *testing.T, r apiResponse) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("%s: %v", r.Body, err)
	}
	return v
}

type holdAccount struct {
	DebitsPosted   int64 `json:"debits_posted"`
	CreditsPosted  int64 `json:"credits_posted"`
	DebitsPending  int64 `json:"debits_pending"`
	CreditsPending int64 `json:"credits_pending"`
	Balance        int64 `json:"balance"`
	Available      int64 `json:"available"`
}

type holdTransfer struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Amount    int64  `json:"amount"`
	PendingID string `json:"pending_id"`
	SettledBy string `json:"settled_by"`
}

// A hold over HTTP: reserved, posted in part under its own key, its
// second settlement refused, its events in the outbox; another hold
// expires once though two services race to expire it.
func TestHoldsOverHTTP(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		c, ss := newHoldServers(t, d)
		c.post("/v1/accounts", "a-bank", `{"id":"bank","currency":"EUR"}`, 201)
		c.post("/v1/accounts", "a-w", `{"id":"w","currency":"EUR","flags":{"debits_must_not_exceed_credits":true}}`, 201)
		c.post("/v1/accounts", "a-m", `{"id":"m","currency":"EUR"}`, 201)
		c.post("/v1/transfers", "fund", `{"id":"fund","debit_account_id":"bank","credit_account_id":"w","amount":1000,"currency":"EUR"}`, 201)
		h := holdBody[holdTransfer](t, c.post("/v1/transfers", "h1",
			`{"id":"h1","debit_account_id":"w","credit_account_id":"m","amount":600,"currency":"EUR","pending":true}`, 201))
		if h.Status != "pending" {
			t.Fatalf("hold = %+v", h)
		}
		w := holdBody[holdAccount](t, c.get("/v1/accounts/w", 200))
		if w.DebitsPending != 600 || w.Balance != 1000 || w.Available != 400 {
			t.Fatalf("w = %+v", w)
		}
		if b := holdBody[holdAccount](t, c.get("/v1/accounts/m/balance", 200)); b.CreditsPending != 600 || b.CreditsPosted != 0 {
			t.Fatalf("m balance = %+v", b)
		}
		c.post("/v1/transfers", "spend", `{"debit_account_id":"w","credit_account_id":"m","amount":401,"currency":"EUR"}`, 422)

		p := holdBody[holdTransfer](t, c.post("/v1/transfers/h1/post", "post-1", `{"amount":450}`, 201))
		if p.Status != "posted" || p.Amount != 450 || p.PendingID != "h1" {
			t.Fatalf("post = %+v", p)
		}
		if r := c.post("/v1/transfers/h1/post", "post-1", `{"amount":450}`, 201); r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatal("the post's retry was not a replay")
		}
		c.post("/v1/transfers/h1/void", "void-1", `{}`, 422)
		c.post("/v1/transfers/h1/post", "post-2", `{}`, 422)
		if got := holdBody[holdTransfer](t, c.get("/v1/transfers/h1", 200)); got.Status != "posted" || got.SettledBy != p.ID {
			t.Fatalf("h1 = %+v", got)
		}
		w = holdBody[holdAccount](t, c.get("/v1/accounts/w", 200))
		if w.DebitsPending != 0 || w.DebitsPosted != 450 || w.Available != 550 {
			t.Fatalf("w after the post = %+v", w)
		}

		// A hold that expires, with two services racing to expire it.
		c.post("/v1/transfers", "h2", `{"id":"h2","debit_account_id":"w","credit_account_id":"m","amount":100,"currency":"EUR","pending":true,"timeout_seconds":1}`, 201)
		open := holdBody[listResponse[holdTransfer]](t, c.get("/v1/transfers?status=pending&account_id=w", 200))
		if len(open.Data) != 1 || open.Data[0].ID != "h2" {
			t.Fatalf("open holds = %+v", open)
		}
		time.Sleep(1100 * time.Millisecond)
		c.post("/v1/transfers/h2/post", "post-h2", `{}`, 422) // its timeout has passed
		var wg sync.WaitGroup
		var expired [2]int
		for i, s := range ss {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if expired[i], err = s.expireHolds(context.Background()); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if expired[0]+expired[1] != 1 {
			t.Fatalf("expired %v, want one hold once", expired)
		}
		if got := holdBody[holdTransfer](t, c.get("/v1/transfers/h2", 200)); got.Status != "expired" {
			t.Fatalf("h2 = %+v", got)
		}
		if n, err := ss[0].expireHolds(context.Background()); n != 0 || err != nil {
			t.Fatalf("expired again: %d, %v", n, err)
		}
		w = holdBody[holdAccount](t, c.get("/v1/accounts/w", 200))
		if w.DebitsPending != 0 || w.Available != 550 {
			t.Fatalf("w after the expiry = %+v", w)
		}
		ev := eventsOf(t, d)
		want := map[string]int{"account.created": 3, "transfer.created": 1, "transfer.pending": 2, "transfer.posted": 1, "transfer.expired": 1}
		for typ, n := range want {
			if ev[typ] != n {
				t.Errorf("%d %s events, want %d (all: %v)", ev[typ], typ, n, ev)
			}
		}
		if len(ev) != len(want) {
			t.Errorf("events %v, want %v", ev, want)
		}
	})
}

// A currency exchange over HTTP, as docs/ledger.md describes it: both
// legs reserved as holds in one batch, then both posted; and an exchange
// whose EUR leg is refused, its USD hold voided, so nothing moves.
func TestCurrencyExchangeOverHTTP(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		c, _ := newHoldServers(t, d)
		for _, a := range []string{`{"id":"alice-usd","currency":"USD","flags":{"debits_must_not_exceed_credits":true}}`,
			`{"id":"alice-eur","currency":"EUR"}`, `{"id":"fx-usd","currency":"USD"}`,
			`{"id":"fx-eur","currency":"EUR","flags":{"debits_must_not_exceed_credits":true}}`,
			`{"id":"bank-usd","currency":"USD"}`, `{"id":"bank-eur","currency":"EUR"}`} {
			c.post("/v1/accounts", "acct-"+a[7:15], a, 201)
		}
		c.post("/v1/transfers/batch", "fund", `{"transfers":[
			{"id":"f1","debit_account_id":"bank-usd","credit_account_id":"alice-usd","amount":50000,"currency":"USD"},
			{"id":"f2","debit_account_id":"bank-eur","credit_account_id":"fx-eur","amount":15000,"currency":"EUR"}]}`, 200)
		legs := func(id string) string {
			return `{"transfers":[
			{"id":"` + id + `-usd","debit_account_id":"alice-usd","credit_account_id":"fx-usd","amount":10000,"currency":"USD","pending":true,"timeout_seconds":60},
			{"id":"` + id + `-eur","debit_account_id":"fx-eur","credit_account_id":"alice-eur","amount":9200,"currency":"EUR","pending":true,"timeout_seconds":60}]}`
		}
		type batch struct {
			Data []struct {
				Status string `json:"status"`
			} `json:"data"`
		}
		if r := holdBody[batch](t, c.post("/v1/transfers/batch", "fx-1", legs("fx1"), 200)); r.Data[0].Status != "created" || r.Data[1].Status != "created" {
			t.Fatalf("fx-1 legs: %+v", r)
		}
		c.post("/v1/transfers/fx1-usd/post", "fx-1-usd", `{}`, 201)
		c.post("/v1/transfers/fx1-eur/post", "fx-1-eur", `{}`, 201)
		// The EUR liquidity has 5800 left: the second exchange's EUR hold is
		// refused, so its USD hold is voided.
		r := holdBody[batch](t, c.post("/v1/transfers/batch", "fx-2", legs("fx2"), 200))
		if r.Data[0].Status != "created" || r.Data[1].Status != "refused" {
			t.Fatalf("fx-2 legs: %+v", r)
		}
		c.post("/v1/transfers/fx2-usd/void", "fx-2-usd", `{}`, 201)
		for id, want := range map[string][2]int64{"alice-usd": {40000, 0}, "alice-eur": {9200, 0}, "fx-usd": {10000, 0}, "fx-eur": {5800, 0}} {
			a := holdBody[holdAccount](t, c.get("/v1/accounts/"+id, 200))
			if a.Balance != want[0] || a.DebitsPending != 0 || a.CreditsPending != 0 {
				t.Errorf("%s: %+v, want balance %d and nothing pending", id, a, want[0])
			}
		}
		if ev := eventsOf(t, d); ev["transfer.pending"] != 3 || ev["transfer.posted"] != 2 || ev["transfer.voided"] != 1 {
			t.Errorf("events %v", ev)
		}
	})
}
