package ledger

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
)

// Post records transfers as one atomic batch: either every transfer is
// stored (or found already stored, Existing set) or none is, and the first
// refusal is returned as an *Error. Results are in request order.
//
// The order of work is what keeps refusals clean: validate the request,
// lock the transfer ids and accounts, read what is stored, decide every
// transfer in memory, and only then write them all at once (one statement
// on Postgres, however many transfers). A refusal is decided before the
// write, so it leaves nothing behind and never aborts the caller's
// transaction. To have each transfer accepted or refused on its own, use
// PostEach.
func (l *Ledger) Post(ctx context.Context, tx driver.Tx, tenant string, ts ...NewTransfer) (out []Transfer, err error) {
	ctx, span := l.tracer.Start(ctx, "ledger.Post")
	defer func() { endSpan(span, err) }()
	return l.post(ctx, tx, tenant, ts)
}

func (l *Ledger) post(ctx context.Context, tx driver.Tx, tenant string, ts []NewTransfer) ([]Transfer, error) {
	if err := l.checkTx(tx); err != nil {
		return nil, err
	}
	if err := l.checkTransfers(tenant, len(ts)); err != nil {
		return nil, err
	}
	ops := make([]op, len(ts))
	seen := make(map[string]int, len(ts))
	for i, t := range ts {
		o := l.transferOp(tenant, t)
		if o.err != nil {
			return nil, inBatch(o.err, i, len(ts))
		}
		if j, dup := seen[o.row.ID]; dup {
			return nil, inBatch(invalid("id", fmt.Sprintf("transfer id %q is also transfers[%d] of this batch", o.row.ID, j)), i, len(ts))
		}
		seen[o.row.ID] = i
		ops[i] = o
	}
	res, err := l.apply(ctx, tx, ops, true)
	if err != nil {
		return nil, err
	}
	out := make([]Transfer, len(res))
	for i, r := range res {
		out[i] = *r.Transfer
	}
	return out, nil
}

// transferRow validates a request and turns it into the row to store. chosen
// reports whether the caller chose the id (a generated one cannot exist yet).
func (l *Ledger) transferRow(tenant string, t NewTransfer) (driver.LedgerTransfer, bool, error) {
	chosen := t.ID != ""
	if !chosen {
		t.ID = l.cfg.NewID()
	}
	if err := checkID("id", t.ID); err != nil {
		return driver.LedgerTransfer{}, false, err
	}
	if err := checkID("debit_account_id", t.DebitAccountID); err != nil {
		return driver.LedgerTransfer{}, false, err
	}
	if err := checkID("credit_account_id", t.CreditAccountID); err != nil {
		return driver.LedgerTransfer{}, false, err
	}
	if t.DebitAccountID == t.CreditAccountID {
		return driver.LedgerTransfer{}, false, newError(ErrSameAccount.Code, "credit_account_id",
			fmt.Sprintf("the transfer debits and credits the same account %q: it must move money between two accounts", t.DebitAccountID))
	}
	if t.Amount <= 0 {
		return driver.LedgerTransfer{}, false, newError(ErrInvalidAmount.Code, "amount",
			fmt.Sprintf("amount %d is not a positive number of minor units", t.Amount))
	}
	if err := checkCurrency("currency", t.Currency); err != nil {
		return driver.LedgerTransfer{}, false, err
	}
	timeout, err := checkTimeout(t.Pending, t.Timeout)
	if err != nil {
		return driver.LedgerTransfer{}, false, err
	}
	meta, err := canonicalMetadata(t.Metadata)
	if err != nil {
		return driver.LedgerTransfer{}, false, err
	}
	return driver.LedgerTransfer{
		Tenant:          tenant,
		ID:              t.ID,
		DebitAccountID:  t.DebitAccountID,
		CreditAccountID: t.CreditAccountID,
		Amount:          t.Amount,
		Currency:        t.Currency,
		Metadata:        meta,
		Pending:         t.Pending,
		TimeoutSeconds:  timeout,
	}, chosen, nil
}

// checkTimeout returns a hold's timeout in seconds: whole seconds from 1
// to MaxTimeout, and only on a hold.
func checkTimeout(pending bool, d time.Duration) (int64, error) {
	switch {
	case d == 0:
		return 0, nil
	case !pending:
		return 0, invalid("timeout_seconds", "a timeout is for a pending transfer only")
	case d < time.Second || d > MaxTimeout || d%time.Second != 0:
		return 0, newError(ErrInvalidTimeout.Code, "timeout_seconds",
			fmt.Sprintf("timeout %s is not whole seconds from 1s to %d days", d, MaxTimeout/(24*time.Hour)))
	}
	return int64(d / time.Second), nil
}

// sameTransfer compares a stored transfer with a new request for its id and
// names the first field that differs.
func sameTransfer(old, req *driver.LedgerTransfer) error {
	field := ""
	switch {
	case old.ReversesID != req.ReversesID:
		field = "reverses_id"
	case old.PendingID != req.PendingID:
		field = "pending_id"
	case old.Settles != req.Settles:
		field = "settles"
	case old.Pending != req.Pending:
		field = "pending"
	case old.TimeoutSeconds != req.TimeoutSeconds:
		field = "timeout_seconds"
	case old.DebitAccountID != req.DebitAccountID:
		field = "debit_account_id"
	case old.CreditAccountID != req.CreditAccountID:
		field = "credit_account_id"
	case old.Amount != req.Amount:
		field = "amount"
	case old.Currency != req.Currency:
		field = "currency"
	case !bytes.Equal(old.Metadata, req.Metadata):
		field = "metadata"
	case old.Reason != req.Reason:
		field = "reason"
	default:
		return nil
	}
	return transferConflict(old.ID, field)
}

func transferConflict(id, field string) *Error {
	return newError(ErrTransferExists.Code+field, field,
		fmt.Sprintf("transfer %q already exists with a different %s", id, field))
}

// inBatch names the position of a refused transfer when the batch has more
// than one.
func inBatch(err error, i, n int) error {
	e, ok := err.(*Error)
	if !ok || n == 1 {
		return err
	}
	c := *e
	c.Message = fmt.Sprintf("transfers[%d]: %s", i, e.Message)
	return &c
}

// Reverse posts a compensating transfer for (part of) a transfer: the same
// accounts swapped, linked by ReversesID. Amount 0 reverses all that
// remains. The original is never changed; the total reversed never exceeds
// it, which the locks on its accounts and the database's reversed-total
// constraint both enforce. A reversal cannot itself be reversed. With an
// ID, Reverse is idempotent like Post.
func (l *Ledger) Reverse(ctx context.Context, tx driver.Tx, tenant string, r NewReversal) (t Transfer, err error) {
	ctx, span := l.tracer.Start(ctx, "ledger.Reverse")
	defer func() { endSpan(span, err) }()
	return l.reverse(ctx, tx, tenant, r)
}

func (l *Ledger) reverse(ctx context.Context, tx driver.Tx, tenant string, r NewReversal) (Transfer, error) {
	if err := l.checkTx(tx); err != nil {
		return Transfer{}, err
	}
	o := l.reversalOp(tenant, r)
	if o.err != nil {
		return Transfer{}, o.err
	}
	res, err := l.apply(ctx, tx, []op{o}, true)
	if err != nil {
		return Transfer{}, err
	}
	return *res[0].Transfer, nil
}

// Settle posts or voids a hold (NewSettlement): a new transfer linked to
// it by PendingID, written with its entries in tx. A hold settles once:
// a second settlement, whatever its id, wherever it runs, is refused with
// pending_transfer_already_posted, _voided or _expired, decided under the
// locks of the hold's accounts (and, last, by the database's unique index
// on the hold's settlement). A hold whose timeout has passed is refused
// with pending_transfer_already_expired, even before ExpireDue has
// written its expiry. With an ID, Settle is idempotent like Post: the
// same settlement again returns the stored one with Existing set, even
// after the hold has settled. Right after it succeeds, the caller
// enqueues transfer.posted or transfer.voided in tx.
func (l *Ledger) Settle(ctx context.Context, tx driver.Tx, tenant string, s NewSettlement) (t Transfer, err error) {
	ctx, span := l.tracer.Start(ctx, "ledger.Settle")
	defer func() { endSpan(span, err) }()
	if err := l.checkTx(tx); err != nil {
		return Transfer{}, err
	}
	o := l.settlementOp(tenant, s, false)
	if o.err != nil {
		return Transfer{}, o.err
	}
	res, err := l.apply(ctx, tx, []op{o}, true)
	if err != nil {
		return Transfer{}, err
	}
	return *res[0].Transfer, nil
}

// Expiry is a hold released by ExpireDue: the expiry transfer written, in
// the hold's tenant.
type Expiry struct {
	Tenant   string
	Transfer Transfer
}

// ExpireDue releases, in tx, up to limit holds (1..Config.MaxBatch) of any
// tenant whose timeout has passed by the writers' clock, soonest first,
// and returns the expiries it wrote: each a transfer with Settles
// SettleExpire and the held amount, recorded with its entries like any
// settlement. The caller enqueues transfer.expired for each in tx and
// commits, so the release and its event exist together or not at all.
//
// Callers may race, on one server or several: each hold is expired by
// one of them, and the others find it settled, under the accounts'
// locks, and leave it out of their answer. A hold posted or voided in
// the meantime is left out alike. An empty answer means nothing was due.
func (l *Ledger) ExpireDue(ctx context.Context, tx driver.Tx, limit int) (out []Expiry, err error) {
	ctx, span := l.tracer.Start(ctx, "ledger.ExpireDue")
	defer func() { endSpan(span, err) }()
	if err := l.checkTx(tx); err != nil {
		return nil, err
	}
	if limit < 1 || limit > l.cfg.MaxBatch {
		return nil, invalid("limit", fmt.Sprintf("limit %d is outside 1..%d", limit, l.cfg.MaxBatch))
	}
	due, err := l.d.LedgerHoldsDue(ctx, tx, &driver.LedgerHoldsDueParams{Now: l.now(), Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("ledger: read due holds: %w", err)
	}
	if len(due) == 0 {
		return nil, nil
	}
	ops := make([]op, len(due))
	for i, h := range due {
		ops[i] = l.settlementOp(h.Tenant, NewSettlement{PendingID: h.TransferID, Settles: SettleExpire}, true)
	}
	res, err := l.apply(ctx, tx, ops, false)
	if err != nil {
		return nil, err
	}
	for i, r := range res {
		if r.Err == nil {
			out = append(out, Expiry{Tenant: due[i].Tenant, Transfer: *r.Transfer})
		}
	}
	return out, nil
}
