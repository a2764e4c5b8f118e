package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"

	"github.com/idemhq/idem/driver"
)

// maxViolations bounds the violations one VerifyError lists: past a few, more
// of the same kind say nothing new and could be millions.
const maxViolations = 50

// VerifyError lists the invariants Verify found broken.
type VerifyError struct {
	Violations []string
	// More counts violations found beyond those listed.
	More int
}

func (e *VerifyError) Error() string {
	s := fmt.Sprintf("ledger: verify: %d violation(s): %s", len(e.Violations)+e.More, strings.Join(e.Violations, "; "))
	if e.More > 0 {
		s += fmt.Sprintf("; and %d more", e.More)
	}
	return s
}

// Verify recomputes the whole ledger from its entries, in tx, and reports
// every broken invariant: each account's entries are numbered 1, 2, … with
// no gap, in time order, and each one's running totals follow from the one
// before; each account's cached totals equal its newest entry's; each
// transfer has exactly two entries, a debit on its debit account and a
// credit on its credit account, of its amount, currency and time; each
// currency's balances sum to zero; every entry belongs to a transfer;
// reversals never exceed their original, are never themselves reversed,
// and match the stored reversed totals; every settlement settles a hold on
// the same accounts, one per hold, within its amount; each account's
// pending totals equal the sums of its open holds (those not settled), and
// the stored open holds are exactly those. It
// reads every row once, in streams, holding only the accounts and the
// reversed totals in memory. A nil error means the ledger is sound.
func Verify(ctx context.Context, d driver.Driver, tx driver.Tx) error {
	if err := driver.CheckTx(d, tx); err != nil {
		return fmt.Errorf("ledger: verify: %w", err)
	}
	v := &verifier{accounts: map[key]*acctCheck{}, reversed: map[key]int64{}, isReversal: map[key]bool{},
		transferAmount: map[key]int64{}, holds: map[key]*driver.LedgerTransfer{}, storedHolds: map[key]driver.LedgerHold{}}
	if err := d.LedgerScan(ctx, tx, &driver.LedgerScanParams{
		Accounts:       v.account,
		Entries:        v.entry,
		Transfers:      v.transfer,
		ReversedTotals: v.reversedTotal,
		Holds:          v.storedHold,
	}); err != nil {
		return fmt.Errorf("ledger: verify: %w", err)
	}
	v.finish()
	if len(v.violations) == 0 {
		return nil
	}
	return &VerifyError{Violations: v.violations, More: v.more}
}

type key struct{ tenant, id string }

type acctCheck struct {
	row  driver.LedgerAccount
	last *driver.LedgerEntry // the newest entry seen so far
}

type verifier struct {
	accounts   map[key]*acctCheck
	violations []string
	more       int
	// Reversal bookkeeping, by original: the sum of its reversals, its
	// amount, and which transfers are reversals.
	reversed       map[key]int64
	transferAmount map[key]int64
	isReversal     map[key]bool
	storedTotals   []storedTotal
	// Entries seen in the accounts' pass, and those handed over with
	// their transfer: the difference is the entries whose transfer does
	// not exist, which no foreign key refuses on Postgres (migration 7).
	entries, owned int64
	// Holds bookkeeping: every hold by its key, every settlement, and the
	// open holds stored.
	holds       map[key]*driver.LedgerTransfer
	settlements []settlementCheck
	storedHolds map[key]driver.LedgerHold
}

// settlementCheck is a settlement and the pending change its entries
// made, checked against its hold once every transfer is read.
type settlementCheck struct {
	t      driver.LedgerTransfer
	change int64
}

type storedTotal struct {
	k        key
	reversed int64
}

func (v *verifier) fail(format string, args ...any) {
	if len(v.violations) >= maxViolations {
		v.more++
		return
	}
	v.violations = append(v.violations, fmt.Sprintf(format, args...))
}

func (v *verifier) account(a *driver.LedgerAccount) error {
	v.accounts[key{a.Tenant, a.ID}] = &acctCheck{row: *a}
	return nil
}

func (v *verifier) entry(e *driver.LedgerEntry) error {
	v.entries++
	a := v.accounts[key{e.Tenant, e.AccountID}]
	if a == nil {
		v.fail("entry %s/%s#%d: no such account", e.Tenant, e.AccountID, e.Sequence)
		return nil
	}
	var prevSeq, prevD, prevC, prevDP, prevCP int64
	if a.last != nil {
		prevSeq, prevD, prevC = a.last.Sequence, a.last.DebitsPosted, a.last.CreditsPosted
		prevDP, prevCP = a.last.DebitsPending, a.last.CreditsPending
		if e.CreatedAt.Before(a.last.CreatedAt) {
			v.fail("entry %s/%s#%d: recorded at %s, before entry #%d at %s", e.Tenant, e.AccountID, e.Sequence,
				e.CreatedAt, prevSeq, a.last.CreatedAt)
		}
	}
	if e.Sequence != prevSeq+1 {
		v.fail("entry %s/%s#%d: follows #%d (sequences must run 1, 2, … without gaps)", e.Tenant, e.AccountID, e.Sequence, prevSeq)
	}
	if e.Amount <= 0 {
		v.fail("entry %s/%s#%d: amount %d is not positive", e.Tenant, e.AccountID, e.Sequence, e.Amount)
	}
	posted := e.Amount
	if e.PendingOnly {
		posted = 0
	}
	wantD, wantC, wantDP, wantCP := prevD, prevC, prevDP, prevCP
	if e.Credit {
		wantC += posted
		wantCP += e.PendingChange
	} else {
		wantD += posted
		wantDP += e.PendingChange
	}
	if e.DebitsPosted != wantD || e.CreditsPosted != wantC {
		v.fail("entry %s/%s#%d: running totals debits %d credits %d, recomputed %d and %d", e.Tenant, e.AccountID,
			e.Sequence, e.DebitsPosted, e.CreditsPosted, wantD, wantC)
	}
	if e.DebitsPending != wantDP || e.CreditsPending != wantCP || wantDP < 0 || wantCP < 0 {
		v.fail("entry %s/%s#%d: pending totals debits %d credits %d, recomputed %d and %d", e.Tenant, e.AccountID,
			e.Sequence, e.DebitsPending, e.CreditsPending, wantDP, wantCP)
	}
	last := *e
	a.last = &last
	return nil
}

func (v *verifier) transfer(t *driver.LedgerTransfer, entries []driver.LedgerEntry) error {
	k := key{t.Tenant, t.ID}
	v.owned += int64(len(entries))
	v.transferAmount[k] = t.Amount
	if t.Amount <= 0 {
		v.fail("transfer %s/%s: amount %d is not positive", t.Tenant, t.ID, t.Amount)
	}
	if len(entries) != 2 {
		v.fail("transfer %s/%s: %d entries, want 2", t.Tenant, t.ID, len(entries))
	}
	var sum big.Int
	var debits, credits int
	for _, e := range entries {
		amt := big.NewInt(e.Amount)
		want := t.DebitAccountID
		if e.Credit {
			credits++
			want = t.CreditAccountID
			sum.Add(&sum, amt)
		} else {
			debits++
			sum.Sub(&sum, amt)
		}
		if e.AccountID != want {
			v.fail("transfer %s/%s: entry on %s, want %s", t.Tenant, t.ID, e.AccountID, want)
		}
		if e.Amount != t.Amount {
			v.fail("transfer %s/%s: entry of %d on %s, want %d", t.Tenant, t.ID, e.Amount, e.AccountID, t.Amount)
		}
		if !e.CreatedAt.Equal(t.CreatedAt) {
			v.fail("transfer %s/%s: entry on %s recorded at %s, transfer at %s", t.Tenant, t.ID, e.AccountID, e.CreatedAt, t.CreatedAt)
		}
		if a := v.accounts[key{t.Tenant, e.AccountID}]; a != nil && a.row.Currency != t.Currency {
			v.fail("transfer %s/%s: in %s, account %s holds %s", t.Tenant, t.ID, t.Currency, e.AccountID, a.row.Currency)
		}
	}
	if debits != 1 || credits != 1 || sum.Sign() != 0 {
		v.fail("transfer %s/%s: %d debit(s) and %d credit(s) summing to %s, want one each summing to 0",
			t.Tenant, t.ID, debits, credits, sum.String())
	}
	v.transferKind(t, entries)
	if t.ReversesID != "" {
		v.isReversal[k] = true
		orig := key{t.Tenant, t.ReversesID}
		v.reversed[orig] += t.Amount
	}
	return nil
}

// transferKind checks that the entries move what the transfer's kind
// moves: a hold and its release only pending totals, a plain transfer only
// posted ones, a post both; and keeps holds and settlements for finish.
func (v *verifier) transferKind(t *driver.LedgerTransfer, entries []driver.LedgerEntry) {
	wantOnly, wantChange := false, int64(0)
	switch {
	case t.Pending:
		wantOnly, wantChange = true, t.Amount
		hold := *t
		v.holds[key{t.Tenant, t.ID}] = &hold
	case t.PendingID != "":
		wantOnly = t.Settles != string(SettlePost)
		var change int64
		if len(entries) > 0 {
			change = entries[0].PendingChange
		}
		wantChange = change // the held amount, checked against the hold in finish
		v.settlements = append(v.settlements, settlementCheck{t: *t, change: change})
	}
	for _, e := range entries {
		if e.PendingOnly != wantOnly || e.PendingChange != wantChange {
			v.fail("transfer %s/%s: entry on %s moves pending %d (pending only: %t), want %d (%t)",
				t.Tenant, t.ID, e.AccountID, e.PendingChange, e.PendingOnly, wantChange, wantOnly)
		}
	}
}

func (v *verifier) storedHold(h *driver.LedgerHold) error {
	v.storedHolds[key{h.Tenant, h.TransferID}] = *h
	return nil
}

func (v *verifier) reversedTotal(tenant, id string, n int64) error {
	v.storedTotals = append(v.storedTotals, storedTotal{key{tenant, id}, n})
	return nil
}

func (v *verifier) finish() {
	// Accounts: the cache equals the newest entry; balances per currency
	// sum to zero (in big integers: the sum of int64s may not fit one).
	sums := map[string]*big.Int{}
	keys := make([]key, 0, len(v.accounts))
	for k := range v.accounts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].id < keys[j].id
	})
	for _, k := range keys {
		a := v.accounts[k]
		var last driver.LedgerEntry
		if a.last != nil {
			last = *a.last
		}
		r := &a.row
		if r.DebitsPosted != last.DebitsPosted || r.CreditsPosted != last.CreditsPosted || r.Sequence != last.Sequence ||
			!r.LastEntryAt.Equal(last.CreatedAt) {
			v.fail("account %s/%s: cached debits %d credits %d sequence %d at %s; entries say %d, %d, %d at %s",
				k.tenant, k.id, r.DebitsPosted, r.CreditsPosted, r.Sequence, r.LastEntryAt,
				last.DebitsPosted, last.CreditsPosted, last.Sequence, last.CreatedAt)
		}
		if r.DebitsPending != last.DebitsPending || r.CreditsPending != last.CreditsPending {
			v.fail("account %s/%s: cached pending debits %d credits %d; entries say %d, %d",
				k.tenant, k.id, r.DebitsPending, r.CreditsPending, last.DebitsPending, last.CreditsPending)
		}
		if r.DebitsMustNotExceedCredits && last.DebitsPosted+last.DebitsPending > last.CreditsPosted {
			v.fail("account %s/%s: debits %d (+%d pending) exceed credits %d against its flag", k.tenant, k.id,
				last.DebitsPosted, last.DebitsPending, last.CreditsPosted)
		}
		if r.CreditsMustNotExceedDebits && last.CreditsPosted+last.CreditsPending > last.DebitsPosted {
			v.fail("account %s/%s: credits %d (+%d pending) exceed debits %d against its flag", k.tenant, k.id,
				last.CreditsPosted, last.CreditsPending, last.DebitsPosted)
		}
		s := sums[r.Currency]
		if s == nil {
			s = new(big.Int)
			sums[r.Currency] = s
		}
		s.Add(s, big.NewInt(last.CreditsPosted))
		s.Sub(s, big.NewInt(last.DebitsPosted))
	}
	currencies := make([]string, 0, len(sums))
	for c := range sums {
		currencies = append(currencies, c)
	}
	sort.Strings(currencies)
	for _, c := range currencies {
		if sums[c].Sign() != 0 {
			v.fail("currency %s: balances sum to %s, want 0", c, sums[c])
		}
	}

	v.finishHolds()

	if v.entries != v.owned {
		v.fail("entries: %d of %d belong to no transfer (their transfer_id names none of their tenant)",
			v.entries-v.owned, v.entries)
	}

	// Reversals: within their original, never of a reversal, and counted
	// by the stored totals exactly.
	stored := map[key]int64{}
	for _, st := range v.storedTotals {
		stored[st.k] = st.reversed
	}
	origs := make([]key, 0, len(v.reversed))
	for k := range v.reversed {
		origs = append(origs, k)
	}
	sort.Slice(origs, func(i, j int) bool { return origs[i].id < origs[j].id })
	for _, k := range origs {
		sum := v.reversed[k]
		if v.isReversal[k] {
			v.fail("transfer %s/%s: a reversal, yet reversed", k.tenant, k.id)
		}
		if amt, ok := v.transferAmount[k]; ok && sum > amt {
			v.fail("transfer %s/%s: reversed %d of %d", k.tenant, k.id, sum, amt)
		}
		if stored[k] != sum {
			v.fail("transfer %s/%s: stored reversed total %d, reversals sum to %d", k.tenant, k.id, stored[k], sum)
		}
		delete(stored, k)
	}
	for k, n := range stored {
		v.fail("transfer %s/%s: stored reversed total %d without reversals", k.tenant, k.id, n)
	}
}

// finishHolds checks every settlement against its hold, and the open
// holds against the stored ones and the accounts' pending totals.
func (v *verifier) finishHolds() {
	settledBy := map[key]string{}
	for _, s := range v.settlements {
		t := &s.t
		hk := key{t.Tenant, t.PendingID}
		hold := v.holds[hk]
		if hold == nil {
			v.fail("transfer %s/%s: settles %s, which is not a hold", t.Tenant, t.ID, t.PendingID)
			continue
		}
		if other, ok := settledBy[hk]; ok {
			v.fail("hold %s/%s: settled twice, by %s and %s", hk.tenant, hk.id, other, t.ID)
		}
		settledBy[hk] = t.ID
		if t.DebitAccountID != hold.DebitAccountID || t.CreditAccountID != hold.CreditAccountID || t.Currency != hold.Currency {
			v.fail("transfer %s/%s: settles hold %s on other accounts or currency", t.Tenant, t.ID, hold.ID)
		}
		if -s.change != hold.Amount {
			v.fail("transfer %s/%s: releases %d of hold %s, which holds %d", t.Tenant, t.ID, -s.change, hold.ID, hold.Amount)
		}
		if t.Amount > hold.Amount || t.Settles != string(SettlePost) && t.Amount != hold.Amount {
			v.fail("transfer %s/%s: %s of %d, hold %s holds %d", t.Tenant, t.ID, t.Settles, t.Amount, hold.ID, hold.Amount)
		}
	}
	// The open holds: each stored as it was written, and summed per
	// account into the pending totals.
	type pending struct{ debits, credits int64 }
	sums := map[key]*pending{}
	sum := func(k key) *pending {
		p := sums[k]
		if p == nil {
			p = &pending{}
			sums[k] = p
		}
		return p
	}
	keys := make([]key, 0, len(v.holds))
	for k := range v.holds {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].tenant < keys[j].tenant || keys[i].tenant == keys[j].tenant && keys[i].id < keys[j].id
	})
	for _, k := range keys {
		if _, settled := settledBy[k]; settled {
			if _, ok := v.storedHolds[k]; ok {
				v.fail("hold %s/%s: settled, yet stored as open", k.tenant, k.id)
			}
			continue
		}
		h := v.holds[k]
		sum(key{h.Tenant, h.DebitAccountID}).debits += h.Amount
		sum(key{h.Tenant, h.CreditAccountID}).credits += h.Amount
		st, ok := v.storedHolds[k]
		if !ok {
			v.fail("hold %s/%s: open, yet not stored as open", k.tenant, k.id)
			continue
		}
		if st.Amount != h.Amount || st.DebitAccountID != h.DebitAccountID || st.CreditAccountID != h.CreditAccountID ||
			!st.ExpiresAt.Equal(h.ExpiresAt) {
			v.fail("hold %s/%s: stored as open with %d from %s to %s expiring %s, transfer says %d from %s to %s expiring %s",
				k.tenant, k.id, st.Amount, st.DebitAccountID, st.CreditAccountID, st.ExpiresAt,
				h.Amount, h.DebitAccountID, h.CreditAccountID, h.ExpiresAt)
		}
	}
	for k := range v.storedHolds {
		if v.holds[k] == nil {
			v.fail("hold %s/%s: stored as open, but no such hold", k.tenant, k.id)
		}
	}
	for k, a := range v.accounts {
		var last driver.LedgerEntry
		if a.last != nil {
			last = *a.last
		}
		p := sums[k]
		if p == nil {
			p = &pending{}
		}
		if last.DebitsPending != p.debits || last.CreditsPending != p.credits {
			v.fail("account %s/%s: pending debits %d credits %d, its open holds sum to %d and %d",
				k.tenant, k.id, last.DebitsPending, last.CreditsPending, p.debits, p.credits)
		}
	}
}

// IsVerifyError reports whether err is a failed verification (as opposed
// to a database fault while verifying).
func IsVerifyError(err error) bool {
	var ve *VerifyError
	return errors.As(err, &ve)
}
