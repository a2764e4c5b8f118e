package ledger

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/idemhq/idem/driver"
)

// Post records transfers as one atomic batch: either every transfer is
// stored (or found already stored, Existing set) or none is, and the first
// refusal is returned as an *Error. Results are in request order.
//
// The order of work is what keeps refusals clean: validate the request,
// lock the transfer ids and accounts, read what is stored, decide every
// transfer in memory, and only then write. A refusal is decided before the
// first write, so it leaves nothing behind and never aborts the caller's
// transaction.
func (l *Ledger) Post(ctx context.Context, tx driver.Tx, tenant string, ts ...NewTransfer) (out []Transfer, err error) {
	ctx, span := l.tracer.Start(ctx, "ledger.Post")
	defer func() { endSpan(span, err) }()
	return l.post(ctx, tx, tenant, ts)
}

func (l *Ledger) post(ctx context.Context, tx driver.Tx, tenant string, ts []NewTransfer) ([]Transfer, error) {
	if err := l.checkTx(tx); err != nil {
		return nil, err
	}
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, invalid("transfers", "no transfers to post")
	}
	if len(ts) > l.cfg.MaxBatch {
		return nil, invalid("transfers", fmt.Sprintf("%d transfers in one batch, more than %d", len(ts), l.cfg.MaxBatch))
	}

	rows := make([]driver.LedgerTransfer, len(ts))
	var chosenIDs, accountIDs []string
	seen := make(map[string]int, len(ts))
	for i, t := range ts {
		row, chosen, err := l.transferRow(tenant, t)
		if err != nil {
			return nil, inBatch(err, i, len(ts))
		}
		if j, dup := seen[row.ID]; dup {
			return nil, inBatch(invalid("id", fmt.Sprintf("transfer id %q is also transfers[%d] of this batch", row.ID, j)), i, len(ts))
		}
		seen[row.ID] = i
		if chosen {
			chosenIDs = append(chosenIDs, row.ID)
		}
		accountIDs = append(accountIDs, row.DebitAccountID, row.CreditAccountID)
		rows[i] = row
	}
	slices.Sort(accountIDs)
	accountIDs = slices.Compact(accountIDs)

	st, err := l.lock(ctx, tx, tenant, chosenIDs, accountIDs)
	if err != nil {
		return nil, err
	}
	existing := map[string]*driver.LedgerTransfer{}
	if len(chosenIDs) > 0 {
		found, err := l.d.LedgerTransfersGet(ctx, tx, &driver.LedgerTransfersGetParams{Tenant: tenant, IDs: chosenIDs})
		if err != nil {
			return nil, fmt.Errorf("ledger: read transfers: %w", err)
		}
		for i := range found {
			existing[found[i].ID] = &found[i]
		}
	}

	out := make([]Transfer, len(ts))
	var plans []*plan
	for i := range rows {
		row := &rows[i]
		if old := existing[row.ID]; old != nil {
			if err := sameTransfer(old, row); err != nil {
				return nil, inBatch(err, i, len(ts))
			}
			out[i] = transferFromRow(old)
			out[i].Existing = true
			continue
		}
		p, err := st.plan(row, 0)
		if err != nil {
			return nil, inBatch(err, i, len(ts))
		}
		p.index = i
		plans = append(plans, p)
	}
	for _, p := range plans {
		if err := l.write(ctx, tx, st, p); err != nil {
			return nil, err
		}
		out[p.index] = transferFromRow(&p.w.Transfer)
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
			fmt.Sprintf("transfer %q debits and credits the same account %q", t.ID, t.DebitAccountID))
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

// state is the locked accounts of one call, moved forward in memory as its
// transfers are decided.
type state struct {
	accounts map[string]*driver.LedgerAccount
}

func (l *Ledger) lock(ctx context.Context, tx driver.Tx, tenant string, transferIDs, accountIDs []string) (*state, error) {
	rows, err := l.d.LedgerLock(ctx, tx, &driver.LedgerLockParams{Tenant: tenant, TransferIDs: transferIDs, AccountIDs: accountIDs})
	if err != nil {
		return nil, fmt.Errorf("ledger: lock accounts: %w", err)
	}
	st := &state{accounts: make(map[string]*driver.LedgerAccount, len(rows))}
	for i := range rows {
		st.accounts[rows[i].ID] = &rows[i]
	}
	return st, nil
}

// plan is one transfer decided and ready to write.
type plan struct {
	index int
	w     driver.LedgerTransferWriteParams
}

// plan checks a transfer against the accounts as they stand after the
// transfers decided before it, and on success moves them forward.
func (st *state) plan(row *driver.LedgerTransfer, reversesAmount int64) (*plan, error) {
	deb, cred := st.accounts[row.DebitAccountID], st.accounts[row.CreditAccountID]
	if deb == nil {
		return nil, newError(ErrAccountNotFound.Code, "debit_account_id", fmt.Sprintf("account %q not found", row.DebitAccountID))
	}
	if cred == nil {
		return nil, newError(ErrAccountNotFound.Code, "credit_account_id", fmt.Sprintf("account %q not found", row.CreditAccountID))
	}
	for _, a := range []*driver.LedgerAccount{deb, cred} {
		if a.Currency != row.Currency {
			return nil, newError(ErrCurrencyMismatch.Code, "currency",
				fmt.Sprintf("transfer is in %s but account %q holds %s", row.Currency, a.ID, a.Currency))
		}
	}
	if deb.DebitsPosted > math.MaxInt64-row.Amount {
		return nil, newError(ErrAmountOverflow.Code, "amount", fmt.Sprintf("account %q debits_posted would overflow", deb.ID))
	}
	if cred.CreditsPosted > math.MaxInt64-row.Amount {
		return nil, newError(ErrAmountOverflow.Code, "amount", fmt.Sprintf("account %q credits_posted would overflow", cred.ID))
	}
	debits, credits := deb.DebitsPosted+row.Amount, cred.CreditsPosted+row.Amount
	if deb.DebitsMustNotExceedCredits && debits > deb.CreditsPosted {
		return nil, newError(ErrInsufficientFunds.Code, "debit_account_id",
			fmt.Sprintf("account %q has a balance of %d, less than %d", deb.ID, deb.CreditsPosted-deb.DebitsPosted, row.Amount))
	}
	if cred.CreditsMustNotExceedDebits && credits > cred.DebitsPosted {
		return nil, newError(ErrInsufficientFunds.Code, "credit_account_id",
			fmt.Sprintf("account %q may not have credits above its debits (%d + %d > %d)", cred.ID, cred.CreditsPosted, row.Amount, cred.DebitsPosted))
	}
	deb.DebitsPosted, deb.Sequence = debits, deb.Sequence+1
	cred.CreditsPosted, cred.Sequence = credits, cred.Sequence+1
	return &plan{w: driver.LedgerTransferWriteParams{
		Transfer: *row,
		Debit: driver.LedgerEntry{Tenant: row.Tenant, AccountID: deb.ID, Sequence: deb.Sequence, TransferID: row.ID,
			Amount: row.Amount, DebitsPosted: deb.DebitsPosted, CreditsPosted: deb.CreditsPosted},
		Credit: driver.LedgerEntry{Tenant: row.Tenant, AccountID: cred.ID, Sequence: cred.Sequence, TransferID: row.ID,
			Amount: row.Amount, Credit: true, DebitsPosted: cred.DebitsPosted, CreditsPosted: cred.CreditsPosted},
		ReversesAmount: reversesAmount,
	}}, nil
}

// write stores a planned transfer. Its time may not precede either
// account's newest entry, so each account's entries stay in time order.
func (l *Ledger) write(ctx context.Context, tx driver.Tx, st *state, p *plan) error {
	deb, cred := st.accounts[p.w.Transfer.DebitAccountID], st.accounts[p.w.Transfer.CreditAccountID]
	p.w.NotBefore = deb.LastEntryAt
	if cred.LastEntryAt.After(p.w.NotBefore) {
		p.w.NotBefore = cred.LastEntryAt
	}
	p.w.Now = l.now()
	at, err := l.d.LedgerTransferWrite(ctx, tx, &p.w)
	if err != nil {
		return fmt.Errorf("ledger: write transfer %q: %w", p.w.Transfer.ID, err)
	}
	deb.LastEntryAt, cred.LastEntryAt = at, at
	p.w.Transfer.CreatedAt = at
	return nil
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
	if err := checkTenant(tenant); err != nil {
		return Transfer{}, err
	}
	if err := checkID("transfer_id", r.TransferID); err != nil {
		return Transfer{}, err
	}
	chosen := r.ID != ""
	if !chosen {
		r.ID = l.cfg.NewID()
	}
	if err := checkID("id", r.ID); err != nil {
		return Transfer{}, err
	}
	if r.Amount < 0 {
		return Transfer{}, newError(ErrInvalidAmount.Code, "amount", fmt.Sprintf("amount %d is negative", r.Amount))
	}
	if err := checkReason(r.Reason); err != nil {
		return Transfer{}, err
	}
	meta, err := canonicalMetadata(r.Metadata)
	if err != nil {
		return Transfer{}, err
	}

	// The original is immutable, so it can be read before any lock.
	found, err := l.d.LedgerTransfersGet(ctx, tx, &driver.LedgerTransfersGetParams{Tenant: tenant, IDs: []string{r.TransferID}})
	if err != nil {
		return Transfer{}, fmt.Errorf("ledger: read transfer %q: %w", r.TransferID, err)
	}
	if len(found) == 0 {
		return Transfer{}, newError(ErrTransferNotFound.Code, "transfer_id", fmt.Sprintf("transfer %q not found", r.TransferID))
	}
	orig := found[0]
	if orig.ReversesID != "" {
		return Transfer{}, newError(ErrCannotReverseReversal.Code, "transfer_id",
			fmt.Sprintf("transfer %q is a reversal of %q and cannot be reversed", orig.ID, orig.ReversesID))
	}

	var ids []string
	if chosen {
		ids = []string{r.ID}
	}
	accountIDs := []string{orig.DebitAccountID, orig.CreditAccountID}
	slices.Sort(accountIDs)
	st, err := l.lock(ctx, tx, tenant, ids, accountIDs)
	if err != nil {
		return Transfer{}, err
	}
	if chosen {
		found, err := l.d.LedgerTransfersGet(ctx, tx, &driver.LedgerTransfersGetParams{Tenant: tenant, IDs: ids})
		if err != nil {
			return Transfer{}, fmt.Errorf("ledger: read transfer %q: %w", r.ID, err)
		}
		if len(found) > 0 {
			old := &found[0]
			req := driver.LedgerTransfer{ID: r.ID, DebitAccountID: orig.CreditAccountID, CreditAccountID: orig.DebitAccountID,
				Amount: r.Amount, Currency: orig.Currency, Metadata: meta, ReversesID: orig.ID, Reason: r.Reason}
			if r.Amount == 0 {
				req.Amount = old.Amount // "all that remained" is what it was then
			}
			if err := sameTransfer(old, &req); err != nil {
				return Transfer{}, err
			}
			t := transferFromRow(old)
			t.Existing = true
			return t, nil
		}
	}

	// Every reversal of this transfer holds its accounts' locks while it
	// reads and adds to the total, so this read is current.
	reversed, err := l.d.LedgerReversedTotal(ctx, tx, &driver.LedgerReversedTotalParams{Tenant: tenant, TransferID: orig.ID})
	if err != nil {
		return Transfer{}, fmt.Errorf("ledger: read reversed total of %q: %w", orig.ID, err)
	}
	remaining := orig.Amount - reversed
	amount := r.Amount
	if amount == 0 {
		amount = remaining
	}
	if remaining <= 0 || amount > remaining {
		return Transfer{}, newError(ErrReversalExceedsRemaining.Code, "amount",
			fmt.Sprintf("transfer %q has %d of %d left to reverse, asked for %d", orig.ID, remaining, orig.Amount, amount))
	}
	row := driver.LedgerTransfer{
		Tenant:          tenant,
		ID:              r.ID,
		DebitAccountID:  orig.CreditAccountID,
		CreditAccountID: orig.DebitAccountID,
		Amount:          amount,
		Currency:        orig.Currency,
		Metadata:        meta,
		ReversesID:      orig.ID,
		Reason:          r.Reason,
	}
	p, err := st.plan(&row, orig.Amount)
	if err != nil {
		return Transfer{}, err
	}
	if err := l.write(ctx, tx, st, p); err != nil {
		return Transfer{}, err
	}
	return transferFromRow(&p.w.Transfer), nil
}
