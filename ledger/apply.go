package ledger

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/idemhq/idem/driver"
)

// Op is one operation of an Apply, in Tenant: exactly one of Account,
// Transfer, Reversal and Settlement is set.
type Op struct {
	Tenant     string
	Account    *NewAccount
	Transfer   *NewTransfer
	Reversal   *NewReversal
	Settlement *NewSettlement
}

// OpResult is what became of one Op. On success Account (for an Op's
// Account) or Transfer (for its Transfer or Reversal) is set, with Existing
// when the id was already taken by an identical account or transfer;
// nothing was written for it then. Otherwise Err is the refusal, and
// nothing was written for that op.
type OpResult struct {
	Account  *Account
	Transfer *Transfer
	Err      *Error
}

// TransferResult is what became of one transfer of PostEach: the stored
// Transfer (Existing set for an identical repeat of its id), or Err, the
// refusal.
type TransferResult struct {
	Transfer Transfer
	Err      *Error
}

// Apply applies ops in tx, each on its own: a refused op (OpResult.Err)
// writes nothing and does not stop the others. The ops are decided in
// slice order as if applied one at a time, each seeing the ones before
// it: an account created by one op can take transfers in later ops, a
// transfer posted by one op can be reversed by a later one, and two
// reversals of one transfer share what remains of it. Sequences, running
// totals and refusals are exactly those of CreateAccount, Post and Reverse
// called one op at a time in that order, except that every transfer of the
// call is recorded at the same time.
//
// The ops may belong to several tenants. However many there are, Apply
// makes the same few statements (see ledger.md): it inserts the new
// accounts, locks every transfer id and account the ops name (in one order
// all writers use, so concurrent calls queue rather than deadlock), reads
// the stored transfers and reversed totals, decides every op in memory and
// writes the accepted ones at once.
//
// Results are in op order. The error is for the call as a whole, with no
// results: a transaction it cannot use, more than Config.MaxBatch ops
// (invalid_request), or a database failure, after which the caller's
// transaction must be rolled back (it may have written part of the call)
// and the call retried, whole or split.
func (l *Ledger) Apply(ctx context.Context, tx driver.Tx, ops []Op) (out []OpResult, err error) {
	ctx, span := l.tracer.Start(ctx, "ledger.Apply")
	defer func() { endSpan(span, err) }()
	if err := l.checkTx(tx); err != nil {
		return nil, err
	}
	if len(ops) > l.cfg.MaxBatch {
		return nil, invalid("ops", fmt.Sprintf("%d operations in one call, more than %d", len(ops), l.cfg.MaxBatch))
	}
	if len(ops) == 0 {
		return nil, nil
	}
	checked := make([]op, len(ops))
	for i, o := range ops {
		checked[i] = l.checkOp(o)
	}
	return l.apply(ctx, tx, checked, false)
}

// PostEach posts transfers in tenant each on its own, like TigerBeetle's
// create_transfers: every transfer gets its own result, and a refusal does
// not stop the others (Post, by contrast, is all or nothing). It is Apply
// with transfers only; its error is for the call as a whole: a bad tenant,
// no transfers or more than Config.MaxBatch, or a database failure.
func (l *Ledger) PostEach(ctx context.Context, tx driver.Tx, tenant string, ts ...NewTransfer) (out []TransferResult, err error) {
	ctx, span := l.tracer.Start(ctx, "ledger.PostEach")
	defer func() { endSpan(span, err) }()
	if err := l.checkTx(tx); err != nil {
		return nil, err
	}
	if err := l.checkTransfers(tenant, len(ts)); err != nil {
		return nil, err
	}
	ops := make([]op, len(ts))
	for i, t := range ts {
		ops[i] = l.transferOp(tenant, t)
	}
	res, err := l.apply(ctx, tx, ops, false)
	if err != nil {
		return nil, err
	}
	out = make([]TransferResult, len(res))
	for i, r := range res {
		if r.Err != nil {
			out[i].Err = r.Err
			continue
		}
		out[i].Transfer = *r.Transfer
	}
	return out, nil
}

// checkTransfers checks what Post and PostEach take for the call as a whole.
func (l *Ledger) checkTransfers(tenant string, n int) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if n == 0 {
		return invalid("transfers", "no transfers to post")
	}
	if n > l.cfg.MaxBatch {
		return invalid("transfers", fmt.Sprintf("%d transfers in one batch, more than %d", n, l.cfg.MaxBatch))
	}
	return nil
}

type opKind int

const (
	opAccount opKind = iota
	opTransfer
	opReversal
	opSettlement
)

// op is an operation validated in Go and ready to be decided against the
// ledger. A reversal's row holds only what the request says: its ID,
// ReversesID (the original), Amount (0: all that remains), Reason and
// Metadata; the rest comes from the original. So does a settlement's: its
// ID, PendingID (the hold), Settles, Amount (0: all that is held) and
// Metadata.
type op struct {
	kind    opKind
	err     *Error // refused by validation
	account driver.LedgerAccount
	row     driver.LedgerTransfer
	chosen  bool // the caller chose the transfer id (a generated one cannot exist yet)
}

func refused(err error) op {
	if e, ok := err.(*Error); ok {
		return op{err: e}
	}
	// The checks return only *Error; anything else is a bug.
	panic(fmt.Sprintf("ledger: a check returned %T: %v", err, err))
}

func (l *Ledger) checkOp(o Op) op {
	n := 0
	for _, set := range []bool{o.Account != nil, o.Transfer != nil, o.Reversal != nil, o.Settlement != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return op{err: invalid("op", fmt.Sprintf("an operation sets exactly one of account, transfer, reversal and settlement, not %d", n))}
	}
	switch {
	case o.Account != nil:
		return l.accountOp(o.Tenant, *o.Account)
	case o.Transfer != nil:
		if err := checkTenant(o.Tenant); err != nil {
			return refused(err)
		}
		return l.transferOp(o.Tenant, *o.Transfer)
	case o.Settlement != nil:
		return l.settlementOp(o.Tenant, *o.Settlement, false)
	default:
		return l.reversalOp(o.Tenant, *o.Reversal)
	}
}

// accountOp validates an account request, in CreateAccount's order.
func (l *Ledger) accountOp(tenant string, a NewAccount) op {
	if err := checkTenant(tenant); err != nil {
		return refused(err)
	}
	if a.ID == "" {
		a.ID = l.cfg.NewID()
	}
	if err := checkID("id", a.ID); err != nil {
		return refused(err)
	}
	if err := checkCurrency("currency", a.Currency); err != nil {
		return refused(err)
	}
	meta, err := canonicalMetadata(a.Metadata)
	if err != nil {
		return refused(err)
	}
	return op{kind: opAccount, account: driver.LedgerAccount{
		Tenant:                     tenant,
		ID:                         a.ID,
		Currency:                   a.Currency,
		DebitsMustNotExceedCredits: a.Flags.DebitsMustNotExceedCredits,
		CreditsMustNotExceedDebits: a.Flags.CreditsMustNotExceedDebits,
		Metadata:                   meta,
	}}
}

// transferOp validates a transfer request of a tenant already checked.
func (l *Ledger) transferOp(tenant string, t NewTransfer) op {
	row, chosen, err := l.transferRow(tenant, t)
	if err != nil {
		return refused(err)
	}
	return op{kind: opTransfer, row: row, chosen: chosen}
}

// reversalOp validates a reversal request, in Reverse's order.
func (l *Ledger) reversalOp(tenant string, r NewReversal) op {
	if err := checkTenant(tenant); err != nil {
		return refused(err)
	}
	if err := checkID("transfer_id", r.TransferID); err != nil {
		return refused(err)
	}
	chosen := r.ID != ""
	if !chosen {
		r.ID = l.cfg.NewID()
	}
	if err := checkID("id", r.ID); err != nil {
		return refused(err)
	}
	if r.Amount < 0 {
		return op{err: newError(ErrInvalidAmount.Code, "amount", fmt.Sprintf("amount %d is negative", r.Amount))}
	}
	if err := checkReason(r.Reason); err != nil {
		return refused(err)
	}
	meta, err := canonicalMetadata(r.Metadata)
	if err != nil {
		return refused(err)
	}
	return op{kind: opReversal, chosen: chosen, row: driver.LedgerTransfer{
		Tenant: tenant, ID: r.ID, ReversesID: r.TransferID, Amount: r.Amount, Reason: r.Reason, Metadata: meta,
	}}
}

// settlementOp validates a settlement request; expire only from
// ExpireDue.
func (l *Ledger) settlementOp(tenant string, s NewSettlement, expire bool) op {
	if err := checkTenant(tenant); err != nil {
		return refused(err)
	}
	if err := checkID("pending_id", s.PendingID); err != nil {
		return refused(err)
	}
	switch {
	case s.Settles == SettlePost, s.Settles == SettleVoid, s.Settles == SettleExpire && expire:
	default:
		return op{err: invalid("settles", fmt.Sprintf("settles %q is not %q or %q", s.Settles, SettlePost, SettleVoid))}
	}
	chosen := s.ID != ""
	if !chosen {
		s.ID = l.cfg.NewID()
	}
	if err := checkID("id", s.ID); err != nil {
		return refused(err)
	}
	if s.Amount < 0 {
		return op{err: newError(ErrInvalidAmount.Code, "amount", fmt.Sprintf("amount %d is negative", s.Amount))}
	}
	if s.Amount != 0 && s.Settles != SettlePost {
		return op{err: invalid("amount", fmt.Sprintf("a %s releases the whole hold and takes no amount", s.Settles))}
	}
	meta, err := canonicalMetadata(s.Metadata)
	if err != nil {
		return refused(err)
	}
	return op{kind: opSettlement, chosen: chosen, row: driver.LedgerTransfer{
		Tenant: tenant, ID: s.ID, PendingID: s.PendingID, Settles: string(s.Settles), Amount: s.Amount, Metadata: meta,
	}}
}

// origID is the transfer a reversal or settlement names.
func (o *op) origID() string {
	if o.kind == opSettlement {
		return o.row.PendingID
	}
	return o.row.ReversesID
}

// settlement is what settled a hold: the settling transfer's id and its
// Settles.
type settlement struct{ id, settles string }

// rowKey names an account or a transfer of a tenant.
type rowKey = driver.LedgerKey

// batch is the ledger as one call's ops see it: the rows they name, read
// under the locks, moved forward in memory op by op.
type batch struct {
	ops      []op
	accounts map[rowKey]*account
	// transfers holds the stored transfers the ops name and those posted
	// by earlier ops of the call.
	transfers map[rowKey]*driver.LedgerTransfer
	// reversed is each original's reversed total, stored plus the
	// reversals accepted so far.
	reversed map[rowKey]int64
	// settled is what settled each hold read under the locks or by an
	// earlier op of the call; a hold absent is pending.
	settled map[rowKey]settlement
	// clock is the writers' clock, read under every lock the call holds.
	clock time.Time
}

type account struct {
	row driver.LedgerAccount
	// born is the op that created the account in this call, which later
	// ops can use; -1 when it existed before the call.
	born    int
	locked  bool
	written bool
	// lastEntryAt is the account's newest entry time as locked, before
	// this call's entries.
	lastEntryAt time.Time
}

// apply decides ops against the ledger and writes the accepted ones. With
// atomic, the first refusal is returned as the error and nothing is
// written. (Atomic callers pass one account op, which inserts nothing when
// it is refused, or no account op at all.)
func (l *Ledger) apply(ctx context.Context, tx driver.Tx, ops []op, atomic bool) ([]OpResult, error) {
	b := &batch{
		ops:       ops,
		accounts:  map[rowKey]*account{},
		transfers: map[rowKey]*driver.LedgerTransfer{},
		reversed:  map[rowKey]int64{},
		settled:   map[rowKey]settlement{},
	}
	if err := l.insertAccounts(ctx, tx, b); err != nil {
		return nil, err
	}
	if err := l.lockAndRead(ctx, tx, b); err != nil {
		return nil, err
	}
	res, w, stamp, err := b.decide()
	if err != nil {
		return nil, err
	}
	if atomic {
		for i := range res {
			if res[i].Err != nil {
				return nil, inBatch(res[i].Err, i, len(res))
			}
		}
	}
	if len(w.Transfers) == 0 {
		return res, nil
	}
	if err := l.d.LedgerWrite(ctx, tx, w); err != nil {
		return nil, fmt.Errorf("ledger: write %d transfers: %w", len(w.Transfers), err)
	}
	for _, t := range stamp {
		t.CreatedAt = w.At
		if t.TimeoutSeconds > 0 {
			e := expiresAt(w.At, t.TimeoutSeconds)
			t.ExpiresAt = &e
		}
	}
	return res, nil
}

// insertAccounts inserts the accounts the ops create, in one statement,
// and reads back in a second the ones that existed already. The first
// valid op for an id is the one that creates it.
func (l *Ledger) insertAccounts(ctx context.Context, tx driver.Tx, b *batch) error {
	first := map[rowKey]int{}
	var rows []driver.LedgerAccount
	for i, o := range b.ops {
		if o.err != nil || o.kind != opAccount {
			continue
		}
		k := rowKey{Tenant: o.account.Tenant, ID: o.account.ID}
		if _, ok := first[k]; !ok {
			first[k] = i
			rows = append(rows, o.account)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	inserted, err := l.d.LedgerAccountsInsert(ctx, tx, &driver.LedgerAccountsInsertParams{Accounts: rows, Now: l.now()})
	if err != nil {
		return fmt.Errorf("ledger: insert %d accounts: %w", len(rows), err)
	}
	for i := range inserted {
		k := rowKey{Tenant: inserted[i].Tenant, ID: inserted[i].ID}
		b.accounts[k] = &account{row: inserted[i], born: first[k]}
	}
	var taken []rowKey
	for _, r := range rows {
		if k := (rowKey{Tenant: r.Tenant, ID: r.ID}); b.accounts[k] == nil {
			taken = append(taken, k)
		}
	}
	if len(taken) == 0 {
		return nil
	}
	// The ids were taken, and their holders have committed by now: under
	// READ COMMITTED this new statement sees their rows.
	found, err := l.d.LedgerAccountsGet(ctx, tx, &driver.LedgerAccountsGetParams{Keys: taken})
	if err != nil {
		return fmt.Errorf("ledger: read %d accounts: %w", len(taken), err)
	}
	for i := range found {
		b.accounts[rowKey{Tenant: found[i].Tenant, ID: found[i].ID}] = &account{row: found[i], born: -1}
	}
	for _, k := range taken {
		if b.accounts[k] == nil {
			return fmt.Errorf("ledger: account %q of tenant %q was neither inserted nor found", k.ID, k.Tenant)
		}
	}
	return nil
}

// maxLockRounds bounds the extra lock rounds lockAndRead takes for
// originals that appeared only once the first locks were held.
const maxLockRounds = 3

// lockAndRead locks every transfer id the ops choose and every account
// they may write, then reads the stored transfers among those ids and the
// originals the ops reverse, with their reversed totals.
//
// An original is immutable, so it is read first, without locks, to learn
// which accounts to lock. Its reversed total is read again after: every
// reversal of a transfer holds the locks of its two accounts while it
// reads and adds to the total, so the total read under them is current.
// An original committed by another writer between the two reads has
// accounts not locked yet: they are locked in an extra round, out of the
// common order, which the database may answer with a deadlock (a
// retryable driver.ErrSerialization), and the totals read again.
func (l *Ledger) lockAndRead(ctx context.Context, tx driver.Tx, b *batch) error {
	var transferKeys, origKeys, accountKeys []rowKey
	for _, o := range b.ops {
		if o.err != nil || o.kind == opAccount {
			continue
		}
		if o.chosen {
			transferKeys = append(transferKeys, rowKey{Tenant: o.row.Tenant, ID: o.row.ID})
		}
		if o.kind == opTransfer {
			accountKeys = append(accountKeys, rowKey{Tenant: o.row.Tenant, ID: o.row.DebitAccountID},
				rowKey{Tenant: o.row.Tenant, ID: o.row.CreditAccountID})
		} else {
			origKeys = append(origKeys, rowKey{Tenant: o.row.Tenant, ID: o.origID()})
		}
	}
	if len(accountKeys) == 0 && len(origKeys) == 0 {
		// No op can post: every one is refused already (validation).
		return nil
	}
	// The originals' accounts are locked with the others, learnt in the
	// same statement (LedgerLockParams.AccountsOf): a settlement or
	// reversal reads its original under those locks in the round trip
	// that takes them.
	keys := slices.Concat(transferKeys, origKeys)
	if err := l.lock(ctx, tx, b, transferKeys, accountKeys, origKeys, keys); err != nil {
		return err
	}
	for round := 0; ; round++ {
		var extra []rowKey
		for _, k := range origKeys {
			t := b.transfers[k]
			if t == nil || t.ReversesID != "" {
				continue
			}
			for _, id := range []string{t.DebitAccountID, t.CreditAccountID} {
				if a := b.accounts[rowKey{Tenant: t.Tenant, ID: id}]; a == nil || !a.locked {
					extra = append(extra, rowKey{Tenant: t.Tenant, ID: id})
				}
			}
		}
		if len(extra) == 0 {
			return nil
		}
		if round == maxLockRounds {
			return fmt.Errorf("ledger: the accounts of reversed transfers could not be locked in %d rounds", maxLockRounds)
		}
		if err := l.lock(ctx, tx, b, nil, extra, nil, origKeys); err != nil {
			return err
		}
	}
}

// lock locks the transfer keys, the accounts and the accounts of the
// transfers accountsOf, then reads, under the locks, the stored transfers
// among find with their reversed totals and the writers' clock: all one
// round trip on Postgres.
func (l *Ledger) lock(ctx context.Context, tx driver.Tx, b *batch, transferKeys, accountKeys, accountsOf, find []rowKey) error {
	got, err := l.d.LedgerLock(ctx, tx, &driver.LedgerLockParams{
		TransferKeys: transferKeys, AccountKeys: accountKeys, AccountsOf: accountsOf, Find: find, Now: l.now()})
	if err != nil {
		return fmt.Errorf("ledger: lock accounts: %w", err)
	}
	for i := range got.Accounts {
		k := rowKey{Tenant: got.Accounts[i].Tenant, ID: got.Accounts[i].ID}
		a := b.accounts[k]
		if a == nil {
			a = &account{born: -1}
			b.accounts[k] = a
		}
		a.row, a.locked, a.lastEntryAt = got.Accounts[i], true, got.Accounts[i].LastEntryAt
	}
	b.found(got.Found)
	b.clock = got.Clock
	return nil
}

// found keeps the stored transfers read under the locks: the accounts of
// any original among them are locked, so its reversed total and what
// settled it are current (every reversal and settlement holds those locks
// while it reads them and until it commits).
func (b *batch) found(found []driver.LedgerFoundTransfer) {
	for i := range found {
		t := found[i].LedgerTransfer
		k := rowKey{Tenant: t.Tenant, ID: t.ID}
		b.transfers[k] = &t
		b.reversed[k] = found[i].Reversed
		if found[i].SettledBy != "" {
			b.settled[k] = settlement{id: found[i].SettledBy, settles: found[i].Settled}
		} else {
			delete(b.settled, k)
		}
	}
}

// decide runs the ops in order against the batch and returns a result per
// op, the write of the accepted ones, and the results to stamp with its
// time. Its error is a broken invariant, never a refusal.
func (b *batch) decide() ([]OpResult, *driver.LedgerWriteParams, []*Transfer, error) {
	res := make([]OpResult, len(b.ops))
	w := &driver.LedgerWriteParams{}
	var stamp []*Transfer
	reversed := map[rowKey]int{} // index in w.Reversed
	for i := range b.ops {
		o := &b.ops[i]
		if o.err != nil {
			res[i].Err = o.err
			continue
		}
		var err error
		switch o.kind {
		case opAccount:
			res[i].Account, err = b.decideAccount(i, o)
		case opTransfer:
			res[i].Transfer, err = b.decideTransfer(i, o, w)
		case opReversal:
			res[i].Transfer, err = b.decideReversal(i, o, w, reversed)
		case opSettlement:
			res[i].Transfer, err = b.decideSettlement(i, o, w)
		}
		if e, ok := err.(*Error); ok {
			res[i] = OpResult{Err: e}
			continue
		}
		if err != nil {
			return nil, nil, nil, err
		}
		if t := res[i].Transfer; t != nil && t.CreatedAt.IsZero() {
			stamp = append(stamp, t) // posted by this call
		}
	}
	// The time never goes backwards on an account: not before its newest
	// entry, whatever the clock says.
	w.At = b.clock
	for _, a := range b.accounts {
		if !a.written {
			continue
		}
		w.Accounts = append(w.Accounts, a.row)
		if a.lastEntryAt.After(w.At) {
			w.At = a.lastEntryAt
		}
	}
	// In key order, as they were locked, rather than the map's.
	slices.SortFunc(w.Accounts, func(a, b driver.LedgerAccount) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.ID, b.ID))
	})
	openHolds(w)
	return res, w, stamp, nil
}

// openHolds lists the open holds w adds and removes: its holds, and the
// holds its settlements settle, except a hold both posted and settled in
// w, which never becomes open (the parts of one write do not see each
// other's rows).
func openHolds(w *driver.LedgerWriteParams) {
	added, settled := map[rowKey]bool{}, map[rowKey]bool{}
	for i := range w.Transfers {
		t := &w.Transfers[i]
		if t.Pending {
			added[rowKey{Tenant: t.Tenant, ID: t.ID}] = true
			if t.TimeoutSeconds > 0 {
				t.ExpiresAt = expiresAt(w.At, t.TimeoutSeconds)
			}
		}
		if t.PendingID != "" {
			settled[rowKey{Tenant: t.Tenant, ID: t.PendingID}] = true
		}
	}
	for _, t := range w.Transfers {
		if k := (rowKey{Tenant: t.Tenant, ID: t.ID}); t.Pending && !settled[k] {
			w.Holds = append(w.Holds, driver.LedgerHold{Tenant: t.Tenant, TransferID: t.ID, DebitAccountID: t.DebitAccountID,
				CreditAccountID: t.CreditAccountID, Amount: t.Amount, TimeoutSeconds: t.TimeoutSeconds, ExpiresAt: t.ExpiresAt})
		}
		if k := (rowKey{Tenant: t.Tenant, ID: t.PendingID}); t.PendingID != "" && !added[k] {
			w.Released = append(w.Released, k)
		}
	}
}

// expiresAt is when a hold recorded at at with a timeout expires: the
// moment the drivers store.
func expiresAt(at time.Time, timeoutSeconds int64) time.Time {
	return at.Add(time.Duration(timeoutSeconds) * time.Second)
}

func (b *batch) decideAccount(i int, o *op) (*Account, error) {
	k := rowKey{Tenant: o.account.Tenant, ID: o.account.ID}
	a := b.accounts[k]
	if a == nil {
		return nil, fmt.Errorf("ledger: account %q of tenant %q was not read", k.ID, k.Tenant)
	}
	got := accountFromRow(&a.row)
	if a.born == i {
		return &got, nil
	}
	switch {
	case a.row.Currency != o.account.Currency:
		return nil, accountConflict(k.ID, "currency")
	case a.row.DebitsMustNotExceedCredits != o.account.DebitsMustNotExceedCredits ||
		a.row.CreditsMustNotExceedDebits != o.account.CreditsMustNotExceedDebits:
		return nil, accountConflict(k.ID, "flags")
	case !bytes.Equal(a.row.Metadata, o.account.Metadata):
		return nil, accountConflict(k.ID, "metadata")
	}
	got.Existing = true
	return &got, nil
}

func (b *batch) decideTransfer(i int, o *op, w *driver.LedgerWriteParams) (*Transfer, error) {
	k := rowKey{Tenant: o.row.Tenant, ID: o.row.ID}
	if old := b.transfers[k]; old != nil {
		if err := sameTransfer(old, &o.row); err != nil {
			return nil, err
		}
		st := b.settled[k]
		t := transferFound(old, st.id, st.settles)
		t.Existing = true
		return &t, nil
	}
	m := move{posted: o.row.Amount}
	if o.row.Pending {
		m = move{pending: o.row.Amount}
	}
	if err := b.post(i, &o.row, w, m); err != nil {
		return nil, err
	}
	b.transfers[k] = &o.row
	t := transferFromRow(&o.row)
	return &t, nil
}

func (b *batch) decideReversal(i int, o *op, w *driver.LedgerWriteParams, reversed map[rowKey]int) (*Transfer, error) {
	r := &o.row
	ok := rowKey{Tenant: r.Tenant, ID: r.ReversesID}
	orig := b.transfers[ok]
	if orig == nil {
		return nil, newError(ErrTransferNotFound.Code, "transfer_id", fmt.Sprintf("transfer %q not found", r.ReversesID))
	}
	if orig.ReversesID != "" {
		return nil, newError(ErrCannotReverseReversal.Code, "transfer_id",
			fmt.Sprintf("transfer %q is a reversal of %q and cannot be reversed", orig.ID, orig.ReversesID))
	}
	if orig.Pending {
		return nil, newError(ErrCannotReversePending.Code, "transfer_id",
			fmt.Sprintf("transfer %q is a hold, which moved nothing posted: void it, or reverse the transfer that posted it", orig.ID))
	}
	if s := Settles(orig.Settles); s == SettleVoid || s == SettleExpire {
		return nil, newError(ErrCannotReversePending.Code, "transfer_id",
			fmt.Sprintf("transfer %q is the %s of hold %q, which moved nothing posted", orig.ID, s, orig.PendingID))
	}
	row := driver.LedgerTransfer{
		Tenant:          r.Tenant,
		ID:              r.ID,
		DebitAccountID:  orig.CreditAccountID,
		CreditAccountID: orig.DebitAccountID,
		Amount:          r.Amount,
		Currency:        orig.Currency,
		Metadata:        r.Metadata,
		ReversesID:      orig.ID,
		Reason:          r.Reason,
	}
	k := rowKey{Tenant: r.Tenant, ID: r.ID}
	if old := b.transfers[k]; old != nil {
		req := row
		if r.Amount == 0 {
			req.Amount = old.Amount // "all that remained" is what it was then
		}
		if err := sameTransfer(old, &req); err != nil {
			return nil, err
		}
		t := transferFromRow(old)
		t.Existing = true
		return &t, nil
	}
	remaining := orig.Amount - b.reversed[ok]
	if row.Amount == 0 {
		row.Amount = remaining
	}
	if remaining <= 0 || row.Amount > remaining {
		return nil, newError(ErrReversalExceedsRemaining.Code, "amount",
			fmt.Sprintf("transfer %q has %d of %d left to reverse, asked for %d", orig.ID, remaining, orig.Amount, row.Amount))
	}
	if err := b.post(i, &row, w, move{posted: row.Amount}); err != nil {
		return nil, err
	}
	b.reversed[ok] += row.Amount
	if j, seen := reversed[ok]; seen {
		w.Reversed[j].Add += row.Amount
	} else {
		reversed[ok] = len(w.Reversed)
		w.Reversed = append(w.Reversed, driver.LedgerReversedAdd{Tenant: ok.Tenant, TransferID: ok.ID, Amount: orig.Amount, Add: row.Amount})
	}
	b.transfers[k] = &row
	t := transferFromRow(&row)
	return &t, nil
}

// decideSettlement settles a hold: the hold must be pending, not expired
// (unless this is its expiry, which must be due), and a post may take at
// most what is held. The settlement moves the hold's accounts: it removes
// the held amount from their pending totals and, for a post, adds its
// amount to their posted totals.
func (b *batch) decideSettlement(i int, o *op, w *driver.LedgerWriteParams) (*Transfer, error) {
	s := &o.row
	hk := rowKey{Tenant: s.Tenant, ID: s.PendingID}
	hold := b.transfers[hk]
	if hold == nil {
		return nil, newError(ErrTransferNotFound.Code, "pending_id", fmt.Sprintf("transfer %q not found", s.PendingID))
	}
	if !hold.Pending {
		return nil, newError(ErrTransferNotPending.Code, "pending_id", fmt.Sprintf("transfer %q is not a hold", hold.ID))
	}
	row := driver.LedgerTransfer{
		Tenant:          s.Tenant,
		ID:              s.ID,
		DebitAccountID:  hold.DebitAccountID,
		CreditAccountID: hold.CreditAccountID,
		Amount:          s.Amount,
		Currency:        hold.Currency,
		Metadata:        s.Metadata,
		PendingID:       hold.ID,
		Settles:         s.Settles,
	}
	if row.Amount == 0 {
		row.Amount = hold.Amount // a void, an expiry, or a post of all that is held
	}
	k := rowKey{Tenant: s.Tenant, ID: s.ID}
	if old := b.transfers[k]; old != nil {
		if err := sameTransfer(old, &row); err != nil {
			return nil, err
		}
		t := transferFromRow(old)
		t.Existing = true
		return &t, nil
	}
	if st, ok := b.settled[hk]; ok {
		return nil, alreadySettled(hold.ID, st)
	}
	expired := !hold.ExpiresAt.IsZero() && !b.clock.Before(hold.ExpiresAt)
	if Settles(s.Settles) == SettleExpire {
		if !expired {
			return nil, newError(errNotDue.Code, "pending_id", fmt.Sprintf("hold %q expires at %s", hold.ID, hold.ExpiresAt))
		}
	} else if expired {
		return nil, newError(ErrPendingAlreadyExpired.Code, "pending_id",
			fmt.Sprintf("hold %q expired at %s", hold.ID, hold.ExpiresAt.Format(time.RFC3339Nano)))
	}
	if row.Amount > hold.Amount {
		return nil, newError(ErrAmountExceedsPending.Code, "amount",
			fmt.Sprintf("hold %q holds %d, asked to post %d", hold.ID, hold.Amount, row.Amount))
	}
	m := move{pending: -hold.Amount}
	if Settles(s.Settles) == SettlePost {
		m.posted = row.Amount
	}
	if err := b.post(i, &row, w, m); err != nil {
		return nil, err
	}
	b.settled[hk] = settlement{id: row.ID, settles: row.Settles}
	b.transfers[k] = &row
	t := transferFromRow(&row)
	return &t, nil
}

// errNotDue refuses an expiry of a hold whose timeout has not passed: only
// ExpireDue asks for one, and skips it.
var errNotDue = &Error{Code: "pending_transfer_not_due"}

func alreadySettled(holdID string, st settlement) *Error {
	code := ErrPendingAlreadyPosted.Code
	switch Settles(st.settles) {
	case SettleVoid:
		code = ErrPendingAlreadyVoided.Code
	case SettleExpire:
		code = ErrPendingAlreadyExpired.Code
	}
	return newError(code, "pending_id", fmt.Sprintf("hold %q was settled by transfer %q (%s)", holdID, st.id, st.settles))
}

// move is what a transfer adds to its two accounts' totals on its side:
// to the posted total, and to the pending one (negative for a
// settlement, which releases the hold).
type move struct{ posted, pending int64 }

// post checks a transfer against its accounts as they stand after the ops
// before op i and, on success, moves them forward by m and adds the
// transfer and its entries to w. A refusal is an *Error and changes
// nothing.
//
// The flags count pending amounts: a debit account that must not exceed
// its credits keeps debits posted plus debits pending within its credits
// posted, so what a hold reserves cannot be spent again; the mirror for
// credits.
func (b *batch) post(i int, row *driver.LedgerTransfer, w *driver.LedgerWriteParams, m move) error {
	deb, err := b.usable(i, row.Tenant, row.DebitAccountID, "debit_account_id")
	if err != nil {
		return err
	}
	cred, err := b.usable(i, row.Tenant, row.CreditAccountID, "credit_account_id")
	if err != nil {
		return err
	}
	for _, a := range []*driver.LedgerAccount{&deb.row, &cred.row} {
		if a.Currency != row.Currency {
			return newError(ErrCurrencyMismatch.Code, "currency",
				fmt.Sprintf("transfer is in %s but account %q holds %s", row.Currency, a.ID, a.Currency))
		}
	}
	d, c := &deb.row, &cred.row
	// Every total, and posted plus pending on each side (what the flags
	// compare), must fit an int64. Moves are positive but for a release
	// of pending amounts, which cannot overflow.
	debits, okD := addTotal(d.DebitsPosted, m.posted)
	debitsPending, okDP := addTotal(d.DebitsPending, m.pending)
	debitsAll, okDA := addTotal(debits, debitsPending)
	if !okD || !okDP || !okDA {
		return newError(ErrAmountOverflow.Code, "amount", fmt.Sprintf("account %q debits would overflow", d.ID))
	}
	credits, okC := addTotal(c.CreditsPosted, m.posted)
	creditsPending, okCP := addTotal(c.CreditsPending, m.pending)
	creditsAll, okCA := addTotal(credits, creditsPending)
	if !okC || !okCP || !okCA {
		return newError(ErrAmountOverflow.Code, "amount", fmt.Sprintf("account %q credits would overflow", c.ID))
	}
	if d.DebitsMustNotExceedCredits && debitsAll > d.CreditsPosted {
		return newError(ErrInsufficientFunds.Code, "debit_account_id",
			fmt.Sprintf("account %q has a balance of %d, %d of it held, less than %d available",
				d.ID, d.CreditsPosted-d.DebitsPosted, d.DebitsPending, row.Amount))
	}
	if c.CreditsMustNotExceedDebits && creditsAll > c.DebitsPosted {
		return newError(ErrInsufficientFunds.Code, "credit_account_id",
			fmt.Sprintf("account %q may not have credits above its debits (%d + %d pending + %d > %d)",
				c.ID, c.CreditsPosted, c.CreditsPending, row.Amount, c.DebitsPosted))
	}
	d.DebitsPosted, d.DebitsPending, d.Sequence = debits, debitsPending, d.Sequence+1
	c.CreditsPosted, c.CreditsPending, c.Sequence = credits, creditsPending, c.Sequence+1
	deb.written, cred.written = true, true
	w.Transfers = append(w.Transfers, *row)
	only := m.posted == 0
	w.Entries = append(w.Entries,
		driver.LedgerEntry{Tenant: row.Tenant, AccountID: d.ID, Sequence: d.Sequence, TransferID: row.ID,
			Amount: row.Amount, PendingChange: m.pending, PendingOnly: only,
			DebitsPosted: d.DebitsPosted, CreditsPosted: d.CreditsPosted, DebitsPending: d.DebitsPending, CreditsPending: d.CreditsPending},
		driver.LedgerEntry{Tenant: row.Tenant, AccountID: c.ID, Sequence: c.Sequence, TransferID: row.ID,
			Amount: row.Amount, Credit: true, PendingChange: m.pending, PendingOnly: only,
			DebitsPosted: c.DebitsPosted, CreditsPosted: c.CreditsPosted, DebitsPending: c.DebitsPending, CreditsPending: c.CreditsPending})
	return nil
}

// addTotal adds a move to a total; false when a positive move would
// overflow (a total never goes below zero: a release takes back what a
// hold added).
func addTotal(total, add int64) (int64, bool) {
	if add > 0 && total > math.MaxInt64-add {
		return 0, false
	}
	return total + add, true
}

// usable returns the account op i may post to: one that existed before
// the call or was created by an earlier op, locked.
func (b *batch) usable(i int, tenant, id, field string) (*account, error) {
	a := b.accounts[rowKey{Tenant: tenant, ID: id}]
	if a == nil || a.born >= i {
		return nil, newError(ErrAccountNotFound.Code, field, fmt.Sprintf("account %q not found", id))
	}
	if !a.locked {
		return nil, fmt.Errorf("ledger: account %q of tenant %q is written without its lock", id, tenant)
	}
	return a, nil
}
