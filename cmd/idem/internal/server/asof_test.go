package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// TestAsOfRoutes reads balances and entries as of moments before, at and
// after an account's newest entry, the zero time and the future, on both
// drivers: history is answered from the read-only transaction, a recent
// moment after the read-write retry, the zero time is a moment (nothing
// yet), and a moment far ahead is refused.
func TestAsOfRoutes(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		cfg := config.Default()
		cfg.Relay = false
		s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s.Handler())
		t.Cleanup(ts.Close)
		c := &apiClient{t: t, base: ts.URL, doc: doc, seen: map[string]bool{}}

		c.post("/v1/accounts", "acct-a", `{"id":"a","currency":"EUR"}`, 201)
		c.post("/v1/accounts", "acct-b", `{"id":"b","currency":"EUR"}`, 201)
		var t1, t2 ledger.Transfer
		decodeBody(t, c.post("/v1/transfers", "t-1", `{"id":"t1","debit_account_id":"a","credit_account_id":"b","amount":100,"currency":"EUR"}`, 201), &t1)
		decodeBody(t, c.post("/v1/transfers", "t-2", `{"id":"t2","debit_account_id":"a","credit_account_id":"b","amount":50,"currency":"EUR"}`, 201), &t2)

		q := func(at time.Time) string { return "?as_of=" + url.QueryEscape(at.UTC().Format(time.RFC3339Nano)) }
		for _, tc := range []struct {
			name    string
			query   string
			credits int64
			entries int
		}{
			{"the zero time", "?as_of=0001-01-01T00:00:00Z", 0, 0},
			{"before the first transfer", q(t1.CreatedAt.Add(-time.Microsecond)), 0, 0},
			{"the first transfer", q(t1.CreatedAt), 100, 1},
			{"the newest transfer", q(t2.CreatedAt), 150, 2},
			{"the moment of asking", q(time.Now()), 150, 2},
			{"now", "", 150, 2},
		} {
			var b ledger.Balance
			decodeBody(t, c.get("/v1/accounts/b/balance"+tc.query, 200), &b)
			if b.AccountID != "b" || b.CreditsPosted != tc.credits || b.Balance != tc.credits || b.DebitsPosted != 0 {
				t.Errorf("%s: balance %+v, want credits %d", tc.name, b, tc.credits)
			}
			var page listResponse[ledger.Entry]
			decodeBody(t, c.get("/v1/accounts/b/entries"+tc.query, 200), &page)
			if len(page.Data) != tc.entries || (tc.entries > 0 && page.Data[0].CreditsPosted != tc.credits) {
				t.Errorf("%s: entries %+v, want %d ending at credits %d", tc.name, page.Data, tc.entries, tc.credits)
			}
		}
		var zero ledger.Balance
		decodeBody(t, c.get("/v1/accounts/b/balance?as_of=0001-01-01T00:00:00Z", 200), &zero)
		if !zero.AsOf.IsZero() {
			t.Errorf("as_of echoed as %s, want the zero time", zero.AsOf)
		}

		future := q(time.Now().Add(time.Hour))
		for _, path := range []string{"/v1/accounts/b/balance" + future, "/v1/accounts/b/entries" + future} {
			r := c.get(path, 400)
			var p struct {
				Code string `json:"code"`
			}
			decodeBody(t, r, &p)
			if p.Code != "invalid_request" {
				t.Errorf("%s: code %q, want invalid_request", path, p.Code)
			}
		}
	})
}

func decodeBody(t *testing.T, r apiResponse, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}
