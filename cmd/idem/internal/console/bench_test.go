package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// benchHistorySQL gives the tenant's account "wallet" n entries in a few
// statements: transfer i moves 1 + (i·7919 mod 1000) cents from "shop" to
// "wallet" when i is even, the other way when it is odd, so the balance
// wanders; every 10,000th transfer instead reverses the one before it
// (same amount, same even direction). Entries carry their running totals
// (window sums), the reversed totals and the accounts' caches are filled:
// the ledger is sound. Parameters: tenant, base time, n. Test-only SQL: the
// ledger never writes this way.
var benchHistorySQL = map[string][]string{
	"postgres": {
		`INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits, created_at)
		 VALUES ($1, 'wallet', 'EUR', false, false, $2::timestamptz), ($1, 'shop', 'EUR', false, false, $2::timestamptz)`,
		`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, reverses_id, reason, created_at)
		 SELECT $1, 't' || lpad(i::text, 9, '0'),
		        CASE WHEN i % 2 = 0 THEN 'shop' ELSE 'wallet' END, CASE WHEN i % 2 = 0 THEN 'wallet' ELSE 'shop' END,
		        1 + (CASE WHEN i % 10000 = 0 THEN i - 1 ELSE i END * 7919) % 1000, 'EUR',
		        CASE WHEN i % 10000 = 0 THEN 't' || lpad((i - 1)::text, 9, '0') END,
		        CASE WHEN i % 10000 = 0 THEN 'charged twice' END,
		        $2::timestamptz + i * interval '1 millisecond'
		   FROM generate_series(1, $3::bigint) AS i`,
		`INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
		 SELECT $1, acct, i, 't' || lpad(i::text, 9, '0'), amt, credit,
		        sum(CASE WHEN credit THEN 0 ELSE amt END) OVER w, sum(CASE WHEN credit THEN amt ELSE 0 END) OVER w,
		        $2::timestamptz + i * interval '1 millisecond'
		   FROM (SELECT i, 1 + (CASE WHEN i % 10000 = 0 THEN i - 1 ELSE i END * 7919) % 1000 AS amt, acct,
		                (i % 2 = 0) = (acct = 'wallet') AS credit
		           FROM generate_series(1, $3::bigint) AS i, (VALUES ('wallet'), ('shop')) AS a (acct)) AS legs
		 WINDOW w AS (PARTITION BY acct ORDER BY i ROWS UNBOUNDED PRECEDING)
		 ORDER BY i, acct`,
		`INSERT INTO ledger_reversed_totals (tenant, transfer_id, amount, reversed)
		 SELECT $1, reverses_id, amount, amount FROM ledger_transfers WHERE tenant = $1 AND reverses_id IS NOT NULL`,
		`UPDATE ledger_accounts a
		    SET debits_posted = e.debits_posted, credits_posted = e.credits_posted, sequence = e.sequence, last_entry_at = e.created_at
		   FROM (SELECT DISTINCT ON (account_id) account_id, sequence, debits_posted, credits_posted, created_at
		           FROM ledger_entries WHERE tenant = $1 ORDER BY account_id, sequence DESC) AS e
		  WHERE a.tenant = $1 AND a.id = e.account_id`,
	},
	"sqlite": {
		`INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits, created_at)
		 VALUES (?1, 'wallet', 'EUR', 0, 0, ?2), (?1, 'shop', 'EUR', 0, 0, ?2)`,
		`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?3)
		 INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, reverses_id, reason, created_at)
		 SELECT ?1, printf('t%09d', i),
		        CASE WHEN i % 2 = 0 THEN 'shop' ELSE 'wallet' END, CASE WHEN i % 2 = 0 THEN 'wallet' ELSE 'shop' END,
		        1 + (CASE WHEN i % 10000 = 0 THEN i - 1 ELSE i END * 7919) % 1000, 'EUR',
		        CASE WHEN i % 10000 = 0 THEN printf('t%09d', i - 1) END,
		        CASE WHEN i % 10000 = 0 THEN 'charged twice' END,
		        ?2 + i * 1000
		   FROM s`,
		`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?3),
		 legs AS (SELECT i, 1 + (CASE WHEN i % 10000 = 0 THEN i - 1 ELSE i END * 7919) % 1000 AS amt, acct,
		                 (i % 2 = 0) = (acct = 'wallet') AS credit
		            FROM s, (SELECT 'wallet' AS acct UNION ALL SELECT 'shop'))
		 INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
		 SELECT ?1, acct, i, printf('t%09d', i), amt, credit,
		        sum((1 - credit) * amt) OVER w, sum(credit * amt) OVER w, ?2 + i * 1000
		   FROM legs
		 WINDOW w AS (PARTITION BY acct ORDER BY i ROWS UNBOUNDED PRECEDING)`,
		`INSERT INTO ledger_reversed_totals (tenant, transfer_id, amount, reversed)
		 SELECT ?1, reverses_id, amount, amount FROM ledger_transfers WHERE tenant = ?1 AND reverses_id IS NOT NULL`,
		`UPDATE ledger_accounts
		    SET (debits_posted, credits_posted, sequence, last_entry_at) =
		        (SELECT debits_posted, credits_posted, sequence, created_at FROM ledger_entries e
		          WHERE e.tenant = ledger_accounts.tenant AND e.account_id = ledger_accounts.id
		          ORDER BY sequence DESC LIMIT 1)
		  WHERE tenant = ?1`,
	},
}

// BenchmarkAccountPage measures the account page's server time (ms/op) on
// an account of 1,000,000 entries, on each driver: the page as it opens
// (now), the page at a moment deep in the history (the slider submitted
// without the script), and the part the script fetches when the slider
// moves (no chart). The target is under 300 ms for a whole page
// (docs/operations-console.md).
func BenchmarkAccountPage(b *testing.B) {
	const entries = 1_000_000
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			d := drivertest.Open(b, dialect)
			// The fixture obeys every invariant the ledger keeps: checked
			// on a small copy, before the big one makes Verify slow.
			seedHistory(b, d, "check", 20_000)
			tx, err := d.BeginSnapshot(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			err = ledger.Verify(context.Background(), d, tx)
			tx.Rollback(context.Background()) //nolint:errcheck // read-only
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			seedHistory(b, d, "bench", entries)
			b.Logf("%s: %d entries on one account loaded in %s", dialect, entries, time.Since(start).Round(time.Millisecond))
			l, err := ledger.New(d, ledger.Config{})
			if err != nil {
				b.Fatal(err)
			}
			c, err := console.New(console.Config{Driver: d, Ledger: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			h := c.Handler()
			for _, v := range []struct{ name, query, want string }{
				{"now", "", `data-columns="600"`},
				{"at=500000", "&at=500000", `id="as-of-count">500,000 of 1,000,000<`},
				{"partial", "&at=500000&partial=1", `id="as-of-count">500,000 of 1,000,000<`},
			} {
				get := func(b *testing.B) {
					r := httptest.NewRequest(http.MethodGet, "/ui/accounts?tenant=bench&id=wallet"+v.query, nil)
					r.RemoteAddr, r.Host = "127.0.0.1:50000", "localhost"
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), v.want) {
						b.Fatalf("%d, page without %s:\n%.2000s", w.Code, v.want, w.Body)
					}
				}
				b.Run(v.name, func(b *testing.B) {
					get(b) // untimed: the first read brings the entries into the cache
					for b.Loop() {
						get(b)
					}
					b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
				})
			}
		})
	}
}

// seedHistory loads benchHistorySQL in one transaction and refreshes the
// planner's statistics as autovacuum would after a load this size.
func seedHistory(b testing.TB, d driver.Driver, tenant string, n int) {
	b.Helper()
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var at any = base
	if d.Dialect() == "sqlite" {
		at = base.UnixMicro()
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit: a no-op
	for i, q := range benchHistorySQL[d.Dialect()] {
		args := []any{tenant, at, n}
		if i == 0 {
			args = args[:2]
		}
		if i >= 3 {
			args = args[:1]
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	if d.Dialect() == "sqlite" {
		if _, err := tx.Exec(ctx, "ANALYZE"); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(fmt.Errorf("seed %d entries: %w", n, err))
	}
	if d.Dialect() == "postgres" {
		// What autovacuum does after a load this size: statistics, and
		// the rows' commit status set once rather than by their first
		// reader. (VACUUM runs outside a transaction.)
		if _, err := d.Reader().Exec(ctx, "VACUUM (ANALYZE) ledger_entries, ledger_transfers, ledger_accounts"); err != nil {
			b.Fatal(err)
		}
	}
}
