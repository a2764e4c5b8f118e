package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"sync"

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
)

// The verifier reads what it can by listing, a thousand rows to a request:
// every run account's entries pages and the tenant's events pages hold what
// one GET per transfer would answer. The listings settle the two expected
// cases: an applied transfer is confirmed when both of its entries are
// listed with the acknowledged amount and exactly one event carries the
// acknowledged body; a refused or unresolved one is absent when no entry
// and no event names it (a transfer always has an entry on each of its two
// accounts, both accounts of the run). Anything else (missing, listed
// twice, differing, a refused one listed) is decided by GET
// /v1/transfers/{id} as if there were no listing, so a listing saves
// requests and never decides a violation on its own. The event is written
// in the transaction that stores the transfer, from the same value, so it
// stands for the row in the fields entries do not show (created_at,
// currency, metadata); a GET also lists a transfer's reversals, which the
// verifier gathers from its reversals' own events instead.

// Limits of the listings.
const (
	maxEntryPages = 100_000
	entriesPage   = 1000
)

// listing is what one read of the listings found.
type listing struct {
	// accounts holds each run account's GET answer and entries.
	accounts map[string]*accountRead
	// postings holds, by transfer id, the entries of the run's accounts
	// that name it.
	postings map[string][]posting
	// events is nil when the service lists none and the events are not
	// checked (--check-events=false): nothing is confirmed then.
	events *eventList
	// byKey holds the listed events by type and payload id.
	byKey map[string][]event
}

// accountRead is one account's GET answer and entries pages.
type accountRead struct {
	status  int
	body    []byte
	entries []entry // newest first
	// bad: a page did not decode (reported as entries_page); its entries
	// are not checked.
	bad bool
}

// posting is one entry as the listing shows it.
type posting struct {
	account, direction string
	amount             int64
}

// listingEstimate is about how many rows a read lists: two entries per
// applied transfer or reversal and an event per applied operation. Events
// of earlier runs come on top; it only scales the progress report.
func (v *verifier) listingEstimate() int {
	n := 0
	for _, o := range v.j.Ops {
		switch {
		case !o.Applied():
		case o.Kind == run.KindTransfer || o.Kind == run.KindReversal:
			n += 3
		default:
			n++
		}
	}
	return n
}

// read lists every run account (its GET and its entries pages) and the
// tenant's events, the accounts in parallel and the events beside them.
// An unreadable listing is an error, except the events' when they are not
// checked: then the listing confirms nothing.
func (v *verifier) read(ctx context.Context) (*listing, error) {
	l := &listing{accounts: map[string]*accountRead{}, postings: map[string][]posting{}, byKey: map[string][]event{}}
	if v.evs == nil {
		v.evs = &eventList{}
	}
	var (
		wg    sync.WaitGroup
		evErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		evErr = v.listEvents(ctx, v.evs, len(v.evs.pages)-1)
	}()
	var accts []*run.Op
	for _, o := range v.j.Ops {
		if o.Kind == run.KindAccount {
			accts = append(accts, o)
		}
	}
	err := v.parallel(ctx, accts, func(ctx context.Context, o *run.Op) error {
		a, err := v.readAccount(ctx, o)
		if err != nil {
			return err
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		l.accounts[o.ID] = a
		return nil
	})
	wg.Wait()
	if err != nil {
		return nil, err
	}
	switch {
	case evErr == nil:
		l.events = v.evs
	case v.cfg.CheckEvents:
		return nil, evErr
	default:
		v.evs = nil // read again from the start next time
	}
	for id, a := range l.accounts {
		for _, en := range a.entries {
			l.postings[en.TransferID] = append(l.postings[en.TransferID], posting{account: id, direction: en.Direction, amount: en.Amount})
		}
	}
	if l.events != nil {
		for _, ev := range l.events.all {
			k := ev.Type + " " + PayloadID(ev.Payload)
			l.byKey[k] = append(l.byKey[k], ev)
		}
	}
	return l, nil
}

// readAccount reads an account and, when it exists, every page of its
// entries.
func (v *verifier) readAccount(ctx context.Context, o *run.Op) (*accountRead, error) {
	status, body, err := v.cl.Get(ctx, "/v1/accounts/"+url.PathEscape(o.ID))
	if err != nil {
		return nil, err
	}
	a := &accountRead{status: status, body: body}
	switch status {
	case 200:
	case 404:
		return a, nil
	default:
		return nil, fmt.Errorf("load: GET account %s: %d %s", o.ID, status, run.Truncate(body))
	}
	v.st.Listed.Add(1)
	after := ""
	for page := 0; ; page++ {
		if page == maxEntryPages {
			return nil, fmt.Errorf("load: account %s has more than %d entries pages", o.ID, maxEntryPages)
		}
		path := fmt.Sprintf("/v1/accounts/%s/entries?limit=%d", url.PathEscape(o.ID), entriesPage)
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		status, body, err := v.cl.Get(ctx, path)
		if err != nil {
			return nil, err
		}
		if status != 200 {
			return nil, fmt.Errorf("load: GET %s: %d %s", path, status, run.Truncate(body))
		}
		var p struct {
			Data       []entry `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			v.violate("entries_page", o, "entries page: %v", err)
			a.bad = true
			return a, nil
		}
		a.entries = append(a.entries, p.Data...)
		v.st.Listed.Add(int64(len(p.Data)))
		if p.NextCursor == nil || len(p.Data) == 0 {
			return a, nil
		}
		after = *p.NextCursor
	}
}

// confirm returns o's acknowledged answer, decoded, when the listing shows
// o applied as acknowledged: one entry on its debit account and one on its
// credit account, each of the acknowledged amount, and exactly one event
// of its type and id whose payload is the acknowledged body. It returns
// nil otherwise, and for any operation not acknowledged with 2xx: those
// are looked up one by one.
func (l *listing) confirm(o *run.Op) map[string]any {
	if l.events == nil || !o.Applied() || (o.Kind != run.KindTransfer && o.Kind != run.KindReversal) {
		return nil
	}
	ps := l.postings[o.ID]
	if len(ps) != 2 {
		return nil
	}
	want := map[posting]bool{{o.Debit, "debit", o.Amount}: true, {o.Credit, "credit", o.Amount}: true}
	if !want[ps[0]] || !want[ps[1]] || ps[0] == ps[1] {
		return nil
	}
	evs := l.byKey[opEventType(o)+" "+o.ID]
	if len(evs) != 1 {
		return nil
	}
	got, err1 := decodeObject(evs[0].Payload)
	ack, err2 := decodeObject([]byte(o.Answer))
	if err1 != nil || err2 != nil || !reflect.DeepEqual(withoutReversals(got), withoutReversals(ack)) {
		return nil
	}
	return ack
}

// absent reports whether the listing shows that o, a transfer or reversal
// not acknowledged with 2xx, was not applied: no entry of the run's
// accounts and no event names it.
func (l *listing) absent(o *run.Op) bool {
	if l.events == nil || o.Applied() || (o.Kind != run.KindTransfer && o.Kind != run.KindReversal) {
		return false
	}
	return len(l.postings[o.ID]) == 0 && len(l.byKey[opEventType(o)+" "+o.ID]) == 0
}
