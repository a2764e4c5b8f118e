package ledger

import (
	"bytes"
	"context"
	"fmt"

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
	}, chosen, nil
}

// sameTransfer compares a stored transfer with a new request for its id and
// names the first field that differs.
func sameTransfer(old, req *driver.LedgerTransfer) error {
	field := ""
	switch {
	case old.ReversesID != req.ReversesID:
		field = "reverses_id"
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
