package sqlite

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/idemhq/idem/driver"
)

// SQLite has one writer at a time (BEGIN IMMEDIATE on one connection), so a
// ledger transaction never meets a concurrent writer: there is nothing to
// lock, and the Go clock (LedgerLock's Clock, which the ledger keeps from
// going back past an account's newest entry) is the recorded time. Id lists, and a batch's new accounts, travel as one JSON
// array read with json_each: one bound value and one statement whatever
// their number, the SQL never built per call. Keys are [tenant, id] pairs.
// The rows a batch writes are bound as VALUES rows instead (rows.go): no
// JSON to encode in Go and parse again in SQLite, column by column.

const ledgerAccountCols = `tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits,
       metadata, debits_posted, credits_posted, sequence, last_entry_at, created_at, debits_pending, credits_pending`

const ledgerTransferCols = `tenant, id, debit_account_id, credit_account_id, amount, currency, metadata,
       coalesce(reverses_id, ''), coalesce(reason, ''), created_at,
       pending, coalesce(timeout_seconds, 0), expires_at, coalesce(pending_id, ''), coalesce(settles, '')`

const ledgerEntryCols = `tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at,
       pending_change, pending_only, debits_pending, credits_pending`

const ledgerHoldCols = `tenant, transfer_id, debit_account_id, credit_account_id, amount, expires_at`

// Accounts are inserted in key order, as on Postgres. A duplicate id
// inserts nothing and returns no row. (WHERE true: an upsert's SELECT
// needs a WHERE clause to parse.)
const sqlLedgerAccountsInsert = `
INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
                             credits_must_not_exceed_debits, metadata, created_at)
SELECT value ->> 'tenant', value ->> 'id', value ->> 'currency', value ->> 'dnec', value ->> 'cned',
       value ->> 'metadata', ?2
  FROM json_each(?1) WHERE true
 ORDER BY value ->> 'tenant', value ->> 'id'
ON CONFLICT (tenant, id) DO NOTHING
RETURNING ` + ledgerAccountCols

const sqlLedgerAccountGet = `SELECT ` + ledgerAccountCols + ` FROM ledger_accounts WHERE tenant = ?1 AND id = ?2`

// Each key is a search of the primary key.
const sqlLedgerAccountsByKeys = `
SELECT ` + ledgerAccountCols + ` FROM ledger_accounts
 WHERE (tenant, id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1))
 ORDER BY tenant, id`

const sqlLedgerTransfersGet = `
SELECT ` + ledgerTransferCols + ` FROM ledger_transfers
 WHERE tenant = ?1 AND id IN (SELECT value FROM json_each(?2))`

// A hold's settlement is a search of the unique (tenant, pending_id)
// index.
const ledgerFoundCols = ledgerTransferCols + `,
       coalesce((SELECT r.reversed FROM ledger_reversed_totals r
                  WHERE r.tenant = x.tenant AND r.transfer_id = x.id), 0),
       coalesce((SELECT s.id FROM ledger_transfers s
                  WHERE x.pending AND s.tenant = x.tenant AND s.pending_id = x.id), ''),
       coalesce((SELECT s.settles FROM ledger_transfers s
                  WHERE x.pending AND s.tenant = x.tenant AND s.pending_id = x.id), '')`

const sqlLedgerTransfersFind = `
SELECT ` + ledgerFoundCols + `
  FROM ledger_transfers x
 WHERE (tenant, id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?1))`

// As on Postgres: by the primary key from the cursor on, filtered.
const sqlLedgerTransfersList = `
SELECT ` + ledgerFoundCols + `
  FROM ledger_transfers x
 WHERE x.tenant = ?1 AND x.id > ?2
   AND (?3 = '' OR x.debit_account_id = ?3 OR x.credit_account_id = ?3)
   AND (?4 = '' OR ?4 = CASE
         WHEN x.pending THEN coalesce((SELECT CASE s.settles WHEN 'post' THEN 'posted' WHEN 'void' THEN 'voided' ELSE 'expired' END
                                         FROM ledger_transfers s WHERE s.tenant = x.tenant AND s.pending_id = x.id), 'pending')
         WHEN x.settles = 'void' THEN 'voided'
         WHEN x.settles = 'expire' THEN 'expired'
         ELSE 'posted' END)
 ORDER BY x.id LIMIT ?5`

const sqlLedgerHoldsList = `
SELECT ` + ledgerFoundCols + `
  FROM (SELECT t.* FROM ledger_holds h
          JOIN ledger_transfers t ON t.tenant = h.tenant AND t.id = h.transfer_id
         WHERE h.tenant = ?1 AND h.transfer_id > ?2
           AND (?3 = '' OR h.debit_account_id = ?3 OR h.credit_account_id = ?3)
         ORDER BY h.transfer_id LIMIT ?4) AS x
 ORDER BY x.id`

const sqlLedgerReversals = `
SELECT ` + ledgerTransferCols + ` FROM ledger_transfers
 WHERE tenant = ?1 AND reverses_id = ?2
 ORDER BY created_at, id`

// A batch's write: one statement per table, its rows bound as VALUES
// (rows.go), each stamped with the batch's time.
var (
	sqlLedgerTransfersInsert = newRowsStmt(`
INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency,
                              metadata, reverses_id, reason, created_at,
                              pending, timeout_seconds, expires_at, pending_id, settles)
SELECT * FROM (VALUES `, `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, `) WHERE column1 IS NOT NULL`)

	sqlLedgerEntriesInsert = newRowsStmt(`
INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit,
                            debits_posted, credits_posted, created_at,
                            pending_change, pending_only, debits_pending, credits_pending)
SELECT * FROM (VALUES `, `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, `) WHERE column1 IS NOT NULL`)

	// The rows drive the join: each account is a search of the primary
	// key (TestLedgerBatchPlans).
	sqlLedgerAccountsMove = newRowsStmt(`
UPDATE ledger_accounts
   SET debits_posted = u.column3, credits_posted = u.column4, sequence = u.column5, last_entry_at = u.column6,
       debits_pending = u.column7, credits_pending = u.column8
  FROM (VALUES `, `(?, ?, ?, ?, ?, ?, ?, ?)`, `) AS u
 WHERE ledger_accounts.tenant = u.column1 AND ledger_accounts.id = u.column2`)

	sqlLedgerReversedAdd = newRowsStmt(`
INSERT INTO ledger_reversed_totals (tenant, transfer_id, amount, reversed)
SELECT * FROM (VALUES `, `(?, ?, ?, ?)`, `) WHERE column1 IS NOT NULL
ON CONFLICT (tenant, transfer_id) DO UPDATE
   SET reversed = ledger_reversed_totals.reversed + excluded.reversed`)

	sqlLedgerHoldsInsert = newRowsStmt(`
INSERT INTO ledger_holds (tenant, transfer_id, debit_account_id, credit_account_id, amount, expires_at)
SELECT * FROM (VALUES `, `(?, ?, ?, ?, ?, ?)`, `) WHERE column1 IS NOT NULL`)

	// Each pair is a search of the primary key; the padding's NULL pairs
	// match nothing.
	sqlLedgerHoldsRelease = newRowsStmt(`
DELETE FROM ledger_holds WHERE (tenant, transfer_id) IN (VALUES `, `(?, ?)`, `)`)
)

// The due holds, soonest first, by the expiry index.
const sqlLedgerHoldsDue = `
SELECT ` + ledgerHoldCols + ` FROM ledger_holds
 WHERE expires_at <= ?1
 ORDER BY expires_at LIMIT ?2`

// The JSON rows of a batch's new accounts, as sqlLedgerAccountsInsert
// reads them.
type ledgerAccountRow struct {
	Tenant   string `json:"tenant"`
	ID       string `json:"id"`
	Currency string `json:"currency"`
	DNEC     bool   `json:"dnec"`
	CNED     bool   `json:"cned"`
	Metadata string `json:"metadata,omitempty"`
}

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
	sqlLedgerScanHolds    = `SELECT ` + ledgerHoldCols + ` FROM ledger_holds ORDER BY tenant, transfer_id`
	// Both tables in one order, merged (driver.LedgerScanQueries): a
	// transfer's row (kind 0), then its entries' (kind 1). The NULLs fill
	// the other table's columns. SQLite reads the transfers in key order
	// and sorts the entries by transfer, then merges the two.
	sqlLedgerScanTransfers = `
SELECT tenant, id, 0 AS kind, debit_account_id, credit_account_id, amount, currency, metadata,
       coalesce(reverses_id, ''), coalesce(reason, ''), created_at,
       NULL AS credit, NULL AS account_id, NULL AS sequence,
       pending, coalesce(timeout_seconds, 0), expires_at, coalesce(pending_id, ''), coalesce(settles, ''),
       NULL AS pending_change, NULL AS pending_only
  FROM ledger_transfers
 UNION ALL
SELECT tenant, transfer_id, 1, NULL, NULL, amount, NULL, NULL, NULL, NULL, created_at, credit, account_id, sequence,
       NULL, NULL, NULL, NULL, NULL, pending_change, pending_only
  FROM ledger_entries
 ORDER BY tenant, id, kind, credit, account_id`
)

func (d *Driver) LedgerAccountsInsert(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountsInsertParams) ([]driver.LedgerAccount, error) {
	rows := make([]ledgerAccountRow, len(p.Accounts))
	for i, a := range p.Accounts {
		rows[i] = ledgerAccountRow{Tenant: a.Tenant, ID: a.ID, Currency: a.Currency, DNEC: a.DebitsMustNotExceedCredits,
			CNED: a.CreditsMustNotExceedDebits, Metadata: string(a.Metadata)}
	}
	list, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	return driver.Collect(ctx, tx, driver.Value(scanLedgerAccount), sqlLedgerAccountsInsert, string(list), toMicros(p.Now))
}

func (d *Driver) LedgerAccountsGet(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountsGetParams) ([]driver.LedgerAccount, error) {
	keys, err := jsonKeys(p.Keys)
	if err != nil {
		return nil, err
	}
	return driver.Collect(ctx, tx, driver.Value(scanLedgerAccount), sqlLedgerAccountsByKeys, keys)
}

func (d *Driver) LedgerAccountGet(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountGetParams) (*driver.LedgerAccount, error) {
	return scanLedgerAccount(tx.QueryRow(ctx, sqlLedgerAccountGet, p.Tenant, p.ID))
}

// LedgerLock only reads: the transaction holds the database's one write
// lock already.
func (d *Driver) LedgerLock(ctx context.Context, tx driver.Tx, p *driver.LedgerLockParams) (*driver.LedgerLocked, error) {
	accounts := p.AccountKeys
	if len(p.AccountsOf) > 0 {
		of, err := d.LedgerTransfersFind(ctx, tx, &driver.LedgerTransfersFindParams{Keys: p.AccountsOf})
		if err != nil {
			return nil, err
		}
		accounts = slices.Clone(accounts)
		for _, t := range of {
			accounts = append(accounts, driver.LedgerKey{Tenant: t.Tenant, ID: t.DebitAccountID},
				driver.LedgerKey{Tenant: t.Tenant, ID: t.CreditAccountID})
		}
	}
	keys, err := jsonKeys(accounts)
	if err != nil {
		return nil, err
	}
	out := &driver.LedgerLocked{Clock: fromMicros(toMicros(p.Now))}
	if out.Accounts, err = driver.Collect(ctx, tx, driver.Value(scanLedgerAccount), sqlLedgerAccountsByKeys, keys); err != nil {
		return nil, err
	}
	if len(p.Find) > 0 {
		if out.Found, err = d.LedgerTransfersFind(ctx, tx, &driver.LedgerTransfersFindParams{Keys: p.Find}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (d *Driver) LedgerTransfersGet(ctx context.Context, tx driver.Tx, p *driver.LedgerTransfersGetParams) ([]driver.LedgerTransfer, error) {
	ids, err := jsonList(p.IDs)
	if err != nil {
		return nil, err
	}
	return driver.Collect(ctx, tx, scanTransfer, sqlLedgerTransfersGet, p.Tenant, ids)
}

func (d *Driver) LedgerTransfersFind(ctx context.Context, tx driver.Tx, p *driver.LedgerTransfersFindParams) ([]driver.LedgerFoundTransfer, error) {
	keys, err := jsonKeys(p.Keys)
	if err != nil {
		return nil, err
	}
	return driver.Collect(ctx, tx, scanFoundTransfer, sqlLedgerTransfersFind, keys)
}

func (d *Driver) LedgerTransfersList(ctx context.Context, tx driver.Tx, p *driver.LedgerTransfersListParams) ([]driver.LedgerFoundTransfer, error) {
	if p.Status == "pending" {
		return driver.Collect(ctx, tx, scanFoundTransfer, sqlLedgerHoldsList, p.Tenant, p.After, p.AccountID, p.Limit)
	}
	return driver.Collect(ctx, tx, scanFoundTransfer, sqlLedgerTransfersList, p.Tenant, p.After, p.AccountID, p.Status, p.Limit)
}

// scanFoundTransfer decodes ledgerTransferCols and what a find adds.
func scanFoundTransfer(r driver.Row) (t driver.LedgerFoundTransfer, err error) {
	err = scanLedgerTransfer(r, &t.LedgerTransfer, &t.Reversed, &t.SettledBy, &t.Settled)
	return t, err
}

func (d *Driver) LedgerReversals(ctx context.Context, tx driver.Tx, p *driver.LedgerReversalsParams) ([]driver.LedgerTransfer, error) {
	return driver.Collect(ctx, tx, scanTransfer, sqlLedgerReversals, p.Tenant, p.TransferID)
}

func (d *Driver) LedgerWrite(ctx context.Context, tx driver.Tx, p *driver.LedgerWriteParams) error {
	at := toMicros(p.At)
	for _, w := range []struct {
		stmt    *rowsStmt
		n, cols int
		row     func(args []any, i int) []any
	}{
		{&sqlLedgerTransfersInsert, len(p.Transfers), 15, func(args []any, i int) []any {
			t := &p.Transfers[i]
			return append(args, t.Tenant, t.ID, t.DebitAccountID, t.CreditAccountID, t.Amount, t.Currency,
				textOrNull(string(t.Metadata)), textOrNull(t.ReversesID), textOrNull(t.Reason), at,
				t.Pending, intOrNull(t.TimeoutSeconds), expiresAt(at, t.TimeoutSeconds),
				textOrNull(t.PendingID), textOrNull(t.Settles))
		}},
		{&sqlLedgerEntriesInsert, len(p.Entries), 13, func(args []any, i int) []any {
			e := &p.Entries[i]
			return append(args, e.Tenant, e.AccountID, e.Sequence, e.TransferID, e.Amount, e.Credit,
				e.DebitsPosted, e.CreditsPosted, at, e.PendingChange, e.PendingOnly, e.DebitsPending, e.CreditsPending)
		}},
		{&sqlLedgerAccountsMove, len(p.Accounts), 8, func(args []any, i int) []any {
			a := &p.Accounts[i]
			return append(args, a.Tenant, a.ID, a.DebitsPosted, a.CreditsPosted, a.Sequence, at,
				a.DebitsPending, a.CreditsPending)
		}},
		{&sqlLedgerHoldsInsert, len(p.Holds), 6, func(args []any, i int) []any {
			h := &p.Holds[i]
			return append(args, h.Tenant, h.TransferID, h.DebitAccountID, h.CreditAccountID, h.Amount,
				expiresAt(at, h.TimeoutSeconds))
		}},
		{&sqlLedgerHoldsRelease, len(p.Released), 2, func(args []any, i int) []any {
			return append(args, p.Released[i].Tenant, p.Released[i].ID)
		}},
		{&sqlLedgerReversedAdd, len(p.Reversed), 4, func(args []any, i int) []any {
			r := &p.Reversed[i]
			return append(args, r.Tenant, r.TransferID, r.Amount, r.Add)
		}},
	} {
		if _, err := writeRows(ctx, tx, w.stmt, w.n, w.cols, w.row); err != nil {
			return err
		}
	}
	return nil
}

// expiresAt is when a hold recorded at (microseconds) with a timeout
// expires, or NULL for none: the moment Postgres computes alike.
func expiresAt(at, timeoutSeconds int64) any {
	if timeoutSeconds <= 0 {
		return nil
	}
	return at + timeoutSeconds*int64(time.Second/time.Microsecond)
}

func intOrNull(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

func (d *Driver) LedgerHoldsDue(ctx context.Context, tx driver.Tx, p *driver.LedgerHoldsDueParams) ([]driver.LedgerHold, error) {
	return driver.Collect(ctx, tx, driver.Value(scanLedgerHold), sqlLedgerHoldsDue, toMicros(p.Now), p.Limit)
}

func scanLedgerHold(r driver.Row) (*driver.LedgerHold, error) {
	var h driver.LedgerHold
	var expires *int64
	if err := r.Scan(&h.Tenant, &h.TransferID, &h.DebitAccountID, &h.CreditAccountID, &h.Amount, &expires); err != nil {
		return nil, err
	}
	if expires != nil {
		h.ExpiresAt = fromMicros(*expires)
	}
	return &h, nil
}

// LedgerClock is Now: SQLite has no clock of its own, and the ledger's
// writers stamp from the same one.
func (d *Driver) LedgerClock(_ context.Context, p *driver.LedgerClockParams) (time.Time, error) {
	return fromMicros(toMicros(p.Now)), nil
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
	return driver.Collect(ctx, tx, driver.Value(scanLedgerEntry), sqlLedgerEntries, p.Tenant, p.AccountID, p.MaxSequence, p.Limit)
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
	Holds:          sqlLedgerScanHolds,
	Hold:           scanLedgerHold,
	Account:        scanLedgerAccount,
	Entry:          scanLedgerEntry,
	TransferRow:    scanLedgerTransferRow,
}

// scanLedgerTransferRow decodes a row of sqlLedgerScanTransfers: a
// transfer, or an entry of the transfer before it.
func scanLedgerTransferRow(r driver.Rows) (*driver.LedgerTransfer, *driver.LedgerEntry, error) {
	var tenant, id string
	var kind, amount, at int64
	var debit, credit, currency, meta, reverses, reason, acct, pendingID, settles *string
	var isCredit, pending, only *bool
	var seq, timeout, expires, change *int64
	if err := r.Scan(&tenant, &id, &kind, &debit, &credit, &amount, &currency, &meta, &reverses, &reason, &at,
		&isCredit, &acct, &seq, &pending, &timeout, &expires, &pendingID, &settles, &change, &only); err != nil {
		return nil, nil, err
	}
	if kind == 0 {
		t := &driver.LedgerTransfer{Tenant: tenant, ID: id, DebitAccountID: *debit, CreditAccountID: *credit,
			Amount: amount, Currency: *currency, Metadata: textBytes(meta), ReversesID: *reverses, Reason: *reason,
			CreatedAt: fromMicros(at), Pending: *pending, TimeoutSeconds: *timeout, PendingID: *pendingID, Settles: *settles}
		if expires != nil {
			t.ExpiresAt = fromMicros(*expires)
		}
		return t, nil, nil
	}
	return nil, &driver.LedgerEntry{Tenant: tenant, AccountID: *acct, Sequence: *seq, TransferID: id,
		Amount: amount, Credit: *isCredit, CreatedAt: fromMicros(at), PendingChange: *change, PendingOnly: *only}, nil
}

func scanTransfer(r driver.Row) (t driver.LedgerTransfer, err error) {
	err = scanLedgerTransfer(r, &t)
	return t, err
}

// scanLedgerTransfer decodes ledgerTransferCols, then extra columns.
func scanLedgerTransfer(r driver.Row, t *driver.LedgerTransfer, extra ...any) error {
	var meta *string
	var created int64
	var expires *int64
	dest := append([]any{&t.Tenant, &t.ID, &t.DebitAccountID, &t.CreditAccountID, &t.Amount, &t.Currency,
		&meta, &t.ReversesID, &t.Reason, &created,
		&t.Pending, &t.TimeoutSeconds, &expires, &t.PendingID, &t.Settles}, extra...)
	if err := r.Scan(dest...); err != nil {
		return err
	}
	t.Metadata = textBytes(meta)
	t.CreatedAt = fromMicros(created)
	if expires != nil {
		t.ExpiresAt = fromMicros(*expires)
	}
	return nil
}

func scanLedgerAccount(r driver.Row) (*driver.LedgerAccount, error) {
	var a driver.LedgerAccount
	var meta *string
	var last *int64
	var created int64
	if err := r.Scan(&a.Tenant, &a.ID, &a.Currency, &a.DebitsMustNotExceedCredits, &a.CreditsMustNotExceedDebits,
		&meta, &a.DebitsPosted, &a.CreditsPosted, &a.Sequence, &last, &created,
		&a.DebitsPending, &a.CreditsPending); err != nil {
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
		&e.DebitsPosted, &e.CreditsPosted, &created,
		&e.PendingChange, &e.PendingOnly, &e.DebitsPending, &e.CreditsPending); err != nil {
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

// jsonKeys encodes keys as one JSON array of [tenant, id] pairs.
func jsonKeys(keys []driver.LedgerKey) (string, error) {
	pairs := make([][2]string, len(keys))
	for i, k := range keys {
		pairs[i] = [2]string{k.Tenant, k.ID}
	}
	b, err := json.Marshal(pairs)
	return string(b), err
}

func textBytes(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}
