package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/idemhq/idem/driver"
)

// GetTransfer reads a transfer with its reversals, oldest first, and for a
// hold, its status and the transfer that settled it; ErrNotFound when the
// tenant has no such transfer.
func (l *Ledger) GetTransfer(ctx context.Context, tx driver.Tx, q TransferQuery) (Transfer, error) {
	tenant, id := q.Tenant, q.ID
	if err := l.checkTx(tx); err != nil {
		return Transfer{}, err
	}
	if err := checkTenant(tenant); err != nil {
		return Transfer{}, err
	}
	if checkID("id", id) != nil {
		return Transfer{}, fmt.Errorf("ledger: transfer %q: %w", id, ErrNotFound)
	}
	found, err := l.d.LedgerTransfersFind(ctx, tx, &driver.LedgerTransfersFindParams{Keys: []driver.LedgerKey{{Tenant: tenant, ID: id}}})
	if err != nil {
		return Transfer{}, fmt.Errorf("ledger: read transfer %q: %w", id, err)
	}
	if len(found) == 0 {
		return Transfer{}, fmt.Errorf("ledger: transfer %q: %w", id, ErrNotFound)
	}
	t := transferFound(&found[0].LedgerTransfer, found[0].SettledBy, found[0].Settled)
	revs, err := l.d.LedgerReversals(ctx, tx, &driver.LedgerReversalsParams{Tenant: tenant, TransferID: id})
	if err != nil {
		return Transfer{}, fmt.Errorf("ledger: read reversals of %q: %w", id, err)
	}
	for i := range revs {
		t.Reversals = append(t.Reversals, transferFromRow(&revs[i]))
	}
	return t, nil
}

// Balance is the account's totals as believed at *q.AsOf: those of its
// newest entry recorded at or before it (zero when none), found by one
// index lookup. A nil AsOf means now: the account's latest committed
// totals, with the read time as AsOf. The zero time is a moment like any
// other (before every entry).
//
// An answer as of a moment is final: the same question asked later, in any
// transaction, gets the same answer, however many writers were committing
// at the time. (A "now" answer is not a promise about its AsOf: a transfer
// stamped just before it may still have been committing.) A moment before
// the account's newest entry is final already and answered in any
// transaction. A later one is first settled (see ledger.md): the read waits
// for the account's writers still committing, which needs a read-write
// transaction — READ COMMITTED on Postgres, so that it sees what it waited
// for (under REPEATABLE READ a writer that committed after the snapshot
// fails it with driver.ErrSerialization); any write transaction on SQLite.
// In a read-only transaction it returns ErrNeedsWriteTx (wrapped), with the
// transaction still usable: read again in a read-write one, which writes
// nothing. A moment the writers' clock has not passed yet is refused with
// invalid_request (field as_of), never waited for in tx: call AwaitMoment
// before beginning tx, which waits for a moment at most MaxAsOfWait ahead
// holding no connection.
func (l *Ledger) Balance(ctx context.Context, tx driver.Tx, q BalanceQuery) (Balance, error) {
	tenant, accountID, asOf := q.Tenant, q.AccountID, q.AsOf
	acct, err := l.account(ctx, tx, tenant, accountID)
	if err != nil {
		return Balance{}, err
	}
	if asOf == nil {
		b := Balance{AccountID: acct.ID, AsOf: l.now()}
		totals(&b, acct.DebitsPosted, acct.CreditsPosted, acct.DebitsPending, acct.CreditsPending)
		return b, nil
	}
	at := asOf.Truncate(time.Microsecond) // entries are recorded in microseconds
	if err := l.settle(ctx, tx, acct, at); err != nil {
		return Balance{}, err
	}
	b := Balance{AccountID: acct.ID, AsOf: asOf.UTC()}
	e, err := l.d.LedgerEntryAsOf(ctx, tx, &driver.LedgerEntryAsOfParams{Tenant: tenant, AccountID: acct.ID, AsOf: at})
	if errors.Is(err, driver.ErrNotFound) {
		return b, nil
	}
	if err != nil {
		return Balance{}, fmt.Errorf("ledger: balance of %q: %w", accountID, err)
	}
	totals(&b, e.DebitsPosted, e.CreditsPosted, e.DebitsPending, e.CreditsPending)
	return b, nil
}

// Entries lists an account's entries newest first, as believed at q.AsOf
// (nil: now, every entry committed). It returns the cursor of the next
// page, or "" when this is the last. With an AsOf, the answer is final and
// needs what Balance's does: ErrNeedsWriteTx (wrapped) in a read-only
// transaction for a moment at or after the account's newest entry, and
// invalid_request for a moment the clock has not passed (AwaitMoment first).
func (l *Ledger) Entries(ctx context.Context, tx driver.Tx, q EntriesQuery) ([]Entry, string, error) {
	tenant, accountID := q.Tenant, q.AccountID
	limit := q.Limit
	if limit == 0 {
		limit = defaultEntriesLimit
	}
	if limit < 1 || limit > maxEntriesLimit {
		return nil, "", invalid("limit", fmt.Sprintf("limit %d is outside 1..%d", q.Limit, maxEntriesLimit))
	}
	maxSeq := int64(math.MaxInt64)
	if q.After != "" {
		// The cursor is the sequence of the last entry of the previous page.
		seq, err := strconv.ParseInt(q.After, 10, 64)
		if err != nil || seq < 1 {
			return nil, "", invalid("after", fmt.Sprintf("cursor %q is not one this ledger returned", q.After))
		}
		maxSeq = seq - 1
	}
	acct, err := l.account(ctx, tx, tenant, accountID)
	if err != nil {
		return nil, "", err
	}
	if q.AsOf != nil {
		at := q.AsOf.Truncate(time.Microsecond)
		if err := l.settle(ctx, tx, acct, at); err != nil {
			return nil, "", err
		}
		// Entries are in time order within an account, so "recorded by
		// AsOf" is "sequence up to that of the newest entry by AsOf".
		e, err := l.d.LedgerEntryAsOf(ctx, tx, &driver.LedgerEntryAsOfParams{Tenant: tenant, AccountID: acct.ID, AsOf: at})
		if errors.Is(err, driver.ErrNotFound) {
			return []Entry{}, "", nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("ledger: entries of %q: %w", accountID, err)
		}
		maxSeq = min(maxSeq, e.Sequence)
	}
	if maxSeq < 1 {
		return []Entry{}, "", nil
	}
	rows, err := l.d.LedgerEntries(ctx, tx, &driver.LedgerEntriesParams{Tenant: tenant, AccountID: acct.ID,
		MaxSequence: maxSeq, Limit: limit + 1})
	if err != nil {
		return nil, "", fmt.Errorf("ledger: entries of %q: %w", accountID, err)
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = strconv.FormatInt(rows[limit-1].Sequence, 10)
	}
	out := make([]Entry, len(rows))
	for i := range rows {
		out[i] = entryFromRow(&rows[i])
	}
	return out, next, nil
}

// TransfersQuery selects a page of a tenant's transfers, by id.
type TransfersQuery struct {
	// Tenant owns the transfers. Required.
	Tenant string
	// AccountID keeps the transfers on this account, either side; "": all.
	AccountID string
	// Status keeps the transfers of this status; "": all. StatusPending
	// lists the open holds, from the open holds alone, however many
	// transfers the tenant has; another status is a filter on a walk of
	// the tenant's transfers by id.
	Status Status
	// Limit bounds the page. Default 100; bound 1..1000.
	Limit int
	// After is the cursor a previous page returned; empty: the first.
	After string
}

// Transfers lists a tenant's transfers by id, each with its status (a
// hold's, with the transfer that settled it), and returns the cursor of
// the next page, or "" when this is the last.
func (l *Ledger) Transfers(ctx context.Context, tx driver.Tx, q TransfersQuery) ([]Transfer, string, error) {
	if err := l.checkTx(tx); err != nil {
		return nil, "", err
	}
	if err := checkTenant(q.Tenant); err != nil {
		return nil, "", err
	}
	limit := q.Limit
	if limit == 0 {
		limit = defaultEntriesLimit
	}
	if limit < 1 || limit > maxEntriesLimit {
		return nil, "", invalid("limit", fmt.Sprintf("limit %d is outside 1..%d", q.Limit, maxEntriesLimit))
	}
	switch q.Status {
	case "", StatusPending, StatusPosted, StatusVoided, StatusExpired:
	default:
		return nil, "", invalid("status", fmt.Sprintf("status %q is not pending, posted, voided or expired", q.Status))
	}
	if q.After != "" && checkID("after", q.After) != nil {
		return nil, "", invalid("after", fmt.Sprintf("cursor %q is not one this ledger returned", q.After))
	}
	if q.AccountID != "" && checkID("account_id", q.AccountID) != nil {
		return []Transfer{}, "", nil // an id we would never have stored names no account
	}
	rows, err := l.d.LedgerTransfersList(ctx, tx, &driver.LedgerTransfersListParams{Tenant: q.Tenant,
		AccountID: q.AccountID, Status: string(q.Status), After: q.After, Limit: limit + 1})
	if err != nil {
		return nil, "", fmt.Errorf("ledger: list transfers: %w", err)
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = rows[limit-1].ID
	}
	out := make([]Transfer, len(rows))
	for i := range rows {
		out[i] = transferFound(&rows[i].LedgerTransfer, rows[i].SettledBy, rows[i].Settled)
	}
	return out, next, nil
}
