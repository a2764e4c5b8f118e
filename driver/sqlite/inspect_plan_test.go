package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/ledger"
)

// The console's chart reads a bucket's ends by primary key and an
// account's reversals from the tenant's reversals. SQLite chooses join
// orders from its statistics, sampled values included: for an account the
// last ANALYZE did not see (it grew since), it expected a handful of
// entries and read the account's entries in both joins, once per entry: a
// chart of a million entries did not finish. The queries must keep their
// order for any account.
func TestLedgerChartPlansHoldOnStaleStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "idem.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// A ledger analyzed before the account the chart reads existed.
	l, err := ledger.New(d, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit: a no-op
	for _, id := range []string{"wallet", "bank"} {
		if _, err := l.CreateAccount(ctx, tx, "acme", ledger.NewAccount{ID: id, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	var last ledger.Transfer
	for range 200 {
		ts, err := l.Post(ctx, tx, "acme", ledger.NewTransfer{DebitAccountID: "bank", CreditAccountID: "wallet", Amount: 1, Currency: "EUR"})
		if err != nil {
			t.Fatal(err)
		}
		last = ts[0]
	}
	if _, err := l.Reverse(ctx, tx, "acme", ledger.NewReversal{TransferID: last.ID}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.write.ExecContext(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}

	plan := func(q string, args ...any) string {
		t.Helper()
		rows, err := d.read.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	ends := plan(sqlLedgerBalanceEnds, "later", "wallet", int64(1), int64(150), int64(7))
	for _, want := range []string{
		"SEARCH f USING PRIMARY KEY (tenant=? AND account_id=? AND sequence=?)",
		"SEARCH l USING PRIMARY KEY (tenant=? AND account_id=? AND sequence=?)",
	} {
		if !strings.Contains(ends, want) {
			t.Errorf("bucket ends: the plan lacks %q:\n%s", want, ends)
		}
	}
	if ext := plan(sqlLedgerBalanceExtremes, "later", "wallet", int64(1), int64(7)); !strings.Contains(ext,
		"SEARCH ledger_entries USING PRIMARY KEY (tenant=? AND account_id=? AND sequence>? AND sequence<?)") {
		t.Errorf("bucket extremes: not one range of the primary key:\n%s", ext)
	}
	revs := plan(sqlLedgerAccountReversals, "later", "wallet", int64(201), 10)
	if !strings.HasPrefix(revs, "SEARCH t USING INDEX ledger_transfers_reverses") ||
		!strings.Contains(revs, "SEARCH e USING INDEX ledger_entries_as_of (tenant=? AND account_id=? AND created_at=?") {
		t.Errorf("account reversals: not the tenant's reversals, then each one's entry:\n%s", revs)
	}
}
