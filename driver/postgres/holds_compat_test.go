package postgres

import (
	"context"
	"strings"
	"testing"
)

// A binary older than migration 10 keeps serving on its schema (it is
// compatible from 6), and writes as it always did: entries without pending
// totals, flags without pending amounts, reversals of anything. The schema
// keeps such writes from breaking holds: the entries get their account's
// pending totals, and spending what a hold reserves or reversing a hold is
// refused, with nothing written.
func TestHoldsGuardOlderBinaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := migratedConn(t)
	exec := func(sql string) error {
		_, err := conn.Exec(ctx, sql)
		return err
	}
	must := func(sql string) {
		t.Helper()
		if err := exec(sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// A wallet of 1000 with 600 held, as this binary would have left it.
	must(`INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits,
	        created_at, credits_posted, debits_pending, sequence)
	      VALUES ('t', 'w', 'EUR', true, false, now(), 1000, 600, 2), ('t', 'm', 'EUR', false, false, now(), 0, 0, 1)`)
	must(`UPDATE ledger_accounts SET credits_pending = 600 WHERE tenant = 't' AND id = 'm'`)
	must(`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at, pending)
	      VALUES ('t', 'h', 'w', 'm', 600, 'EUR', now(), true)`)

	// An older binary's entry: no pending columns named.
	must(`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
	      VALUES ('t', 'old', 'w', 'm', 100, 'EUR', now())`)
	must(`INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
	      VALUES ('t', 'w', 3, 'old', 100, false, 100, 1000, now()), ('t', 'm', 2, 'old', 100, true, 0, 100, now())`)
	var dp, cp int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT debits_pending FROM ledger_entries WHERE account_id = 'w' AND sequence = 3),
	        (SELECT credits_pending FROM ledger_entries WHERE account_id = 'm' AND sequence = 2)`).Scan(&dp, &cp); err != nil {
		t.Fatal(err)
	}
	if dp != 600 || cp != 600 {
		t.Fatalf("the older binary's entries carry pending %d and %d, want the accounts' 600 and 600", dp, cp)
	}
	// Its flag check ignores the hold: 1000 - 600 leaves 400 to spend, not 500.
	if err := exec(`UPDATE ledger_accounts SET debits_posted = 500 WHERE tenant = 't' AND id = 'w'`); err == nil ||
		!strings.Contains(err.Error(), "ledger_accounts_debits_flag") {
		t.Fatalf("spending what a hold reserves: %v", err)
	}
	must(`UPDATE ledger_accounts SET debits_posted = 400 WHERE tenant = 't' AND id = 'w'`)
	// It would reverse a hold.
	if err := exec(`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at, reverses_id)
	      VALUES ('t', 'rev', 'm', 'w', 600, 'EUR', now(), 'h')`); err == nil || !strings.Contains(err.Error(), "cannot be reversed") {
		t.Fatalf("reversing a hold: %v", err)
	}
	must(`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at, reverses_id)
	      VALUES ('t', 'rev-old', 'm', 'w', 100, 'EUR', now(), 'old')`)
}
