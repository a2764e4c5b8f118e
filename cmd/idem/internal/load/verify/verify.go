// Package verify checks, through the service's public API only, that every
// acknowledged operation of a load run's journal happened exactly once:
// probes replay a sample and expect the stored answer; transfers exist with
// the body that acknowledged them; balances and entry counts add up; the
// run's accounts sum to zero per currency; and, with events checked, every
// change left one event (and one message in the NATS stream). It depends on
// package run alone: Journal checks a journal written earlier, and the load
// generator calls Check at the end of a run.
package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
	"github.com/idemhq/idem/idemclient"
)

// verifier checks, through the API only, that a journal's acknowledged
// operations happened exactly once.
type verifier struct {
	cfg run.Config
	cl  *run.Client
	st  *run.Stats
	j   *run.Journal

	mu sync.Mutex
	// applied holds the operations whose effect must be in the ledger: the
	// ones acknowledged with 2xx and the unresolved ones found to exist.
	applied map[*run.Op]bool
	// reversalsOf maps a transfer id to the reversal ids the service lists.
	reversalsOf map[string][]string
	// balances holds each existing run account's currency and balance.
	balances map[string]accountState
	// lostCount and lostKeys count and name the acknowledged operations
	// found lost.
	lostCount int
	lostKeys  []string
	// evs is the tenant's events as listed so far.
	evs *eventList
	// effects holds, by transfer id, what each existing hold and
	// settlement of the run moved (checkHolds).
	effects map[string]effect
	// expiries stand for the expiries of the run's holds the ledger holds.
	expiries []*run.Op
	// open holds each account's open holds' totals, as the ledger lists them.
	open map[string]pendingTotals
}

type accountState struct {
	currency string
	balance  int64
}

// Check runs every check of the operations in j through cl and fills r's
// operation counts, reporting its progress to prog. Violations go to st;
// the error reports a verification that could not be completed (the
// service unreachable), never a violation.
func Check(ctx context.Context, cfg run.Config, cl *run.Client, st *run.Stats, prog *run.Progress, j *run.Journal, r *run.Report) error {
	v := &verifier{cfg: cfg, cl: cl, st: st, j: j, applied: map[*run.Op]bool{},
		reversalsOf: map[string][]string{}, balances: map[string]accountState{},
		effects: map[string]effect{}, open: map[string]pendingTotals{}}
	r.Operations = map[run.Kind]int{}
	for _, o := range j.Ops {
		r.Operations[o.Kind]++
		switch {
		case o.Applied():
			r.Acknowledged++
			r.Applied++
		case o.Acknowledged():
			r.Acknowledged++
			r.Refused++
		default:
			r.Unresolved++
		}
	}
	if cfg.ExpectLoss {
		prog.PhaseOf("listing", "rows", v.listingEstimate(), &st.Listed)
		l, err := v.read(ctx)
		if err != nil {
			return err
		}
		lost, err := v.lost(ctx, l)
		if err != nil {
			return err
		}
		r.Lost = len(lost)
		v.forget(lost)
	}
	// Probes first: a replay that wrongly does the work again shows up in
	// the listings and balances read after it.
	n, err := v.probe(ctx)
	r.Probes = n
	if err != nil {
		return err
	}
	// Holds first: the listings are read once every hold is due, so that
	// the ledger no longer changes under them.
	var holds map[string]ledgerTransfer
	if v.hasHolds() {
		prog.PhaseOf("holds", "rows", v.listingEstimate(), &st.Listed)
		if holds, err = v.awaitHolds(ctx); err != nil {
			return err
		}
	}
	prog.PhaseOf("listing", "rows", v.listingEstimate(), &st.Listed)
	l, err := v.read(ctx)
	if err != nil {
		return err
	}
	prog.PhaseOf("verify", "ops", len(v.j.Ops), &st.Checked)
	if holds != nil {
		r.Holds = v.checkHolds(holds, time.Now())
	}
	if err := v.transfers(ctx, l); err != nil {
		return err
	}
	v.reversals()
	v.accounts(l)
	v.zeroSum()
	if cfg.CheckEvents {
		n, w, err := v.events(ctx, l)
		r.EventsChecked, r.WebhookEvents = n, w
		if err != nil {
			return err
		}
	} else {
		st.Checked.Add(int64(r.Operations[run.KindWebhook]))
	}
	if !cfg.ExpectLoss {
		r.Lost = v.lostCount
	}
	r.LostKeys = v.lostKeys
	return nil
}

// lost finds the acknowledged accounts, transfers and reversals the
// service lost (ExpectLoss): missing, or there with another answer than
// the one acknowledged (a later copy did the work again). The accounts are
// read from l; a transfer the listings show as acknowledged is not lost,
// and every other one is looked up with a GET.
func (v *verifier) lost(ctx context.Context, l *listing) (map[*run.Op]bool, error) {
	lost := map[*run.Op]bool{}
	var ops []*run.Op
	for _, o := range v.j.Ops {
		switch {
		case !o.Applied() || o.Kind == run.KindWebhook:
		case o.Kind == run.KindAccount:
			if a := l.accounts[o.ID]; a == nil || v.redone(a.status, a.body, o) {
				lost[o] = true
			}
		case l.confirm(o) != nil:
		default:
			ops = append(ops, o)
		}
	}
	err := v.parallel(ctx, ops, func(ctx context.Context, o *run.Op) error {
		status, body, err := v.cl.Get(ctx, "/v1/transfers/"+url.PathEscape(o.ID))
		if err != nil {
			return err
		}
		if status != 200 && status != 404 {
			return fmt.Errorf("load: GET /v1/transfers/%s: %d %s", o.ID, status, run.Truncate(body))
		}
		if v.redone(status, body, o) {
			v.mu.Lock()
			lost[o] = true
			v.mu.Unlock()
		}
		return nil
	})
	return lost, err
}

// redone reports whether a GET's answer shows o lost: missing (404), or
// created at another time than the acknowledged answer says, which tells
// the first doing from a later one.
func (v *verifier) redone(status int, body []byte, o *run.Op) bool {
	if status == 404 {
		return true
	}
	got, err1 := decodeObject(body)
	want, err2 := decodeObject([]byte(o.Answer))
	return err1 == nil && err2 == nil && got["created_at"] != want["created_at"]
}

// forget makes the verifier check each lost operation as if it had never
// been answered, and notes its key.
func (v *verifier) forget(lost map[*run.Op]bool) {
	if len(lost) == 0 {
		return
	}
	view := &run.Journal{Version: v.j.Version, RunID: v.j.RunID, Targets: v.j.Targets, Started: v.j.Started}
	for _, o := range v.j.Ops {
		if lost[o] {
			v.noteLost(o)
			o = o.Unanswered()
		}
		view.Ops = append(view.Ops, o)
	}
	v.j = view
}

// noteLost keeps the first lost operations' keys for the report.
func (v *verifier) noteLost(o *run.Op) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lostCount++
	v.st.MarkLost(o.Key)
	if len(v.lostKeys) < MaxLostKeys {
		v.lostKeys = append(v.lostKeys, o.Key)
	}
}

// MaxLostKeys bounds the lost keys a report lists.
const MaxLostKeys = 1000

func (v *verifier) violate(check string, o *run.Op, format string, args ...any) {
	viol := run.Violation{Check: check, Detail: fmt.Sprintf(format, args...)}
	if o != nil {
		viol.Key, viol.ID = o.Key, o.ID
	}
	v.st.Violate(viol)
	if check == "acknowledged_lost" && o != nil {
		v.noteLost(o)
	}
}

// parallel runs fn for every op with cfg.Concurrency workers and returns
// the first error.
func (v *verifier) parallel(ctx context.Context, ops []*run.Op, fn func(ctx context.Context, o *run.Op) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan *run.Op)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range v.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range work {
				if err := fn(ctx, o); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
	for _, o := range ops {
		select {
		case work <- o:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return first
}

// probe sends up to cfg.Probes acknowledged operations once more with their
// key and checks the stored answer comes back byte-identical, marked as a
// replay. Its requests are not counted in the run's request figures.
func (v *verifier) probe(ctx context.Context) (int, error) {
	var acked []*run.Op
	for _, o := range v.j.Ops {
		// A 404 is not stored (docs/api.md: a reversal of a transfer that
		// does not exist, as one the service lost under ExpectLoss), so a
		// copy is answered afresh, never replayed.
		if o.Acknowledged() && o.Status != http.StatusNotFound {
			acked = append(acked, o)
		}
	}
	if len(acked) == 0 || v.cfg.Probes <= 0 {
		return 0, nil
	}
	step := max(1, len(acked)/v.cfg.Probes)
	var sample []*run.Op
	for i := 0; i < len(acked) && len(sample) < v.cfg.Probes; i += step {
		sample = append(sample, acked[i])
	}
	pst := run.NewStats(1)
	pcl := v.cl.WithStats(pst, 2)
	err := v.parallel(ctx, sample, func(ctx context.Context, o *run.Op) error {
		a, ok := pcl.Send(ctx, o)
		if !ok {
			return fmt.Errorf("load: probe %s: no final answer within the retries", o.Key)
		}
		switch {
		case a.Status != o.Status || !bytes.Equal(a.Body, []byte(o.Answer)):
			v.violate("replay_differs", o, "probe answered %d %s; first answer was %d %s",
				a.Status, run.Truncate(a.Body), o.Status, run.Truncate([]byte(o.Answer)))
		case !a.Replayed:
			v.violate("probe_not_replayed", o, "a copy sent after the run was not marked Idempotent-Replayed: the key was forgotten or the work ran again")
		}
		return nil
	})
	for _, d := range pst.Violations() {
		v.st.Violate(d)
	}
	return len(sample), err
}

// decodeObject decodes a JSON object keeping numbers exact.
func decodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// transfers checks every transfer and reversal: an applied one exists with
// the acknowledged body, a refused one does not exist, an unresolved one is
// looked up and counted if it exists. One the listings settle
// (listing.confirm, listing.absent) needs no request; every other one is
// decided by a GET, in parallel.
func (v *verifier) transfers(ctx context.Context, l *listing) error {
	var (
		rest      []*run.Op
		confirmed []*run.Op
	)
	// parentOf maps each existing reversal to the transfer it reverses.
	parentOf := map[string]string{}
	for _, o := range v.j.Ops {
		if o.Kind != run.KindTransfer && o.Kind != run.KindReversal {
			continue
		}
		if l.absent(o) {
			v.st.Checked.Add(1)
			continue
		}
		want := l.confirm(o)
		if want == nil {
			rest = append(rest, o)
			continue
		}
		v.st.Checked.Add(1)
		v.checkAnswer(o, want)
		v.applied[o] = true
		if o.Kind == run.KindTransfer {
			confirmed = append(confirmed, o)
		} else {
			parentOf[o.ID], _ = want["reverses_id"].(string)
		}
	}
	err := v.parallel(ctx, rest, func(ctx context.Context, o *run.Op) error {
		rid, err := v.getTransfer(ctx, o)
		if rid != "" {
			v.mu.Lock()
			parentOf[o.ID] = rid
			v.mu.Unlock()
		}
		return err
	})
	if err != nil {
		return err
	}
	// A confirmed transfer's reversals are the existing reversals that name
	// it, each found either confirmed or by its own GET.
	children := map[string][]string{}
	for id, parent := range parentOf {
		children[parent] = append(children[parent], id)
	}
	for _, o := range confirmed {
		v.reversalsOf[o.ID] = children[o.ID]
	}
	return nil
}

// getTransfer checks o with GET /v1/transfers/{id} and returns, when it
// exists and is a reversal, the transfer it reverses.
func (v *verifier) getTransfer(ctx context.Context, o *run.Op) (string, error) {
	v.st.Checked.Add(1)
	status, body, err := v.cl.Get(ctx, "/v1/transfers/"+url.PathEscape(o.ID))
	if err != nil {
		return "", err
	}
	exists := status == 200
	if status != 200 && status != 404 {
		return "", fmt.Errorf("load: GET transfer %s: %d %s", o.ID, status, run.Truncate(body))
	}
	switch {
	case o.Applied() && !exists:
		v.violate("acknowledged_lost", o, "acknowledged with %d but GET answers %d", o.Status, status)
		return "", nil
	case o.Acknowledged() && !o.Applied() && exists:
		v.violate("refused_applied", o, "refused with %d %s but the transfer exists", o.Status, run.Truncate([]byte(o.Answer)))
	case !exists:
		return "", nil // refused or never applied
	}
	got, err := decodeObject(body)
	if err != nil {
		v.violate("transfer_differs", o, "GET body is not a JSON object: %v", err)
		return "", nil
	}
	if o.Applied() {
		want, err := decodeObject([]byte(o.Answer))
		if err != nil {
			v.violate("answer_mismatch", o, "acknowledged body is not a JSON object: %v", err)
			return "", nil
		}
		v.checkAnswer(o, want)
		if !reflect.DeepEqual(withoutReversals(want), withoutReversals(got)) {
			v.violate("transfer_differs", o, "acknowledged %s; GET answers %s", run.Truncate([]byte(o.Answer)), run.Truncate(body))
		}
	} else {
		// Unresolved but applied: it must be the transfer the request asked for.
		v.checkAnswer(o, got)
	}
	rid, _ := got["reverses_id"].(string)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.applied[o] = true
	if o.Kind == run.KindTransfer {
		var ids []string
		if revs, ok := got["reversals"].([]any); ok {
			for _, r := range revs {
				if m, ok := r.(map[string]any); ok {
					id, _ := m["id"].(string)
					ids = append(ids, id)
				}
			}
		}
		v.reversalsOf[o.ID] = ids
	}
	return rid, nil
}

// withoutReversals is a transfer body without its reversals, which GET
// lists and the answer that created it does not.
func withoutReversals(m map[string]any) map[string]any {
	bare := make(map[string]any, len(m))
	for k, val := range m {
		if k != "reversals" {
			bare[k] = val
		}
	}
	return bare
}

// checkAnswer checks that a transfer body says what the request asked.
func (v *verifier) checkAnswer(o *run.Op, m map[string]any) {
	str := func(k string) string { s, _ := m[k].(string); return s }
	amount, _ := m["amount"].(json.Number)
	want := map[string]string{"id": o.ID, "debit_account_id": o.Debit, "credit_account_id": o.Credit,
		"currency": o.Currency, "reverses_id": o.Reverses}
	for k, w := range want {
		if str(k) != w {
			v.violate("answer_mismatch", o, "%s is %q, the request asked %q", k, str(k), w)
		}
	}
	if string(amount) != strconv.FormatInt(o.Amount, 10) {
		v.violate("answer_mismatch", o, "amount is %s, the request asked %d", amount, o.Amount)
	}
}

// reversals checks each applied transfer lists exactly its applied
// reversals, each once.
func (v *verifier) reversals() {
	want := map[string][]string{}
	for _, o := range v.j.Ops {
		if o.Kind == run.KindReversal && v.applied[o] {
			want[o.Reverses] = append(want[o.Reverses], o.ID)
		}
	}
	byID := map[string]*run.Op{}
	for _, o := range v.j.Ops {
		byID[o.ID] = o
	}
	for tid, got := range v.reversalsOf {
		w := append([]string(nil), want[tid]...)
		g := append([]string(nil), got...)
		sort.Strings(w)
		sort.Strings(g)
		if !reflect.DeepEqual(w, g) && !(len(w) == 0 && len(g) == 0) {
			v.violate("reversals_differ", byID[tid], "transfer lists reversals %v; applied reversals are %v", g, w)
		}
	}
}

// expectation is what an account must show after the run.
type expectation struct {
	debits, credits int64
	entries         int
	transfers       map[string]bool
}

// accounts checks each run account as read in l: totals equal the applied
// transfers and reversals, and the entries pages hold one entry per
// applied posting with contiguous sequences and running totals that add
// up.
func (v *verifier) accounts(l *listing) {
	exp := map[string]*expectation{}
	get := func(id string) *expectation {
		e := exp[id]
		if e == nil {
			e = &expectation{transfers: map[string]bool{}}
			exp[id] = e
		}
		return e
	}
	// move expects transfer id's entry on each of its accounts and the
	// amount it posted.
	move := func(id, debit, credit string, posted int64) {
		d, c := get(debit), get(credit)
		d.debits += posted
		d.entries++
		d.transfers[id] = true
		c.credits += posted
		c.entries++
		c.transfers[id] = true
	}
	for _, o := range v.j.Ops {
		if (o.Kind == run.KindTransfer || o.Kind == run.KindReversal) && v.applied[o] {
			move(o.ID, o.Debit, o.Credit, o.Amount)
		}
	}
	for id, ef := range v.effects {
		move(id, ef.debit, ef.credit, ef.posted)
	}
	for _, o := range v.j.Ops {
		if o.Kind != run.KindAccount {
			continue
		}
		v.st.Checked.Add(1)
		ar := l.accounts[o.ID]
		e := exp[o.ID]
		if e == nil {
			e = &expectation{transfers: map[string]bool{}}
		}
		switch {
		case ar.status == 404 && o.Applied():
			v.violate("acknowledged_lost", o, "account acknowledged with %d but GET answers 404", o.Status)
			continue
		case ar.status == 404:
			continue
		case o.Acknowledged() && !o.Applied():
			v.violate("refused_applied", o, "account creation refused with %d but the account exists", o.Status)
		}
		var a struct {
			ID             string          `json:"id"`
			Currency       string          `json:"currency"`
			CreatedAt      string          `json:"created_at"`
			Flags          json.RawMessage `json:"flags"`
			DebitsPosted   int64           `json:"debits_posted"`
			CreditsPosted  int64           `json:"credits_posted"`
			Balance        int64           `json:"balance"`
			DebitsPending  int64           `json:"debits_pending"`
			CreditsPending int64           `json:"credits_pending"`
		}
		if err := json.Unmarshal(ar.body, &a); err != nil {
			v.violate("account_differs", o, "GET body: %v", err)
			continue
		}
		if o.Applied() {
			var first struct {
				ID        string          `json:"id"`
				Currency  string          `json:"currency"`
				CreatedAt string          `json:"created_at"`
				Flags     json.RawMessage `json:"flags"`
			}
			_ = json.Unmarshal([]byte(o.Answer), &first)
			if first.ID != a.ID || first.Currency != a.Currency || first.CreatedAt != a.CreatedAt || !bytes.Equal(first.Flags, a.Flags) {
				v.violate("account_differs", o, "acknowledged %s; GET answers %s", run.Truncate([]byte(o.Answer)), run.Truncate(ar.body))
			}
		}
		if a.DebitsPosted != e.debits || a.CreditsPosted != e.credits || a.Balance != a.CreditsPosted-a.DebitsPosted {
			check := "balance_mismatch"
			if a.DebitsPosted > e.debits || a.CreditsPosted > e.credits {
				check = "applied_twice"
			}
			v.violate(check, o, "debits %d credits %d balance %d; applied transfers and reversals make debits %d credits %d",
				a.DebitsPosted, a.CreditsPosted, a.Balance, e.debits, e.credits)
		}
		if open := v.open[o.ID]; a.DebitsPending != open.debits || a.CreditsPending != open.credits {
			v.violate("pending_mismatch", o, "debits pending %d, credits pending %d; its open holds make %d and %d",
				a.DebitsPending, a.CreditsPending, open.debits, open.credits)
		}
		v.balances[o.ID] = accountState{currency: a.Currency, balance: a.Balance}
		if !ar.bad {
			v.entries(o, e, ar.entries, a.DebitsPosted, a.CreditsPosted)
		}
	}
}

// entry is an entry as GET /v1/accounts/{id}/entries lists it, read with
// the Go client's type.
type entry = idemclient.Entry

// entries checks an account's entries (newest first, as listed) against
// the expectation and the account's totals.
func (v *verifier) entries(o *run.Op, e *expectation, all []entry, debits, credits int64) {
	if len(all) != e.entries {
		check := "entries_count"
		if len(all) > e.entries {
			check = "applied_twice"
		}
		v.violate(check, o, "%d entries; applied transfers and reversals make %d", len(all), e.entries)
	}
	seen := map[string]bool{}
	var prevD, prevC, prevDP, prevCP int64
	// Oldest first: sequences 1, 2, … and running totals that grow by each
	// entry's amount on its side; a hold's or settlement's entry moves
	// them, and the pending totals, by its effect.
	for i := len(all) - 1; i >= 0; i-- {
		en := all[i]
		want := int64(len(all) - i)
		if en.Sequence != want {
			v.violate("entry_sequence", o, "entry %d of %d (oldest first) has sequence %d", want, len(all), en.Sequence)
			return
		}
		d, c, dp, cp := prevD, prevC, prevDP, prevCP
		posted, pending := en.Amount, int64(0)
		if ef, ok := v.effects[en.TransferID]; ok {
			posted, pending = ef.posted, ef.pending
		}
		switch en.Direction {
		case "debit":
			d, dp = d+posted, dp+pending
		case "credit":
			c, cp = c+posted, cp+pending
		default:
			v.violate("running_balance", o, "entry %d has direction %q", en.Sequence, en.Direction)
		}
		if en.Amount <= 0 || en.DebitsPosted != d || en.CreditsPosted != c || en.Balance != c-d ||
			en.DebitsPending != dp || en.CreditsPending != cp {
			v.violate("running_balance", o, "entry %d (%s %d) shows debits %d credits %d balance %d pending %d/%d; the entries before it make debits %d credits %d pending %d/%d",
				en.Sequence, en.Direction, en.Amount, en.DebitsPosted, en.CreditsPosted, en.Balance, en.DebitsPending, en.CreditsPending, d, c, dp, cp)
			return
		}
		prevD, prevC, prevDP, prevCP = d, c, dp, cp
		if seen[en.TransferID] {
			v.violate("applied_twice", o, "transfer %s has two entries on this account", en.TransferID)
		}
		seen[en.TransferID] = true
		if !e.transfers[en.TransferID] {
			v.violate("entry_unexpected", o, "entry %d belongs to transfer %s, which was not applied by this run", en.Sequence, en.TransferID)
		}
	}
	if len(all) > 0 && (prevD != debits || prevC != credits) {
		v.violate("running_balance", o, "newest entry shows debits %d credits %d; the account shows %d and %d", prevD, prevC, debits, credits)
	}
}

// zeroSum checks the run's accounts sum to zero in each currency: every
// transfer moved money between two of them.
func (v *verifier) zeroSum() {
	sum := map[string]int64{}
	for _, a := range v.balances {
		sum[a.currency] += a.balance
	}
	for cur, s := range sum {
		if s != 0 {
			v.violate("zero_sum", nil, "the run's %s accounts sum to %d, not 0", cur, s)
		}
	}
}

// Journal checks a journal recorded by an earlier run against the service.
func Journal(ctx context.Context, cfg run.Config, j *run.Journal) (*run.Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, o := range j.Ops {
		if o.Kind != run.KindWebhook {
			continue
		}
		if cfg.WebhookSecret == "" {
			return nil, errors.New("load verify: the journal holds webhook deliveries; pass --webhook-secret so the probes can sign them")
		}
		if !cfg.CheckEvents {
			return nil, errors.New("load verify: the journal holds webhook deliveries, which are verified through GET /v1/events: drop --check-events=false")
		}
		break
	}
	pool := cfg.Pool
	if pool == nil {
		pool = run.NewPool(cfg.Targets...)
	}
	start := time.Now()
	st := run.NewStats(uint64(start.UnixNano()))
	cl := run.NewClient(cfg, pool, st, uint64(start.UnixNano()))
	defer cl.Close()
	r := &run.Report{RunID: j.RunID, Targets: pool.URLs()}
	prog := run.NewProgress(cfg.Progress, cfg.ProgressBar, st)
	err := Check(ctx, cfg, cl, st, prog, j, r)
	prog.Stop()
	r.VerifySeconds = time.Since(start).Seconds()
	st.Fill(r)
	r.ElapsedSeconds = time.Since(start).Seconds()
	return r, err
}
