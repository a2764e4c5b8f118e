package driver

import "context"

// LedgerScanQueries are what a driver gives ScanLedger: its SQL for each
// table, in the orders LedgerScanParams states, and how it decodes a row.
// The walk itself is the same on every database, so it lives here once.
type LedgerScanQueries struct {
	Accounts, Entries, ReversedTotals, Holds string
	// Transfers is one stream of two tables: every transfer followed by its
	// entries, ordered by tenant and transfer id, the transfer first, then
	// the entries by side (debit first) and account. A UNION ALL of both
	// tables in that order, not a join: the database merges two ordered
	// reads, and no plan can search the entries once per transfer (on
	// SQLite, which joins only by nested loops, such a join searched the
	// entries by tenant alone for every transfer: quadratic).
	Transfers string

	Account func(Row) (*LedgerAccount, error)
	Entry   func(Row) (*LedgerEntry, error)
	Hold    func(Row) (*LedgerHold, error)
	// TransferRow decodes one row of Transfers: a transfer, or an entry
	// (the other nil). An entry carries no running totals.
	TransferRow func(Rows) (*LedgerTransfer, *LedgerEntry, error)
}

// ScanLedger implements LedgerDriver.LedgerScan with a driver's queries.
func ScanLedger(ctx context.Context, tx Tx, q *LedgerScanQueries, p *LedgerScanParams) error {
	if p.Accounts != nil {
		if err := ScanEach(ctx, tx, q.Accounts, func(r Rows) error {
			a, err := q.Account(r)
			if err != nil {
				return err
			}
			return p.Accounts(a)
		}); err != nil {
			return err
		}
	}
	if p.Entries != nil {
		if err := ScanEach(ctx, tx, q.Entries, func(r Rows) error {
			e, err := q.Entry(r)
			if err != nil {
				return err
			}
			return p.Entries(e)
		}); err != nil {
			return err
		}
	}
	if p.Transfers != nil {
		// Each transfer comes right before its entries: gather them, then
		// hand the transfer over when the next begins. An entry without
		// its transfer row follows another transfer's entries or none, and
		// is not handed over: Verify counts the entries of both passes.
		var cur *LedgerTransfer
		var entries []LedgerEntry
		flush := func() error {
			if cur == nil {
				return nil
			}
			return p.Transfers(cur, entries)
		}
		if err := ScanEach(ctx, tx, q.Transfers, func(r Rows) error {
			t, e, err := q.TransferRow(r)
			switch {
			case err != nil:
				return err
			case t != nil:
				if err := flush(); err != nil {
					return err
				}
				cur, entries = t, nil
			case cur != nil && e.Tenant == cur.Tenant && e.TransferID == cur.ID:
				entries = append(entries, *e)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
	}
	if p.ReversedTotals != nil {
		if err := ScanEach(ctx, tx, q.ReversedTotals, func(r Rows) error {
			var tenant, id string
			var n int64
			if err := r.Scan(&tenant, &id, &n); err != nil {
				return err
			}
			return p.ReversedTotals(tenant, id, n)
		}); err != nil {
			return err
		}
	}
	if p.Holds != nil {
		return ScanEach(ctx, tx, q.Holds, func(r Rows) error {
			h, err := q.Hold(r)
			if err != nil {
				return err
			}
			return p.Holds(h)
		})
	}
	return nil
}

// ScanEach runs sql in tx and calls fn for every row.
func ScanEach(ctx context.Context, tx Tx, sql string, fn func(Rows) error) error {
	rows, err := tx.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
