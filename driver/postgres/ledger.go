package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
)

const ledgerAccountCols = `tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits,
       metadata, debits_posted, credits_posted, sequence, last_entry_at, created_at, debits_pending, credits_pending`

const ledgerTransferCols = `tenant, id, debit_account_id, credit_account_id, amount, currency, metadata,
       coalesce(reverses_id, ''), coalesce(reason, ''), created_at,
       pending, coalesce(timeout_seconds, 0), expires_at, coalesce(pending_id, ''), coalesce(settles, '')`

const ledgerEntryCols = `tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at,
       pending_change, pending_only, debits_pending, credits_pending`

// Accounts arrive as arrays, one element per account, and are inserted in
// key order, so two inserts sharing new ids wait for each other in one
// order. The account's time starts at the database clock. A duplicate id
// inserts nothing and returns no row, so the caller's transaction stays
// usable; a concurrent twin makes the insert wait for its outcome.
const sqlLedgerAccountsInsert = `
INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
                             credits_must_not_exceed_debits, metadata, created_at)
SELECT u.tenant, u.id, u.currency, u.dnec, u.cned, nullif(u.metadata, ''), clock_timestamp()
  FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::boolean[], $6::text[])
       AS u(tenant, id, currency, dnec, cned, metadata)
 ORDER BY u.tenant, u.id
ON CONFLICT (tenant, id) DO NOTHING
RETURNING ` + ledgerAccountCols

const sqlLedgerAccountGet = `SELECT ` + ledgerAccountCols + ` FROM ledger_accounts WHERE tenant = $1 AND id = $2`

// Transaction-scoped advisory locks, one per transfer key, taken in key
// order so two batches sharing ids queue rather than deadlock. They make a
// second post of a new id wait for the first's outcome before it looks for
// the id, instead of failing on the primary key later. The key's text is
// the one every idem version locks.
const sqlLedgerLockTransfers = `
SELECT count(pg_advisory_xact_lock(k)) FROM (
  SELECT DISTINCT hashtextextended('idem.ledger.transfer/' || tenant || '/' || id, 0) AS k
    FROM unnest($1::text[], $2::text[]) AS u(tenant, id)
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

// ledgerByKeys is ledgerByIDs for keys of any tenants: $1 the tenants, $2
// the ids, pairwise, in (tenant, id) order.
const ledgerByKeys = `
  FROM (SELECT DISTINCT want_tenant, want_id FROM unnest($1::text[], $2::text[]) AS u(want_tenant, want_id)
         ORDER BY want_tenant, want_id) AS w
 CROSS JOIN LATERAL (SELECT * FROM %s x WHERE x.tenant = w.want_tenant AND x.id = w.want_id LIMIT 1 %s) AS x
 ORDER BY w.want_tenant, w.want_id`

// The accounts are locked in (tenant, id) order (the ordered list drives
// the nested loop, one row at a time): every writer takes them in the same
// order, so writers on hot accounts queue and never deadlock. Locked rows
// are re-read at their newest committed version.
var sqlLedgerLockAccounts = `SELECT ` + ledgerAccountCols + fmt.Sprintf(ledgerByKeys, "ledger_accounts", "FOR UPDATE")

// sqlLedgerLockAccountsOf is sqlLedgerLockAccounts with, among the keys
// locked in order, the two accounts of each transfer named by $3 and $4
// (tenants, ids): a settlement learns its hold's accounts and locks them
// in one statement. A transfer's accounts never change, so reading it
// unlocked is reading it as it will stay.
var sqlLedgerLockAccountsOf = `SELECT ` + ledgerAccountCols + `
  FROM (SELECT DISTINCT want_tenant, want_id FROM (
          SELECT want_tenant, want_id FROM unnest($1::text[], $2::text[]) AS u(want_tenant, want_id)
          UNION ALL
          SELECT t.tenant, a.id
            FROM unnest($3::text[], $4::text[]) AS o(tenant, id)
           CROSS JOIN LATERAL (SELECT * FROM ledger_transfers t WHERE t.tenant = o.tenant AND t.id = o.id LIMIT 1) AS t
           CROSS JOIN LATERAL (VALUES (t.debit_account_id), (t.credit_account_id)) AS a(id)) AS k
         ORDER BY want_tenant, want_id) AS w
 CROSS JOIN LATERAL (SELECT * FROM ledger_accounts x WHERE x.tenant = w.want_tenant AND x.id = w.want_id LIMIT 1 FOR UPDATE) AS x
 ORDER BY w.want_tenant, w.want_id`

var sqlLedgerAccountsGet = `SELECT ` + ledgerAccountCols + fmt.Sprintf(ledgerByKeys, "ledger_accounts", "")

var sqlLedgerTransfersGet = `SELECT ` + ledgerTransferCols + fmt.Sprintf(ledgerByIDs, "ledger_transfers", "")

// The reversed total is a subquery per transfer found: one descent of its
// primary key each, where a join could read the whole table. So is a
// hold's settlement, by the unique (tenant, pending_id) index.
const ledgerFoundCols = ledgerTransferCols + `,
       coalesce((SELECT r.reversed FROM ledger_reversed_totals r
                  WHERE r.tenant = x.tenant AND r.transfer_id = x.id), 0),
       coalesce((SELECT s.id FROM ledger_transfers s
                  WHERE x.pending AND s.tenant = x.tenant AND s.pending_id = x.id), ''),
       coalesce((SELECT s.settles FROM ledger_transfers s
                  WHERE x.pending AND s.tenant = x.tenant AND s.pending_id = x.id), '')`

var sqlLedgerTransfersFind = `SELECT ` + ledgerFoundCols + fmt.Sprintf(ledgerByKeys, "ledger_transfers", "")

// A tenant's transfers, by the primary key, from the cursor on; the
// filters are applied as the key is walked. A transfer's status is its
// kind's, or for a hold its settlement's (ledger.Status).
const sqlLedgerTransfersList = `
SELECT ` + ledgerFoundCols + `
  FROM ledger_transfers x
 WHERE x.tenant = $1 AND x.id > $2
   AND ($3 = '' OR x.debit_account_id = $3 OR x.credit_account_id = $3)
   AND ($4 = '' OR $4 = CASE
         WHEN x.pending THEN coalesce((SELECT CASE s.settles WHEN 'post' THEN 'posted' WHEN 'void' THEN 'voided' ELSE 'expired' END
                                         FROM ledger_transfers s WHERE s.tenant = x.tenant AND s.pending_id = x.id), 'pending')
         WHEN x.settles = 'void' THEN 'voided'
         WHEN x.settles = 'expire' THEN 'expired'
         ELSE 'posted' END)
 ORDER BY x.id LIMIT $5`

// A tenant's open holds, by the primary key of ledger_holds, each joined
// to its transfer by key.
const sqlLedgerHoldsList = `
SELECT ` + ledgerFoundCols + `
  FROM (SELECT t.* FROM ledger_holds h
          JOIN ledger_transfers t ON t.tenant = h.tenant AND t.id = h.transfer_id
         WHERE h.tenant = $1 AND h.transfer_id > $2
           AND ($3 = '' OR h.debit_account_id = $3 OR h.credit_account_id = $3)
         ORDER BY h.transfer_id LIMIT $4) AS x
 ORDER BY x.id`

const sqlLedgerReversals = `
SELECT ` + ledgerTransferCols + ` FROM ledger_transfers
 WHERE tenant = $1 AND reverses_id = $2
 ORDER BY created_at, id`

// One statement appends every transfer of a batch and its entries, moves
// the account caches and adds to the reversed totals; each part arrives as
// arrays, one element per row, and every row is recorded at $1 (the time
// the ledger chose from the clock LedgerLock read under the accounts'
// locks). Foreign keys are checked at the statement's end, when every part
// exists, so a batch may reverse a transfer it posts.
//
// The accounts are moved by an upsert that always finds its row: its
// conflict check descends the primary key by the whole (tenant, id) for
// each account, whatever the statistics say. An UPDATE joined to the list
// is planned from them: for a batch of 900 accounts among 6,000 it hashed
// the whole table (a sequential scan, growing with every tenant's
// accounts). Every row exists and is locked by this transaction, so the
// insert half never inserts; it carries the locked row's own values so
// that the row it proposes passes the table's NOT NULL and CHECK
// constraints, which are checked before the conflict.
//
// A hold expires its timeout after $1, the time it is recorded at; the
// ledger computes the same ExpiresAt in Go. The open holds gain the new
// holds and lose the settled ones (the ledger lists neither a hold settled
// in the same write nor its release: the parts of one statement do not see
// each other's rows).
const sqlLedgerWrite = `
WITH t AS (
  INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency,
                                metadata, reverses_id, reason, created_at,
                                pending, timeout_seconds, expires_at, pending_id, settles)
  SELECT u.tenant, u.id, u.debit, u.credit, u.amount, u.currency,
         nullif(u.metadata, ''), nullif(u.reverses_id, ''), nullif(u.reason, ''), $1::timestamptz,
         u.pending, nullif(u.timeout, 0),
         CASE WHEN u.timeout > 0 THEN $1::timestamptz + u.timeout * interval '1 second' END,
         nullif(u.pending_id, ''), nullif(u.settles, '')
    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],
                $8::text[], $9::text[], $10::text[], $11::boolean[], $12::bigint[], $13::text[], $14::text[])
         AS u(tenant, id, debit, credit, amount, currency, metadata, reverses_id, reason,
              pending, timeout, pending_id, settles)
), e AS (
  INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit,
                              debits_posted, credits_posted, created_at,
                              pending_change, pending_only, debits_pending, credits_pending)
  SELECT u.tenant, u.account_id, u.sequence, u.transfer_id, u.amount, u.credit,
         u.debits_posted, u.credits_posted, $1::timestamptz,
         u.pending_change, u.pending_only, u.debits_pending, u.credits_pending
    FROM unnest($15::text[], $16::text[], $17::bigint[], $18::text[], $19::bigint[], $20::boolean[],
                $21::bigint[], $22::bigint[], $23::bigint[], $24::boolean[], $25::bigint[], $26::bigint[])
         AS u(tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted,
              pending_change, pending_only, debits_pending, credits_pending)
), a AS (
  INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
                               credits_must_not_exceed_debits, created_at,
                               debits_posted, credits_posted, sequence, last_entry_at,
                               debits_pending, credits_pending)
  SELECT u.tenant, u.id, u.currency, u.dnec, u.cned, u.created_at,
         u.debits_posted, u.credits_posted, u.sequence, $1::timestamptz, u.debits_pending, u.credits_pending
    FROM unnest($27::text[], $28::text[], $29::text[], $30::boolean[], $31::boolean[], $32::timestamptz[],
                $33::bigint[], $34::bigint[], $35::bigint[], $36::bigint[], $37::bigint[])
         AS u(tenant, id, currency, dnec, cned, created_at, debits_posted, credits_posted, sequence,
              debits_pending, credits_pending)
  ON CONFLICT (tenant, id) DO UPDATE
     SET debits_posted = excluded.debits_posted, credits_posted = excluded.credits_posted,
         sequence = excluded.sequence, last_entry_at = excluded.last_entry_at,
         debits_pending = excluded.debits_pending, credits_pending = excluded.credits_pending
), h AS (
  INSERT INTO ledger_holds (tenant, transfer_id, debit_account_id, credit_account_id, amount, expires_at)
  SELECT u.tenant, u.id, u.debit, u.credit, u.amount,
         CASE WHEN u.timeout > 0 THEN $1::timestamptz + u.timeout * interval '1 second' END
    FROM unnest($42::text[], $43::text[], $44::text[], $45::text[], $46::bigint[], $47::bigint[])
         AS u(tenant, id, debit, credit, amount, timeout)
), released AS (
  DELETE FROM ledger_holds h
   USING unnest($48::text[], $49::text[]) AS u(tenant, id)
   WHERE h.tenant = u.tenant AND h.transfer_id = u.id
)
INSERT INTO ledger_reversed_totals (tenant, transfer_id, amount, reversed)
SELECT u.tenant, u.transfer_id, u.amount, u.add
  FROM unnest($38::text[], $39::text[], $40::bigint[], $41::bigint[]) AS u(tenant, transfer_id, amount, add)
ON CONFLICT (tenant, transfer_id) DO UPDATE
   SET reversed = ledger_reversed_totals.reversed + excluded.reversed`

const ledgerHoldCols = `tenant, transfer_id, debit_account_id, credit_account_id, amount, expires_at`

// The due holds are read from the expiry index, soonest first, by the
// clock the writers stamp with: a hold found here is one the ledger,
// reading the clock again under the accounts' locks, finds expired.
const sqlLedgerHoldsDue = `
SELECT ` + ledgerHoldCols + ` FROM ledger_holds
 WHERE expires_at <= clock_timestamp()
 ORDER BY expires_at LIMIT $1`

// The writers' clock, read by LedgerLock once its locks are held, and by
// LedgerClock outside any transaction.
const sqlLedgerClock = `SELECT clock_timestamp()`

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
	sqlLedgerScanHolds    = `SELECT ` + ledgerHoldCols + ` FROM ledger_holds ORDER BY tenant, transfer_id`
	// Both tables in one order, merged (driver.LedgerScanQueries): a
	// transfer's row (kind 0), then its entries' (kind 1). The NULLs fill
	// the other table's columns.
	sqlLedgerScanTransfers = `
SELECT tenant, id, 0 AS kind, debit_account_id, credit_account_id, amount, currency, metadata,
       coalesce(reverses_id, ''), coalesce(reason, ''), created_at,
       NULL::boolean AS credit, NULL::text AS account_id, NULL::bigint AS sequence,
       pending, coalesce(timeout_seconds, 0), expires_at, coalesce(pending_id, ''), coalesce(settles, ''),
       NULL::bigint AS pending_change, NULL::boolean AS pending_only
  FROM ledger_transfers
 UNION ALL
SELECT tenant, transfer_id, 1, NULL, NULL, amount, NULL, NULL, NULL, NULL, created_at, credit, account_id, sequence,
       NULL, NULL, NULL, NULL, NULL, pending_change, pending_only
  FROM ledger_entries
 ORDER BY tenant, id, kind, credit, account_id`
)

func (d *Driver) LedgerAccountsInsert(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountsInsertParams) ([]driver.LedgerAccount, error) {
	n := len(p.Accounts)
	tenants, ids, currencies, metas := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	dnec, cned := make([]bool, n), make([]bool, n)
	for i, a := range p.Accounts {
		tenants[i], ids[i], currencies[i], metas[i] = a.Tenant, a.ID, a.Currency, string(a.Metadata)
		dnec[i], cned[i] = a.DebitsMustNotExceedCredits, a.CreditsMustNotExceedDebits
	}
	return driver.Collect(ctx, tx, driver.Value(scanLedgerAccount), sqlLedgerAccountsInsert, tenants, ids, currencies, dnec, cned, metas)
}

func (d *Driver) LedgerAccountsGet(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountsGetParams) ([]driver.LedgerAccount, error) {
	tenants, ids := keyArrays(p.Keys)
	return driver.Collect(ctx, tx, driver.Value(scanLedgerAccount), sqlLedgerAccountsGet, tenants, ids)
}

func (d *Driver) LedgerAccountGet(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountGetParams) (*driver.LedgerAccount, error) {
	return scanLedgerAccount(tx.QueryRow(ctx, sqlLedgerAccountGet, p.Tenant, p.ID))
}

func (d *Driver) LedgerLock(ctx context.Context, tx driver.Tx, p *driver.LedgerLockParams) (*driver.LedgerLocked, error) {
	out := &driver.LedgerLocked{}
	var steps []step
	if len(p.TransferKeys) > 0 {
		tenants, ids := keyArrays(p.TransferKeys)
		steps = append(steps, unread(sqlLedgerLockTransfers, tenants, ids))
	}
	tenants, ids := keyArrays(p.AccountKeys)
	lock, args := sqlLedgerLockAccounts, []any{tenants, ids}
	if len(p.AccountsOf) > 0 {
		ofTenants, ofIDs := keyArrays(p.AccountsOf)
		lock, args = sqlLedgerLockAccountsOf, append(args, ofTenants, ofIDs)
	}
	steps = append(steps, step{sql: lock, args: args,
		read: func(rows driver.Rows) (err error) {
			out.Accounts, err = driver.CollectRows(rows, driver.Value(scanLedgerAccount))
			return err
		}})
	if len(p.Find) > 0 {
		tenants, ids := keyArrays(p.Find)
		steps = append(steps, step{sql: sqlLedgerTransfersFind, args: []any{tenants, ids},
			read: func(rows driver.Rows) (err error) {
				out.Found, err = driver.CollectRows(rows, scanFoundTransfer)
				return err
			}})
	}
	steps = append(steps, step{sql: sqlLedgerClock, read: func(rows driver.Rows) error {
		if !rows.Next() {
			return fmt.Errorf("postgres: ledger clock: no row")
		}
		return rows.Scan(&out.Clock)
	}})
	if err := pipeline(ctx, tx, generic(steps...)...); err != nil {
		return nil, err
	}
	out.Clock = out.Clock.UTC()
	return out, nil
}

func (d *Driver) LedgerTransfersGet(ctx context.Context, tx driver.Tx, p *driver.LedgerTransfersGetParams) ([]driver.LedgerTransfer, error) {
	return driver.Collect(ctx, tx, scanTransfer, sqlLedgerTransfersGet, p.Tenant, p.IDs)
}

func (d *Driver) LedgerTransfersFind(ctx context.Context, tx driver.Tx, p *driver.LedgerTransfersFindParams) ([]driver.LedgerFoundTransfer, error) {
	tenants, ids := keyArrays(p.Keys)
	return driver.Collect(ctx, tx, scanFoundTransfer, sqlLedgerTransfersFind, tenants, ids)
}

func (d *Driver) LedgerTransfersList(ctx context.Context, tx driver.Tx, p *driver.LedgerTransfersListParams) ([]driver.LedgerFoundTransfer, error) {
	sql, args := sqlLedgerTransfersList, []any{p.Tenant, p.After, p.AccountID, p.Status, p.Limit}
	if p.Status == "pending" {
		sql, args = sqlLedgerHoldsList, []any{p.Tenant, p.After, p.AccountID, p.Limit}
	}
	return driver.Collect(ctx, tx, scanFoundTransfer, sql, args...)
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
	nt, ne, na, nr, nh := len(p.Transfers), len(p.Entries), len(p.Accounts), len(p.Reversed), len(p.Holds)
	// The columns are carved from one array per element type: a batch's
	// write makes four arrays, not fifty.
	strs := make([]string, 10*nt+3*ne+3*na+2*nr+4*nh)
	ints := make([]int64, 2*nt+7*ne+5*na+2*nr+2*nh)
	bools := make([]bool, nt+2*ne+2*na)
	times := make([]time.Time, na)
	tTenants, tIDs, debits, credits := carve(&strs, nt), carve(&strs, nt), carve(&strs, nt), carve(&strs, nt)
	amounts := carve(&ints, nt)
	currencies, metas, reverses, reasons := carve(&strs, nt), carve(&strs, nt), carve(&strs, nt), carve(&strs, nt)
	pendings, timeouts, pendingIDs, settles := carve(&bools, nt), carve(&ints, nt), carve(&strs, nt), carve(&strs, nt)
	for i, t := range p.Transfers {
		tTenants[i], tIDs[i], debits[i], credits[i] = t.Tenant, t.ID, t.DebitAccountID, t.CreditAccountID
		amounts[i], currencies[i], metas[i] = t.Amount, t.Currency, string(t.Metadata)
		reverses[i], reasons[i] = t.ReversesID, t.Reason
		pendings[i], timeouts[i], pendingIDs[i], settles[i] = t.Pending, t.TimeoutSeconds, t.PendingID, t.Settles
	}
	eTenants, eAccounts, eTransfers := carve(&strs, ne), carve(&strs, ne), carve(&strs, ne)
	eSeqs, eAmounts, eDebits, eCredits := carve(&ints, ne), carve(&ints, ne), carve(&ints, ne), carve(&ints, ne)
	eCredit, eOnly := carve(&bools, ne), carve(&bools, ne)
	eChanges, eDebitsPending, eCreditsPending := carve(&ints, ne), carve(&ints, ne), carve(&ints, ne)
	for i, e := range p.Entries {
		eTenants[i], eAccounts[i], eTransfers[i] = e.Tenant, e.AccountID, e.TransferID
		eSeqs[i], eAmounts[i], eDebits[i], eCredits[i], eCredit[i] = e.Sequence, e.Amount, e.DebitsPosted, e.CreditsPosted, e.Credit
		eChanges[i], eOnly[i], eDebitsPending[i], eCreditsPending[i] = e.PendingChange, e.PendingOnly, e.DebitsPending, e.CreditsPending
	}
	aTenants, aIDs, aCurrencies := carve(&strs, na), carve(&strs, na), carve(&strs, na)
	aDnec, aCned := carve(&bools, na), carve(&bools, na)
	aCreated := carve(&times, na)
	aDebits, aCredits, aSeqs := carve(&ints, na), carve(&ints, na), carve(&ints, na)
	aDebitsPending, aCreditsPending := carve(&ints, na), carve(&ints, na)
	for i, a := range p.Accounts {
		aTenants[i], aIDs[i], aCurrencies[i] = a.Tenant, a.ID, a.Currency
		aDnec[i], aCned[i], aCreated[i] = a.DebitsMustNotExceedCredits, a.CreditsMustNotExceedDebits, a.CreatedAt
		aDebits[i], aCredits[i], aSeqs[i] = a.DebitsPosted, a.CreditsPosted, a.Sequence
		aDebitsPending[i], aCreditsPending[i] = a.DebitsPending, a.CreditsPending
	}
	rTenants, rIDs, rAmounts, rAdds := carve(&strs, nr), carve(&strs, nr), carve(&ints, nr), carve(&ints, nr)
	for i, r := range p.Reversed {
		rTenants[i], rIDs[i], rAmounts[i], rAdds[i] = r.Tenant, r.TransferID, r.Amount, r.Add
	}
	hTenants, hIDs, hDebits, hCredits := carve(&strs, nh), carve(&strs, nh), carve(&strs, nh), carve(&strs, nh)
	hAmounts, hTimeouts := carve(&ints, nh), carve(&ints, nh)
	for i, h := range p.Holds {
		hTenants[i], hIDs[i], hDebits[i], hCredits[i] = h.Tenant, h.TransferID, h.DebitAccountID, h.CreditAccountID
		hAmounts[i], hTimeouts[i] = h.Amount, h.TimeoutSeconds
	}
	relTenants, relIDs := keyArrays(p.Released)
	return write(ctx, tx, "ledger write", generic(unread(sqlLedgerWrite, p.At,
		tTenants, tIDs, debits, credits, amounts, currencies, metas, reverses, reasons,
		pendings, timeouts, pendingIDs, settles,
		eTenants, eAccounts, eSeqs, eTransfers, eAmounts, eCredit, eDebits, eCredits,
		eChanges, eOnly, eDebitsPending, eCreditsPending,
		aTenants, aIDs, aCurrencies, aDnec, aCned, aCreated, aDebits, aCredits, aSeqs,
		aDebitsPending, aCreditsPending,
		rTenants, rIDs, rAmounts, rAdds,
		hTenants, hIDs, hDebits, hCredits, hAmounts, hTimeouts,
		relTenants, relIDs,
	))...)
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

func (d *Driver) LedgerClock(ctx context.Context, _ *driver.LedgerClockParams) (time.Time, error) {
	var clock time.Time
	if err := d.Reader().QueryRow(ctx, sqlLedgerClock).Scan(&clock); err != nil {
		return time.Time{}, err
	}
	return clock.UTC().Truncate(time.Microsecond), nil
}

func (d *Driver) LedgerEntryAsOf(ctx context.Context, tx driver.Tx, p *driver.LedgerEntryAsOfParams) (*driver.LedgerEntry, error) {
	return scanLedgerEntry(tx.QueryRow(ctx, sqlLedgerEntryAsOf, p.Tenant, p.AccountID, p.AsOf))
}

func (d *Driver) LedgerEntries(ctx context.Context, tx driver.Tx, p *driver.LedgerEntriesParams) ([]driver.LedgerEntry, error) {
	return driver.Collect(ctx, tx, driver.Value(scanLedgerEntry), sqlLedgerEntries, p.Tenant, p.AccountID, p.MaxSequence, p.Limit)
}

func (d *Driver) LedgerHoldsDue(ctx context.Context, tx driver.Tx, p *driver.LedgerHoldsDueParams) ([]driver.LedgerHold, error) {
	return driver.Collect(ctx, tx, driver.Value(scanLedgerHold), sqlLedgerHoldsDue, p.Limit)
}

func scanLedgerHold(r driver.Row) (*driver.LedgerHold, error) {
	var h driver.LedgerHold
	var expires *time.Time
	if err := r.Scan(&h.Tenant, &h.TransferID, &h.DebitAccountID, &h.CreditAccountID, &h.Amount, &expires); err != nil {
		return nil, err
	}
	if expires != nil {
		h.ExpiresAt = expires.UTC()
	}
	return &h, nil
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
	var kind, amount int64
	var debit, credit, currency, meta, reverses, reason, acct *string
	var at time.Time
	var isCredit, pending, only *bool
	var seq, timeout, change *int64
	var expires *time.Time
	var pendingID, settles *string
	if err := r.Scan(&tenant, &id, &kind, &debit, &credit, &amount, &currency, &meta, &reverses, &reason, &at,
		&isCredit, &acct, &seq, &pending, &timeout, &expires, &pendingID, &settles, &change, &only); err != nil {
		return nil, nil, err
	}
	if kind == 0 {
		t := &driver.LedgerTransfer{Tenant: tenant, ID: id, DebitAccountID: *debit, CreditAccountID: *credit,
			Amount: amount, Currency: *currency, Metadata: textBytes(meta), ReversesID: *reverses, Reason: *reason,
			CreatedAt: at.UTC(), Pending: *pending, TimeoutSeconds: *timeout, PendingID: *pendingID, Settles: *settles}
		if expires != nil {
			t.ExpiresAt = expires.UTC()
		}
		return t, nil, nil
	}
	return nil, &driver.LedgerEntry{Tenant: tenant, AccountID: *acct, Sequence: *seq, TransferID: id,
		Amount: amount, Credit: *isCredit, CreatedAt: at.UTC(), PendingChange: *change, PendingOnly: *only}, nil
}

func scanTransfer(r driver.Row) (t driver.LedgerTransfer, err error) {
	err = scanLedgerTransfer(r, &t)
	return t, err
}

// scanLedgerTransfer decodes ledgerTransferCols, then extra columns.
func scanLedgerTransfer(r driver.Row, t *driver.LedgerTransfer, extra ...any) error {
	var meta *string
	var expires *time.Time
	dest := append([]any{&t.Tenant, &t.ID, &t.DebitAccountID, &t.CreditAccountID, &t.Amount, &t.Currency,
		&meta, &t.ReversesID, &t.Reason, &t.CreatedAt,
		&t.Pending, &t.TimeoutSeconds, &expires, &t.PendingID, &t.Settles}, extra...)
	if err := r.Scan(dest...); err != nil {
		return err
	}
	t.Metadata = textBytes(meta)
	t.CreatedAt = t.CreatedAt.UTC()
	if expires != nil {
		t.ExpiresAt = expires.UTC()
	}
	return nil
}

// keyArrays splits keys into the tenants and ids arrays ledgerByKeys takes.
func keyArrays(keys []driver.LedgerKey) (tenants, ids []string) {
	tenants, ids = make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], ids[i] = k.Tenant, k.ID
	}
	return tenants, ids
}

func scanLedgerAccount(r driver.Row) (*driver.LedgerAccount, error) {
	var a driver.LedgerAccount
	var meta *string
	var last *time.Time
	if err := r.Scan(&a.Tenant, &a.ID, &a.Currency, &a.DebitsMustNotExceedCredits, &a.CreditsMustNotExceedDebits,
		&meta, &a.DebitsPosted, &a.CreditsPosted, &a.Sequence, &last, &a.CreatedAt,
		&a.DebitsPending, &a.CreditsPending); err != nil {
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
		&e.DebitsPosted, &e.CreditsPosted, &e.CreatedAt,
		&e.PendingChange, &e.PendingOnly, &e.DebitsPending, &e.CreditsPending); err != nil {
		return nil, err
	}
	e.CreatedAt = e.CreatedAt.UTC()
	return &e, nil
}

func textBytes(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// carve takes the next n elements of *backing as a column of their own
// (its capacity cut at n) and advances *backing past them. A column of
// no elements is empty, not nil: pgx sends it as an empty array, not NULL.
func carve[T any](backing *[]T, n int) []T {
	col := (*backing)[:n:n]
	*backing = (*backing)[n:]
	return col
}
