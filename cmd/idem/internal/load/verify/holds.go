package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
	"github.com/idemhq/idem/idemclient"
)

// The holds mix is checked against the ledger as the service lists it
// (GET /v1/transfers?account_id=, every run account), read once every hold
// is due: each hold settled at most once (one post, void or expiry names
// it), none still pending past its timeout plus the expiry worker's period,
// every answer borne out (an acknowledged settlement is the one there, a
// refusal names what did settle the hold), and each account's pending
// totals the sum of its open holds. What the holds and settlements moved
// then feeds the balance, entry and event checks the other kinds have.

// Limits of the transfers listing.
const (
	maxTransferPages = 100_000
	transfersPage    = 1000
)

// ledgerTransfer is a transfer as GET /v1/transfers lists it, read with
// the Go client's type.
type ledgerTransfer = idemclient.Transfer

// effect is what a hold or settlement moved on each of its two accounts:
// to the posted total, and to the pending one (negative for a
// settlement).
type effect struct {
	debit, credit   string
	posted, pending int64
}

// hasHolds reports whether the journal holds the holds mix.
func (v *verifier) hasHolds() bool {
	for _, o := range v.j.Ops {
		if o.Kind == run.KindHold {
			return true
		}
	}
	return false
}

// awaitHolds reads the run's holds and settlements from the ledger until
// no pending hold can still be released in time: it sleeps until the
// latest due hold's timeout plus the worker's period and grace has passed
// (at most HoldTimeout plus those from now, the last hold having been
// made before now), then reads again. It returns the last read.
func (v *verifier) awaitHolds(ctx context.Context) (map[string]ledgerTransfer, error) {
	allow := v.cfg.HoldExpiryPeriod + v.cfg.HoldGrace
	bound := time.Now().Add(v.cfg.HoldTimeout + allow)
	for {
		ts, err := v.readTransfers(ctx)
		if err != nil {
			return nil, err
		}
		var last time.Time
		for _, t := range ts {
			if t.Pending && t.State == "pending" && t.ExpiresAt != nil && t.ExpiresAt.Add(allow).After(last) {
				last = t.ExpiresAt.Add(allow)
			}
		}
		wait := time.Until(last)
		if rest := time.Until(bound); wait > rest {
			wait = rest
		}
		if wait <= 0 {
			return ts, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait + 100*time.Millisecond):
		}
	}
}

// readTransfers lists the transfers of every run account, in parallel,
// and keeps the run's holds and the settlements of them.
func (v *verifier) readTransfers(ctx context.Context) (map[string]ledgerTransfer, error) {
	holds := map[string]bool{}
	var accts []*run.Op
	for _, o := range v.j.Ops {
		switch o.Kind {
		case run.KindHold:
			holds[o.ID] = true
		case run.KindAccount:
			accts = append(accts, o)
		}
	}
	out := map[string]ledgerTransfer{}
	err := v.parallel(ctx, accts, func(ctx context.Context, o *run.Op) error {
		after := ""
		for page := 0; ; page++ {
			if page == maxTransferPages {
				return fmt.Errorf("load: account %s has more than %d transfers pages", o.ID, maxTransferPages)
			}
			path := fmt.Sprintf("/v1/transfers?account_id=%s&limit=%d", url.QueryEscape(o.ID), transfersPage)
			if after != "" {
				path += "&after=" + url.QueryEscape(after)
			}
			status, body, err := v.cl.Get(ctx, path)
			if err != nil {
				return err
			}
			if status == 404 {
				return nil // an account that does not exist lists nothing
			}
			if status != 200 {
				return fmt.Errorf("load: GET %s: %d %s", path, status, run.Truncate(body))
			}
			var p struct {
				Data       []ledgerTransfer `json:"data"`
				NextCursor *string          `json:"next_cursor"`
			}
			if err := json.Unmarshal(body, &p); err != nil {
				return fmt.Errorf("load: GET %s: %w", path, err)
			}
			v.mu.Lock()
			for _, t := range p.Data {
				if holds[t.ID] || holds[t.PendingID] {
					out[t.ID] = t
				}
			}
			v.mu.Unlock()
			v.st.Listed.Add(int64(len(p.Data)))
			if p.NextCursor == nil || len(p.Data) == 0 {
				return nil
			}
			after = *p.NextCursor
		}
	})
	return out, err
}

// checkHolds checks the journal's holds, posts and voids against the
// ledger's transfers ts (the run's holds and their settlements) as read
// at now, returns the figures of Report.Holds, and records what they moved for the account and entry checks
// (v.effects), which of them exist (v.applied), the expiries the ledger
// wrote (v.expiries, whose events the events check expects) and each
// account's open holds (v.open).
func (v *verifier) checkHolds(ts map[string]ledgerTransfer, now time.Time) map[string]int {
	figures := map[string]int{}
	allow := v.cfg.HoldExpiryPeriod + v.cfg.HoldGrace
	settlementsOf := map[string][]ledgerTransfer{}
	for _, t := range ts {
		if t.PendingID != "" {
			settlementsOf[t.PendingID] = append(settlementsOf[t.PendingID], t)
		}
	}
	// The first settlement recorded is the one that counts; any other is
	// a violation.
	for _, ss := range settlementsOf {
		slices.SortFunc(ss, func(a, b ledgerTransfer) int {
			return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
		})
	}
	byID := map[string]*run.Op{}
	ackedOf := map[string][]*run.Op{} // hold id → settlements acknowledged with 2xx
	for _, o := range v.j.Ops {
		byID[o.ID] = o
		if (o.Kind == run.KindPost || o.Kind == run.KindVoid) && o.Applied() {
			ackedOf[o.Holds] = append(ackedOf[o.Holds], o)
		}
	}
	kinds := map[string]map[run.Kind]bool{}
	for _, o := range v.j.Ops {
		if o.Kind == run.KindPost || o.Kind == run.KindVoid {
			if kinds[o.Holds] == nil {
				kinds[o.Holds] = map[run.Kind]bool{}
			}
			kinds[o.Holds][o.Kind] = true
		}
	}
	for _, k := range kinds {
		if len(k) == 2 {
			figures["raced"]++
		}
	}
	for _, o := range v.j.Ops {
		switch o.Kind {
		case run.KindHold:
			v.st.Checked.Add(1)
			h, exists := ts[o.ID]
			if !v.exists(o, exists) {
				continue
			}
			figures[h.State]++
			v.checkHold(o, h, settlementsOf[o.ID], ackedOf[o.ID], now, allow)
		case run.KindPost, run.KindVoid:
			v.st.Checked.Add(1)
			s, exists := ts[o.ID]
			if code := problemCode(o.Answer); o.Acknowledged() && !o.Applied() && !exists {
				v.checkRefusal(o, code, ts[o.Holds])
			}
			if !v.exists(o, exists) {
				continue
			}
			h := ts[o.Holds]
			want := h.Amount
			if o.Kind == run.KindPost && o.Amount > 0 {
				want = o.Amount
			}
			if s.PendingID != o.Holds || s.Settles != string(o.Kind) || s.Amount != want ||
				s.DebitAccountID != o.Debit || s.CreditAccountID != o.Credit {
				v.violate("answer_mismatch", o, "the ledger holds %s of hold %q, %d from %s to %s; the request asked a %s of %q (%d) from %s to %s",
					s.Settles, s.PendingID, s.Amount, s.DebitAccountID, s.CreditAccountID, o.Kind, o.Holds, want, o.Debit, o.Credit)
			}
			if o.Applied() {
				v.checkSettlementAnswer(o, s)
			}
		}
	}
	// A settlement the run did not ask for: only the worker's expiries.
	for _, t := range ts {
		switch {
		case t.PendingID == "":
		case t.Settles == "expire":
			v.expiries = append(v.expiries, &run.Op{Kind: run.KindExpiry, ID: t.ID, Holds: t.PendingID,
				Debit: t.DebitAccountID, Credit: t.CreditAccountID, Currency: t.Currency, Amount: t.Amount})
			v.effects[t.ID] = effect{debit: t.DebitAccountID, credit: t.CreditAccountID, pending: -ts[t.PendingID].Amount}
		case byID[t.ID] == nil:
			v.violate("settlement_unexpected", byID[t.PendingID], "transfer %s %ss hold %s, and no operation of the run asked it",
				t.ID, t.Settles, t.PendingID)
		}
	}
	for _, t := range ts {
		if t.Pending && t.State == "pending" {
			v.open[t.DebitAccountID] = v.open[t.DebitAccountID].add(t.Amount, 0)
			v.open[t.CreditAccountID] = v.open[t.CreditAccountID].add(0, t.Amount)
		}
	}
	return figures
}

// exists checks an operation's acknowledgement against whether the ledger
// holds its transfer, marks it applied when it does, and reports whether
// it does.
func (v *verifier) exists(o *run.Op, exists bool) bool {
	switch {
	case o.Applied() && !exists:
		v.violate("acknowledged_lost", o, "acknowledged with %d but the ledger lists no %s %s", o.Status, o.Kind, o.ID)
	case o.Acknowledged() && !o.Applied() && exists:
		v.violate("refused_applied", o, "refused with %d %s but the ledger lists %s", o.Status, run.Truncate([]byte(o.Answer)), o.ID)
	}
	if exists {
		v.mu.Lock()
		v.applied[o] = true
		v.mu.Unlock()
	}
	return exists
}

// checkHold checks one hold that exists: the fields asked, settled at most
// once and as its status says, never pending past its timeout plus allow,
// expired neither early nor late; and records its effect.
func (v *verifier) checkHold(o *run.Op, h ledgerTransfer, settlements []ledgerTransfer, acked []*run.Op, now time.Time, allow time.Duration) {
	if !h.Pending || h.DebitAccountID != o.Debit || h.CreditAccountID != o.Credit || h.Amount != o.Amount ||
		h.Currency != o.Currency || h.TimeoutSeconds != o.TimeoutSeconds || h.ExpiresAt == nil {
		v.violate("answer_mismatch", o, "the ledger holds %+v; the request asked a hold of %d %s from %s to %s for %ds",
			h, o.Amount, o.Currency, o.Debit, o.Credit, o.TimeoutSeconds)
	}
	if o.Applied() {
		v.checkSettlementAnswer(o, h)
	}
	v.effects[o.ID] = effect{debit: h.DebitAccountID, credit: h.CreditAccountID, pending: h.Amount}
	if len(settlements) > 1 {
		ids := make([]string, len(settlements))
		for i, s := range settlements {
			ids[i] = s.ID + " (" + s.Settles + ")"
		}
		v.violate("hold_settled_twice", o, "hold settled %d times: %v", len(settlements), ids)
	}
	if len(acked) > 1 {
		ids := make([]string, len(acked))
		for i, s := range acked {
			ids[i] = s.ID + " (" + string(s.Kind) + ")"
		}
		v.violate("hold_settled_twice", o, "%d settlements of the hold acknowledged with 2xx: %v", len(acked), ids)
	}
	var s *ledgerTransfer
	if len(settlements) > 0 {
		s = &settlements[0]
	}
	switch {
	case s == nil && h.State != "pending":
		v.violate("hold_status", o, "status %q, and no settlement names it", h.State)
	case s != nil && (h.State != settledStatus[s.Settles] || h.SettledBy != s.ID):
		v.violate("hold_status", o, "status %q settled by %q; the ledger holds %s %s of it", h.State, h.SettledBy, s.Settles, s.ID)
	}
	if h.ExpiresAt == nil {
		return
	}
	due := h.ExpiresAt.Add(allow)
	switch {
	case s == nil && now.After(due):
		v.violate("hold_stuck", o, "still pending at %s, %s after it expired at %s (allowed: the worker's period and grace, %s)",
			now.UTC().Format(time.RFC3339Nano), now.Sub(*h.ExpiresAt).Round(time.Millisecond), h.ExpiresAt.UTC().Format(time.RFC3339Nano), allow)
	case s == nil:
	case s.Settles == "expire" && s.CreatedAt.Before(*h.ExpiresAt):
		v.violate("hold_expired_early", o, "expired by %s at %s, before its expires_at %s", s.ID, s.CreatedAt.Format(time.RFC3339Nano), h.ExpiresAt.Format(time.RFC3339Nano))
	case s.Settles == "expire" && s.CreatedAt.After(due):
		v.violate("hold_stuck", o, "expired by %s at %s, %s after its expires_at %s (allowed: %s)", s.ID, s.CreatedAt.Format(time.RFC3339Nano),
			s.CreatedAt.Sub(*h.ExpiresAt).Round(time.Millisecond), h.ExpiresAt.Format(time.RFC3339Nano), allow)
	case s.Settles != "expire" && s.CreatedAt.After(*h.ExpiresAt):
		v.violate("settled_after_expiry", o, "%s by %s at %s, after it expired at %s", s.Settles, s.ID, s.CreatedAt.Format(time.RFC3339Nano), h.ExpiresAt.Format(time.RFC3339Nano))
	}
	for _, s := range settlements {
		e := effect{debit: s.DebitAccountID, credit: s.CreditAccountID, pending: -h.Amount}
		if s.Settles == "post" {
			e.posted = s.Amount
		}
		v.effects[s.ID] = e
	}
}

// settledStatus is the status each settlement gives its hold.
var settledStatus = map[string]string{"post": "posted", "void": "voided", "expire": "expired"}

// checkRefusal checks a refused settlement against its hold: a refusal
// that the hold was posted, voided or expired already must name what
// settled it.
func (v *verifier) checkRefusal(o *run.Op, code string, h ledgerTransfer) {
	want := map[string]string{"pending_transfer_already_posted": "posted", "pending_transfer_already_voided": "voided",
		"pending_transfer_already_expired": "expired"}[code]
	if want != "" && h.State != want {
		v.violate("refusal_differs", o, "refused %s, but hold %s is %s (settled by %q)", code, o.Holds, h.State, h.SettledBy)
	}
}

// checkSettlementAnswer checks an acknowledged hold or settlement's answer
// names the transfer the ledger holds.
func (v *verifier) checkSettlementAnswer(o *run.Op, t ledgerTransfer) {
	var a ledgerTransfer
	if err := json.Unmarshal([]byte(o.Answer), &a); err != nil {
		v.violate("answer_mismatch", o, "acknowledged body is not a transfer: %v", err)
		return
	}
	if a.ID != t.ID || a.Amount != t.Amount || a.PendingID != t.PendingID || a.Settles != t.Settles ||
		a.Pending != t.Pending || !a.CreatedAt.Equal(t.CreatedAt) {
		v.violate("answer_mismatch", o, "acknowledged %s; the ledger lists %+v", run.Truncate([]byte(o.Answer)), t)
	}
}

// pendingTotals are an account's pending totals.
type pendingTotals struct{ debits, credits int64 }

func (p pendingTotals) add(d, c int64) pendingTotals {
	return pendingTotals{p.debits + d, p.credits + c}
}

// problemCode is the code member of a problem+json body ("" if none).
func problemCode(body string) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal([]byte(body), &p)
	return p.Code
}
