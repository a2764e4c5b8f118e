package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
)

const ledgerAccountCols = `tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits,
       metadata, debits_posted, credits_posted, sequence, last_entry_at, created_at`

const ledgerTransferCols = `tenant, id, debit_account_id, credit_account_id, amount, currency, metadata,
       coalesce(reverses_id, ''), coalesce(reason, ''), created_at`

const ledgerEntryCols = `tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at`

// The account's time starts at the database clock. A duplicate id inserts
// nothing and returns no row, so the caller's transaction stays usable; a
// concurrent twin makes the insert wait for its outcome.
const sqlLedgerAccountInsert = `
INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
                             credits_must_not_exceed_debits, metadata, created_at)
VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp())
ON CONFLICT (tenant, id) DO NOTHING
RETURNING ` + ledgerAccountCols

const sqlLedgerAccountGet = `SELECT ` + ledgerAccountCols + ` FROM ledger_accounts WHERE tenant = $1 AND id = $2`

// Transaction-scoped advisory locks, one per transfer id, taken in key
// order so two batches sharing ids queue rather than deadlock. They make a
// second post of a new id wait for the first's outcome before it looks for
// the id, instead of failing on the primary key later.
const sqlLedgerLockTransfers = `
SELECT count(pg_advisory_xact_lock(k)) FROM (
  SELECT DISTINCT hashtextextended('idem.ledger.transfer/' || $1::text || '/' || id, 0) AS k
    FROM unnest($2::text[]) AS u(id)
   ORDER BY k) AS keys`

// Lookups by a list of ids descend the primary key once per id, whatever
// the statistics say. Written as "tenant = $1 AND id = ANY($2)", the planner
// may use the key on the tenant alone and filter the ids: it does whenever
// its statistics have not seen the tenant yet (a new tenant, a fresh
// deployment: estimated at one row), and the lookup then reads every row of
// the tenant — thousands within minutes, measured at 0.7–0.9 ms a lookup and
// growing. A LATERAL subquery with LIMIT is not flattened into a join, and a
// plain equality on both key columns is always an index condition.
const ledgerByIDs = `
  FROM (SELECT DISTINCT unnest($2::text[]) AS want ORDER BY want) AS w
 CROSS JOIN LATERAL (SELECT * FROM %s x WHERE x.tenant = $1 AND x.id = w.want LIMIT 1 %s) AS x
 ORDER BY w.want`

// The accounts are locked in id order (the ordered list drives the nested
// loop, one row at a time): every writer takes them in the same order, so
// writers on hot accounts queue and never deadlock. Locked rows are re-read
// at their newest committed version.
var sqlLedgerLockAccounts = `SELECT ` + ledgerAccountCols + fmt.Sprintf(ledgerByIDs, "ledger_accounts", "FOR UPDATE")

var sqlLedgerTransfersGet = `SELECT ` + ledgerTransferCols + fmt.Sprintf(ledgerByIDs, "ledger_transfers", "")

const sqlLedgerReversals = `
SELECT ` + ledgerTransferCols + ` FROM ledger_transfers
 WHERE tenant = $1 AND reverses_id = $2
 ORDER BY created_at, id`

const sqlLedgerReversedTotal = `
SELECT coalesce((SELECT reversed FROM ledger_reversed_totals WHERE tenant = $1 AND transfer_id = $2), 0)`

// One statement appends the transfer and its entries and moves the account
// caches. The time is read here, after the accounts were locked, from
// clock_timestamp() (now() is the transaction's start, which may precede
// the previous holder's commit) and never before the accounts' newest entry.
// Foreign keys are checked at the statement's end, when every part exists.
// Each account is moved by an update of its own, by its whole key: joined
// to a VALUES list, the planner may read the tenant's every account and
// filter (see ledgerByIDs).
const sqlLedgerTransferWrite = `
WITH clock AS (
  SELECT greatest(clock_timestamp(), $17::timestamptz) AS at
), t AS (
  INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency,
                                metadata, reverses_id, reason, created_at)
  SELECT $1::text, $2::text, $3::text, $4::text, $5::bigint, $6::text, $7::text,
         nullif($8::text, ''), nullif($9::text, ''), clock.at
    FROM clock
  RETURNING created_at
), e AS (
  INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit,
                              debits_posted, credits_posted, created_at)
  SELECT $1::text, $3::text, $10::bigint, $2::text, $5::bigint, false, $11::bigint, $12::bigint, t.created_at FROM t
  UNION ALL
  SELECT $1::text, $4::text, $13::bigint, $2::text, $5::bigint, true, $14::bigint, $15::bigint, t.created_at FROM t
), d AS (
  UPDATE ledger_accounts AS a
     SET debits_posted = $11::bigint, credits_posted = $12::bigint, sequence = $10::bigint, last_entry_at = t.created_at
    FROM t
   WHERE a.tenant = $1::text AND a.id = $3::text
), c AS (
  UPDATE ledger_accounts AS a
     SET debits_posted = $14::bigint, credits_posted = $15::bigint, sequence = $13::bigint, last_entry_at = t.created_at
    FROM t
   WHERE a.tenant = $1::text AND a.id = $4::text
), r AS (
  INSERT INTO ledger_reversed_totals (tenant, transfer_id, amount, reversed)
  SELECT $1::text, $8::text, $16::bigint, $5::bigint FROM t WHERE $8::text <> ''
  ON CONFLICT (tenant, transfer_id) DO UPDATE
     SET reversed = ledger_reversed_totals.reversed + excluded.reversed
)
SELECT created_at FROM t`

// The writers' clock and whether the transaction may lock, read before any
// lock: FOR SHARE in a read-only transaction is an error, which would abort
// the caller's transaction.
const sqlLedgerSettleClock = `SELECT clock_timestamp(), current_setting('transaction_read_only') = 'on'`

// FOR SHARE waits for the account's writers, which hold FOR UPDATE until
// they commit; clock_timestamp() is evaluated by the outer query, on the
// row the locking subquery returns, so it is read while the lock is held.
// One statement rather than two: on a connection outside a transaction
// (Driver.Reader) the lock ends with the statement, and the clock must be
// read before it does.
const sqlLedgerSettle = `
SELECT clock_timestamp() FROM (
  SELECT sequence FROM ledger_accounts WHERE tenant = $1 AND id = $2 FOR SHARE
) AS locked`

// The lookup descends the (account, created_at, sequence) index.
const sqlLedgerEntryAsOf = `
SELECT ` + ledgerEntryCols + ` FROM ledger_entries
 WHERE tenant = $1 AND account_id = $2 AND created_at <= $3
 ORDER BY created_at DESC, sequence DESC LIMIT 1`

const sqlLedgerEntries = `
SELECT ` + ledgerEntryCols + ` FROM ledger_entries
 WHERE tenant = $1 AND account_id = $2 AND sequence <= $3
 ORDER BY sequence DESC LIMIT $4`

const (
	sqlLedgerScanAccounts = `SELECT ` + ledgerAccountCols + ` FROM ledger_accounts ORDER BY tenant, id`
	sqlLedgerScanEntries  = `SELECT ` + ledgerEntryCols + ` FROM ledger_entries ORDER BY tenant, account_id, sequence`
	sqlLedgerScanReversed = `SELECT tenant, transfer_id, reversed FROM ledger_reversed_totals ORDER BY tenant, transfer_id`
	// Both tables in one order, merged (driver.LedgerScanQueries): a
	// transfer's row (kind 0), then its entries' (kind 1). The NULLs fill
	// the other table's columns.
	sqlLedgerScanTransfers = `
SELECT tenant, id, 0 AS kind, debit_account_id, credit_account_id, amount, currency, metadata,
       coalesce(reverses_id, ''), coalesce(reason, ''), created_at,
       NULL::boolean AS credit, NULL::text AS account_id, NULL::bigint AS sequence
  FROM ledger_transfers
 UNION ALL
SELECT tenant, transfer_id, 1, NULL, NULL, amount, NULL, NULL, NULL, NULL, created_at, credit, account_id, sequence
  FROM ledger_entries
 ORDER BY tenant, id, kind, credit, account_id`
)

func (d *Driver) LedgerAccountInsert(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountInsertParams) (*driver.LedgerAccountInsertResult, error) {
	a := &p.Account
	got, err := scanLedgerAccount(tx.QueryRow(ctx, sqlLedgerAccountInsert, a.Tenant, a.ID, a.Currency,
		a.DebitsMustNotExceedCredits, a.CreditsMustNotExceedDebits, nullText(a.Metadata)))
	if err == nil {
		return &driver.LedgerAccountInsertResult{Inserted: true, Account: got}, nil
	}
	if !errors.Is(err, driver.ErrNotFound) {
		return nil, err
	}
	// The id was taken, and its holder has committed by now: under READ
	// COMMITTED this new statement sees its row.
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
	if len(p.TransferIDs) > 0 {
		var n int64
		if err := tx.QueryRow(ctx, sqlLedgerLockTransfers, p.Tenant, p.TransferIDs).Scan(&n); err != nil {
			return nil, err
		}
	}
	rows, err := tx.Query(ctx, sqlLedgerLockAccounts, p.Tenant, p.AccountIDs)
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
	return queryLedgerTransfers(ctx, tx, sqlLedgerTransfersGet, p.Tenant, p.IDs)
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
	var at time.Time
	err := tx.QueryRow(ctx, sqlLedgerTransferWrite,
		t.Tenant, t.ID, t.DebitAccountID, t.CreditAccountID, t.Amount, t.Currency, nullText(t.Metadata),
		t.ReversesID, t.Reason,
		p.Debit.Sequence, p.Debit.DebitsPosted, p.Debit.CreditsPosted,
		p.Credit.Sequence, p.Credit.DebitsPosted, p.Credit.CreditsPosted,
		p.ReversesAmount, p.NotBefore,
	).Scan(&at)
	return at.UTC(), err
}

func (d *Driver) LedgerSettle(ctx context.Context, tx driver.Tx, p *driver.LedgerSettleParams) (*driver.LedgerSettleResult, error) {
	var clock time.Time
	var readOnly bool
	if err := tx.QueryRow(ctx, sqlLedgerSettleClock).Scan(&clock, &readOnly); err != nil {
		return nil, err
	}
	if !clock.After(p.After) {
		return &driver.LedgerSettleResult{Clock: clock.UTC()}, nil
	}
	if readOnly {
		return nil, driver.ErrReadOnly
	}
	if err := tx.QueryRow(ctx, sqlLedgerSettle, p.Tenant, p.AccountID).Scan(&clock); err != nil {
		return nil, err
	}
	return &driver.LedgerSettleResult{Clock: clock.UTC(), Locked: true}, nil
}

func (d *Driver) LedgerEntryAsOf(ctx context.Context, tx driver.Tx, p *driver.LedgerEntryAsOfParams) (*driver.LedgerEntry, error) {
	return scanLedgerEntry(tx.QueryRow(ctx, sqlLedgerEntryAsOf, p.Tenant, p.AccountID, p.AsOf))
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
	var kind, amount int64
	var debit, credit, currency, meta, reverses, reason, acct *string
	var at time.Time
	var isCredit *bool
	var seq *int64
	if err := r.Scan(&tenant, &id, &kind, &debit, &credit, &amount, &currency, &meta, &reverses, &reason, &at,
		&isCredit, &acct, &seq); err != nil {
		return nil, nil, err
	}
	if kind == 0 {
		return &driver.LedgerTransfer{Tenant: tenant, ID: id, DebitAccountID: *debit, CreditAccountID: *credit,
			Amount: amount, Currency: *currency, Metadata: textBytes(meta), ReversesID: *reverses, Reason: *reason,
			CreatedAt: at.UTC()}, nil, nil
	}
	return nil, &driver.LedgerEntry{Tenant: tenant, AccountID: *acct, Sequence: *seq, TransferID: id,
		Amount: amount, Credit: *isCredit, CreatedAt: at.UTC()}, nil
}

func queryLedgerTransfers(ctx context.Context, tx driver.Tx, sql string, args ...any) ([]driver.LedgerTransfer, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.LedgerTransfer
	for rows.Next() {
		var t driver.LedgerTransfer
		var meta *string
		if err := rows.Scan(&t.Tenant, &t.ID, &t.DebitAccountID, &t.CreditAccountID, &t.Amount, &t.Currency,
			&meta, &t.ReversesID, &t.Reason, &t.CreatedAt); err != nil {
			return nil, err
		}
		t.Metadata = textBytes(meta)
		t.CreatedAt = t.CreatedAt.UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}

func scanLedgerAccount(r driver.Row) (*driver.LedgerAccount, error) {
	var a driver.LedgerAccount
	var meta *string
	var last *time.Time
	if err := r.Scan(&a.Tenant, &a.ID, &a.Currency, &a.DebitsMustNotExceedCredits, &a.CreditsMustNotExceedDebits,
		&meta, &a.DebitsPosted, &a.CreditsPosted, &a.Sequence, &last, &a.CreatedAt); err != nil {
		return nil, err
	}
	a.Metadata = textBytes(meta)
	if last != nil {
		a.LastEntryAt = last.UTC()
	}
	a.CreatedAt = a.CreatedAt.UTC()
	return &a, nil
}

func scanLedgerEntry(r driver.Row) (*driver.LedgerEntry, error) {
	var e driver.LedgerEntry
	if err := r.Scan(&e.Tenant, &e.AccountID, &e.Sequence, &e.TransferID, &e.Amount, &e.Credit,
		&e.DebitsPosted, &e.CreditsPosted, &e.CreatedAt); err != nil {
		return nil, err
	}
	e.CreatedAt = e.CreatedAt.UTC()
	return &e, nil
}

// nullText stores canonical JSON as text, or NULL when there is none.
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
