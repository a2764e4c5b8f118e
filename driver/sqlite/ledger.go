package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemhq/idem/driver"
)

// SQLite has one writer at a time (BEGIN IMMEDIATE on one connection), so a
// ledger transaction never meets a concurrent writer: there is nothing to
// lock, and the Go clock, kept monotonic per account by NotBefore, is the
// recorded time. Id lists travel as one JSON array read with json_each.

const ledgerAccountCols = `tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits,
       metadata, debits_posted, credits_posted, sequence, last_entry_at, created_at`

const ledgerTransferCols = `tenant, id, debit_account_id, credit_account_id, amount, currency, metadata,
       coalesce(reverses_id, ''), coalesce(reason, ''), created_at`

const ledgerEntryCols = `tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at`

const sqlLedgerAccountInsert = `
INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
                             credits_must_not_exceed_debits, metadata, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (tenant, id) DO NOTHING
RETURNING ` + ledgerAccountCols

const sqlLedgerAccountGet = `SELECT ` + ledgerAccountCols + ` FROM ledger_accounts WHERE tenant = ?1 AND id = ?2`

const sqlLedgerLockAccounts = `
SELECT ` + ledgerAccountCols + ` FROM ledger_accounts
 WHERE tenant = ?1 AND id IN (SELECT value FROM json_each(?2))
 ORDER BY id`

const sqlLedgerTransfersGet = `
SELECT ` + ledgerTransferCols + ` FROM ledger_transfers
 WHERE tenant = ?1 AND id IN (SELECT value FROM json_each(?2))`

const sqlLedgerReversals = `
SELECT ` + ledgerTransferCols + ` FROM ledger_transfers
 WHERE tenant = ?1 AND reverses_id = ?2
 ORDER BY created_at, id`

const sqlLedgerReversedTotal = `
SELECT coalesce((SELECT reversed FROM ledger_reversed_totals WHERE tenant = ?1 AND transfer_id = ?2), 0)`

const sqlLedgerTransferInsert = `
INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency,
                              metadata, reverses_id, reason, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, nullif(?8, ''), nullif(?9, ''), ?10)`

const sqlLedgerEntriesInsert = `
INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit,
                            debits_posted, credits_posted, created_at)
VALUES (?1, ?3, ?5, ?2, ?4, 0, ?6, ?7, ?11),
       (?1, ?8, ?9, ?2, ?4, 1, ?10, ?12, ?11)`

const sqlLedgerAccountMove = `
UPDATE ledger_accounts
   SET debits_posted = ?3, credits_posted = ?4, sequence = ?5, last_entry_at = ?6
 WHERE tenant = ?1 AND id = ?2`

const sqlLedgerReversedAdd = `
INSERT INTO ledger_reversed_totals (tenant, transfer_id, amount, reversed)
VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (tenant, transfer_id) DO UPDATE
   SET reversed = ledger_reversed_totals.reversed + excluded.reversed`

// The reader pool's connections are opened query_only; the writer's are
// not, and its transactions begin IMMEDIATE, holding the write lock.
const sqlLedgerSettleReadOnly = `PRAGMA query_only`

const sqlLedgerEntryAsOf = `
SELECT ` + ledgerEntryCols + ` FROM ledger_entries
 WHERE tenant = ?1 AND account_id = ?2 AND created_at <= ?3
 ORDER BY created_at DESC, sequence DESC LIMIT 1`

const sqlLedgerEntries = `
SELECT ` + ledgerEntryCols + ` FROM ledger_entries
 WHERE tenant = ?1 AND account_id = ?2 AND sequence <= ?3
 ORDER BY sequence DESC LIMIT ?4`

const (
	sqlLedgerScanAccounts = `SELECT ` + ledgerAccountCols + ` FROM ledger_accounts ORDER BY tenant, id`
	sqlLedgerScanEntries  = `SELECT ` + ledgerEntryCols + ` FROM ledger_entries ORDER BY tenant, account_id, sequence`
	sqlLedgerScanReversed = `SELECT tenant, transfer_id, reversed FROM ledger_reversed_totals ORDER BY tenant, transfer_id`
	// Both tables in one order, merged (driver.LedgerScanQueries): a
	// transfer's row (kind 0), then its entries' (kind 1). The NULLs fill
	// the other table's columns. SQLite reads the transfers in key order
	// and sorts the entries by transfer, then merges the two.
	sqlLedgerScanTransfers = `
SELECT tenant, id, 0 AS kind, debit_account_id, credit_account_id, amount, currency, metadata,
       coalesce(reverses_id, ''), coalesce(reason, ''), created_at,
       NULL AS credit, NULL AS account_id, NULL AS sequence
  FROM ledger_transfers
 UNION ALL
SELECT tenant, transfer_id, 1, NULL, NULL, amount, NULL, NULL, NULL, NULL, created_at, credit, account_id, sequence
  FROM ledger_entries
 ORDER BY tenant, id, kind, credit, account_id`
)

func (d *Driver) LedgerAccountInsert(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountInsertParams) (*driver.LedgerAccountInsertResult, error) {
	a := &p.Account
	got, err := scanLedgerAccount(tx.QueryRow(ctx, sqlLedgerAccountInsert, a.Tenant, a.ID, a.Currency,
		a.DebitsMustNotExceedCredits, a.CreditsMustNotExceedDebits, nullText(a.Metadata), toMicros(p.Now)))
	if err == nil {
		return &driver.LedgerAccountInsertResult{Inserted: true, Account: got}, nil
	}
	if !errors.Is(err, driver.ErrNotFound) {
		return nil, err
	}
	got, err = d.LedgerAccountGet(ctx, tx, &driver.LedgerAccountGetParams{Tenant: a.Tenant, ID: a.ID})
	if err != nil {
		return nil, err
	}
	return &driver.LedgerAccountInsertResult{Account: got}, nil
}

func (d *Driver) LedgerAccountGet(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountGetParams) (*driver.LedgerAccount, error) {
	return scanLedgerAccount(tx.QueryRow(ctx, sqlLedgerAccountGet, p.Tenant, p.ID))
}

func (d *Driver) LedgerLock(ctx context.Context, tx driver.Tx, p *driver.LedgerLockParams) ([]driver.LedgerAccount, error) {
	ids, err := jsonList(p.AccountIDs)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sqlLedgerLockAccounts, p.Tenant, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.LedgerAccount
	for rows.Next() {
		a, err := scanLedgerAccount(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *a)
	}
	return out, rows.Err()
}

func (d *Driver) LedgerTransfersGet(ctx context.Context, tx driver.Tx, p *driver.LedgerTransfersGetParams) ([]driver.LedgerTransfer, error) {
	ids, err := jsonList(p.IDs)
	if err != nil {
		return nil, err
	}
	return queryLedgerTransfers(ctx, tx, sqlLedgerTransfersGet, p.Tenant, ids)
}

func (d *Driver) LedgerReversals(ctx context.Context, tx driver.Tx, p *driver.LedgerReversalsParams) ([]driver.LedgerTransfer, error) {
	return queryLedgerTransfers(ctx, tx, sqlLedgerReversals, p.Tenant, p.TransferID)
}

func (d *Driver) LedgerReversedTotal(ctx context.Context, tx driver.Tx, p *driver.LedgerReversedTotalParams) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, sqlLedgerReversedTotal, p.Tenant, p.TransferID).Scan(&n)
	return n, err
}

func (d *Driver) LedgerTransferWrite(ctx context.Context, tx driver.Tx, p *driver.LedgerTransferWriteParams) (time.Time, error) {
	t := &p.Transfer
	at := max(toMicros(p.Now), toMicros(p.NotBefore))
	if _, err := tx.Exec(ctx, sqlLedgerTransferInsert, t.Tenant, t.ID, t.DebitAccountID, t.CreditAccountID,
		t.Amount, t.Currency, nullText(t.Metadata), t.ReversesID, t.Reason, at); err != nil {
		return time.Time{}, err
	}
	if _, err := tx.Exec(ctx, sqlLedgerEntriesInsert, t.Tenant, t.ID,
		t.DebitAccountID, t.Amount, p.Debit.Sequence, p.Debit.DebitsPosted, p.Debit.CreditsPosted,
		t.CreditAccountID, p.Credit.Sequence, p.Credit.DebitsPosted, at, p.Credit.CreditsPosted); err != nil {
		return time.Time{}, err
	}
	for _, e := range []*driver.LedgerEntry{&p.Debit, &p.Credit} {
		if _, err := tx.Exec(ctx, sqlLedgerAccountMove, t.Tenant, e.AccountID,
			e.DebitsPosted, e.CreditsPosted, e.Sequence, at); err != nil {
			return time.Time{}, err
		}
	}
	if t.ReversesID != "" {
		if _, err := tx.Exec(ctx, sqlLedgerReversedAdd, t.Tenant, t.ReversesID, p.ReversesAmount, t.Amount); err != nil {
			return time.Time{}, err
		}
	}
	return fromMicros(at), nil
}

// LedgerSettle has nothing to wait for in a write transaction: it holds the
// database's one write lock from BEGIN IMMEDIATE, so every writer that
// stamped before it has committed, and Now, read under that lock, is the
// clock every later writer stamps from.
func (d *Driver) LedgerSettle(ctx context.Context, tx driver.Tx, p *driver.LedgerSettleParams) (*driver.LedgerSettleResult, error) {
	clock := fromMicros(toMicros(p.Now)) // the precision entries are stamped at
	if !clock.After(p.After) {
		return &driver.LedgerSettleResult{Clock: clock}, nil
	}
	var readOnly bool
	if err := tx.QueryRow(ctx, sqlLedgerSettleReadOnly).Scan(&readOnly); err != nil {
		return nil, err
	}
	if readOnly {
		return nil, driver.ErrReadOnly
	}
	return &driver.LedgerSettleResult{Clock: clock, Locked: true}, nil
}

func (d *Driver) LedgerEntryAsOf(ctx context.Context, tx driver.Tx, p *driver.LedgerEntryAsOfParams) (*driver.LedgerEntry, error) {
	return scanLedgerEntry(tx.QueryRow(ctx, sqlLedgerEntryAsOf, p.Tenant, p.AccountID, toMicros(p.AsOf)))
}

func (d *Driver) LedgerEntries(ctx context.Context, tx driver.Tx, p *driver.LedgerEntriesParams) ([]driver.LedgerEntry, error) {
	rows, err := tx.Query(ctx, sqlLedgerEntries, p.Tenant, p.AccountID, p.MaxSequence, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.LedgerEntry
	for rows.Next() {
		e, err := scanLedgerEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	return out, rows.Err()
}

func (d *Driver) LedgerScan(ctx context.Context, tx driver.Tx, p *driver.LedgerScanParams) error {
	return driver.ScanLedger(ctx, tx, &ledgerScan, p)
}

// ledgerScan is this dialect's part of driver.ScanLedger.
var ledgerScan = driver.LedgerScanQueries{
	Accounts:       sqlLedgerScanAccounts,
	Entries:        sqlLedgerScanEntries,
	Transfers:      sqlLedgerScanTransfers,
	ReversedTotals: sqlLedgerScanReversed,
	Account:        func(r driver.Rows) (*driver.LedgerAccount, error) { return scanLedgerAccount(r) },
	Entry:          func(r driver.Rows) (*driver.LedgerEntry, error) { return scanLedgerEntry(r) },
	TransferRow:    scanLedgerTransferRow,
}

// scanLedgerTransferRow decodes a row of sqlLedgerScanTransfers: a
// transfer, or an entry of the transfer before it.
func scanLedgerTransferRow(r driver.Rows) (*driver.LedgerTransfer, *driver.LedgerEntry, error) {
	var tenant, id string
	var kind, amount, at int64
	var debit, credit, currency, meta, reverses, reason, acct *string
	var isCredit *bool
	var seq *int64
	if err := r.Scan(&tenant, &id, &kind, &debit, &credit, &amount, &currency, &meta, &reverses, &reason, &at,
		&isCredit, &acct, &seq); err != nil {
		return nil, nil, err
	}
	if kind == 0 {
		return &driver.LedgerTransfer{Tenant: tenant, ID: id, DebitAccountID: *debit, CreditAccountID: *credit,
			Amount: amount, Currency: *currency, Metadata: textBytes(meta), ReversesID: *reverses, Reason: *reason,
			CreatedAt: fromMicros(at)}, nil, nil
	}
	return nil, &driver.LedgerEntry{Tenant: tenant, AccountID: *acct, Sequence: *seq, TransferID: id,
		Amount: amount, Credit: *isCredit, CreatedAt: fromMicros(at)}, nil
}

func queryLedgerTransfers(ctx context.Context, tx driver.Tx, query string, args ...any) ([]driver.LedgerTransfer, error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.LedgerTransfer
	for rows.Next() {
		var t driver.LedgerTransfer
		var meta *string
		var created int64
		if err := rows.Scan(&t.Tenant, &t.ID, &t.DebitAccountID, &t.CreditAccountID, &t.Amount, &t.Currency,
			&meta, &t.ReversesID, &t.Reason, &created); err != nil {
			return nil, err
		}
		t.Metadata = textBytes(meta)
		t.CreatedAt = fromMicros(created)
		out = append(out, t)
	}
	return out, rows.Err()
}

func scanLedgerAccount(r driver.Row) (*driver.LedgerAccount, error) {
	var a driver.LedgerAccount
	var meta *string
	var last *int64
	var created int64
	if err := r.Scan(&a.Tenant, &a.ID, &a.Currency, &a.DebitsMustNotExceedCredits, &a.CreditsMustNotExceedDebits,
		&meta, &a.DebitsPosted, &a.CreditsPosted, &a.Sequence, &last, &created); err != nil {
		return nil, err
	}
	a.Metadata = textBytes(meta)
	if last != nil {
		a.LastEntryAt = fromMicros(*last)
	}
	a.CreatedAt = fromMicros(created)
	return &a, nil
}

func scanLedgerEntry(r driver.Row) (*driver.LedgerEntry, error) {
	var e driver.LedgerEntry
	var created int64
	if err := r.Scan(&e.Tenant, &e.AccountID, &e.Sequence, &e.TransferID, &e.Amount, &e.Credit,
		&e.DebitsPosted, &e.CreditsPosted, &created); err != nil {
		return nil, err
	}
	e.CreatedAt = fromMicros(created)
	return &e, nil
}

// jsonList encodes ids as one JSON array parameter for json_each, so a list
// of any length is one bound value rather than SQL built per call.
func jsonList(ids []string) (string, error) {
	if ids == nil {
		ids = []string{}
	}
	b, err := json.Marshal(ids)
	return string(b), err
}

func nullText(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

func textBytes(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}
