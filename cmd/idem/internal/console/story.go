package console

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/webhook"
)

// One request's story (/ui/story): from an Idempotency-Key, a transfer id,
// a webhook event id or an event id, everything idem did for one request —
// its first arrival, the answer it stored, the ledger rows it wrote, the
// events it enqueued and their publishing, the reversals that followed,
// and the replays this process answered.

const (
	// storyWindow is how far from a change's time its events and its
	// stored request are looked for. Both are written in the change's
	// transaction, so they lie within the transaction's span of it; the
	// window also covers a database clock (which stamps transfers on
	// Postgres) that disagrees with the service's (which stamps events
	// and keys).
	storyWindow = 10 * time.Minute
	// storyScan bounds the outbox rows and key records one search
	// examines.
	storyScan = 20000
	// storyEvents bounds the events told per change.
	storyEvents = 50
	// storyReversals bounds the reversals told.
	storyReversals = 20
	// storyEntriesPage bounds the entries read per account to find a
	// transfer's: those recorded at its time, newest first.
	storyEntriesPage = 100
	// maxReplaysKept bounds the replays the console remembers.
	maxReplaysKept = 4096
	// storyReplays bounds the replays told per request.
	storyReplays = 50
)

// storyMatch is one thing the query names in the tenant.
type storyMatch struct {
	// Ref tells the match apart when the query names several: the page's
	// match parameter.
	Ref string
	// What says what matched, for people.
	What string
	At   time.Time

	record   *inspect.KeyRecord
	transfer *ledger.Transfer
	event    *driver.OutboxRow
}

// storyEvent is an outbox message as the story and events pages show it.
type storyEvent struct {
	ID, Tenant, Type, Key string
	CreatedAt             time.Time
	SentAt, DeadAt        time.Time
	Attempts              int
	LastError             string
	// State is "published", "pending" or "dead letter".
	State string
	// Lag is how long it took from enqueue to publish.
	Lag     time.Duration
	Payload template.HTML
	// Story is the transfer (or other subject) the event belongs to, when
	// the story page tells it: the event's payload id.
	subject string
}

// StateClass names the state for a CSS class: published, pending, dead.
func (e storyEvent) StateClass() string {
	if e.State == "dead letter" {
		return "dead"
	}
	return e.State
}

func eventOf(r driver.OutboxRow, tenant string) storyEvent {
	if r.Sealed {
		// Encrypted at rest: the console holds no key, and shows no
		// ciphertext as if it were the payload.
		r.Payload = []byte(`"(sealed)"`)
	}
	e := storyEvent{ID: r.ID, Tenant: r.Tenant, Type: r.Type, Key: r.Key, CreatedAt: r.CreatedAt.UTC(),
		SentAt: r.SentAt.UTC(), DeadAt: r.DeadAt.UTC(), Attempts: r.Attempts, LastError: r.LastError,
		Payload: jsonHTML(r.Payload, tenant)}
	switch {
	case !r.SentAt.IsZero():
		e.State, e.Lag = "published", r.SentAt.Sub(r.CreatedAt)
	case !r.DeadAt.IsZero():
		e.State = "dead letter"
	default:
		e.State = "pending"
	}
	var p struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(r.Payload, &p) == nil {
		e.subject = p.ID
	}
	return e
}

// replay is a duplicate the service answered with a stored outcome.
type replay struct {
	Tenant, Operation, Key string
	At                     time.Time
}

// replayLog remembers the newest replays this process answered, in a ring
// of maxReplaysKept: the database keeps no trace of a replay.
type replayLog struct {
	mu    sync.Mutex
	ring  []replay
	next  int
	since time.Time
}

func newReplayLog(now time.Time) *replayLog {
	return &replayLog{ring: make([]replay, 0, maxReplaysKept), since: now}
}

func (l *replayLog) note(r replay) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) < maxReplaysKept {
		l.ring = append(l.ring, r)
		return
	}
	l.ring[l.next] = r
	l.next = (l.next + 1) % maxReplaysKept
}

// of returns the replays of one key record, oldest first, at most
// storyReplays (the newest).
func (l *replayLog) of(tenant, operation, key string) []replay {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []replay
	for i := range l.ring {
		r := l.ring[(l.next+i)%len(l.ring)]
		if r.Tenant == tenant && r.Operation == operation && r.Key == key {
			out = append(out, r)
		}
	}
	return out[max(len(out)-storyReplays, 0):]
}

// NoteReplay records that the service answered a duplicate of the
// request stored under (tenant, operation, key) with its stored outcome,
// so that the request's story can tell it. Only this process's replays are
// known, and only the newest 4096 of them: nothing is written to the
// database for a replay.
func (c *Console) NoteReplay(tenant, operation, key string) {
	c.replays.note(replay{Tenant: tenant, Operation: operation, Key: key, At: c.cfg.Clock().UTC()})
}

// StoryRequest is a request with what it did. (Exported only so that
// the page's template reaches it, embedded in the story.)
type StoryRequest struct {
	// Arrival is the stored request: its first arrival and stored answer.
	// Nil when it was not found (expired and deleted, or the change was
	// not made through the API).
	Arrival *inspect.KeyRecord
	Answer  template.HTML
	// Transfer and its Entries are the ledger rows it wrote, when it
	// wrote a transfer.
	Transfer *ledger.Transfer
	Entries  []ledger.Entry
	Events   []storyEvent
	Replays  []replay
	// Tenant, Now and Focus (the event the query named, highlighted) are
	// for the page.
	Tenant string
	Now    time.Time
	Focus  string
}

// storyView is what the page shows.
type storyView struct {
	// Matched says what the query matched.
	Matched string
	// Subject names what the story is about.
	Subject string
	StoryRequest
	// Original is the transfer a reversal reverses.
	Original  *ledger.Transfer
	Reversals []StoryRequest
	// MoreReversals counts reversals beyond those told.
	MoreReversals int
	// EventKey is the ordering key the events were looked for under.
	EventKey string
	// Notes say what could not be found, and why.
	Notes []string
}

func (c *Console) story(w http.ResponseWriter, r *http.Request) {
	p, ok := c.params(w, r, "tenant", "q", "match")
	if !ok {
		return
	}
	tenant := cmp.Or(p["tenant"], idem.DefaultTenant)
	now := c.cfg.Clock().UTC()
	data := map[string]any{"Tenant": tenant, "Q": p["q"], "Now": now, "ReplaysSince": c.replays.since}
	if p["q"] == "" {
		c.render(w, r, http.StatusOK, "story", data)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	matches, err := c.storyMatches(ctx, tenant, p["q"], now)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if p["match"] != "" {
		matches = slices.DeleteFunc(matches, func(m storyMatch) bool { return m.Ref != p["match"] })
	}
	switch len(matches) {
	case 0:
		data["NoMatch"] = true
		c.render(w, r, http.StatusNotFound, "story", data)
		return
	case 1:
	default:
		data["Matches"] = matches
		c.render(w, r, http.StatusOK, "story", data)
		return
	}
	v, err := c.tell(ctx, tenant, matches[0], now)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data["Story"] = v
	c.render(w, r, http.StatusOK, "story", data)
}

// storyMatches finds what q names in the tenant: idempotency records of
// the key (of every operation; a webhook endpoint's records are keyed by
// the provider's event id), a transfer, an outbox event.
func (c *Console) storyMatches(ctx context.Context, tenant, q string, now time.Time) ([]storyMatch, error) {
	d := c.cfg.Driver
	var out []storyMatch
	recs, err := inspect.Keys(ctx, d, now, tenant, "", q)
	if err != nil {
		return nil, err
	}
	// A provider's event id the keeper cannot store as is is kept hashed
	// (webhook.DedupeKey).
	if hashed := webhook.DedupeKey(webhook.Endpoint{Tenant: tenant}, webhook.Event{ID: q}).Key; hashed != q {
		more, err := inspect.Keys(ctx, d, now, tenant, "", hashed)
		if err != nil {
			return nil, err
		}
		for _, rec := range more {
			if strings.HasPrefix(rec.Operation, "webhook:") {
				recs = append(recs, rec)
			}
		}
	}
	for i := range recs {
		rec := &recs[i]
		m := storyMatch{Ref: "key:" + rec.Operation, At: rec.FirstSeen, record: rec,
			What: "the Idempotency-Key of " + rec.Operation}
		if ep, ok := strings.CutPrefix(rec.Operation, "webhook:"); ok {
			m.What = "the event id of a delivery to webhook endpoint " + ep
		}
		out = append(out, m)
	}
	err = inspect.Snapshot(ctx, d, func(tx driver.Tx) error {
		t, err := c.cfg.Ledger.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: q})
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		what := "the transfer id"
		if t.ReversesID != "" {
			what = "the id of a reversal"
		}
		out = append(out, storyMatch{Ref: "transfer", What: what, At: t.CreatedAt, transfer: &t})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if id, err := uuid.Parse(q); err == nil {
		row, err := d.OutboxGet(ctx, d.Reader(), &driver.OutboxGetParams{ID: id.String()})
		switch {
		case errors.Is(err, driver.ErrNotFound):
		case err != nil:
			return nil, err
		case row.Tenant == tenant: // another tenant's event is not there
			out = append(out, storyMatch{Ref: "event", What: "the id of a " + row.Type + " event", At: row.CreatedAt, event: row})
		}
	}
	return out, nil
}

// tell builds the story of one match.
func (c *Console) tell(ctx context.Context, tenant string, m storyMatch, now time.Time) (*storyView, error) {
	v := &storyView{Matched: m.What}
	v.Tenant, v.Now = tenant, now
	defer func() {
		for i := range v.Reversals {
			v.Reversals[i].Tenant, v.Reversals[i].Now, v.Reversals[i].Focus = tenant, now, v.Focus
		}
	}()
	switch {
	case m.record != nil:
		return v, c.tellRecord(ctx, tenant, m.record, now, v)
	case m.transfer != nil:
		return v, c.tellTransfer(ctx, tenant, *m.transfer, nil, now, v)
	default:
		v.Focus = m.event.ID
		return v, c.tellEvent(ctx, tenant, m.event, now, v)
	}
}

// tellRecord tells the story of a stored request: a transfer's or a
// reversal's when its answer is one, else the request with the events of
// what its answer names.
func (c *Console) tellRecord(ctx context.Context, tenant string, rec *inspect.KeyRecord, now time.Time, v *storyView) error {
	if id := transferIn(rec.Body); id != "" {
		var t ledger.Transfer
		err := inspect.Snapshot(ctx, c.cfg.Driver, func(tx driver.Tx) (err error) {
			t, err = c.cfg.Ledger.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: id})
			return err
		})
		switch {
		case err == nil:
			return c.tellTransfer(ctx, tenant, t, rec, now, v)
		case !errors.Is(err, ledger.ErrNotFound):
			return err
		}
		v.Notes = append(v.Notes, "The stored answer names transfer "+id+", which the ledger does not hold.")
	}
	v.Subject = rec.Operation + " with key " + rec.Key
	v.Arrival, v.Answer = rec, jsonHTML(rec.Body, tenant)
	v.Replays = c.replays.of(tenant, rec.Operation, rec.Key)
	switch {
	case strings.HasPrefix(rec.Operation, "webhook:"):
		v.EventKey = "webhook/" + strings.TrimPrefix(rec.Operation, "webhook:") + "/" + rec.Key
	case rec.Operation == "POST /v1/accounts" && rec.Status < 300:
		var a struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(rec.Body, &a) == nil && a.ID != "" {
			v.EventKey = "account/" + a.ID
		}
	}
	if rec.Status >= 300 {
		v.Notes = append(v.Notes, fmt.Sprintf("The stored answer is a refusal (%d): nothing was written, and every retry with this key gets the same refusal.", rec.Status))
	}
	if v.EventKey == "" {
		return nil
	}
	events, notes, err := c.eventsNear(ctx, tenant, v.EventKey, []time.Time{rec.FirstSeen})
	v.Events, v.Notes = events, append(v.Notes, notes...)
	return err
}

// tellEvent tells the story of what an event belongs to: by its ordering
// key, the transfer, the account or the webhook delivery that enqueued it.
func (c *Console) tellEvent(ctx context.Context, tenant string, row *driver.OutboxRow, now time.Time, v *storyView) error {
	kind, rest, _ := strings.Cut(row.Key, "/")
	switch kind {
	case "transfer":
		var t ledger.Transfer
		err := inspect.Snapshot(ctx, c.cfg.Driver, func(tx driver.Tx) (err error) {
			t, err = c.cfg.Ledger.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: rest})
			return err
		})
		if err == nil {
			return c.tellTransfer(ctx, tenant, t, nil, now, v)
		}
		if !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
	case "webhook":
		if ep, key, ok := strings.Cut(rest, "/"); ok {
			recs, err := inspect.Keys(ctx, c.cfg.Driver, now, tenant, "webhook:"+ep, key)
			if err != nil {
				return err
			}
			if len(recs) == 1 {
				return c.tellRecord(ctx, tenant, &recs[0], now, v)
			}
		}
	case "account":
		rec, err := c.findRequest(ctx, tenant, rest, row.CreatedAt, now)
		if err != nil {
			return err
		}
		if rec != nil {
			return c.tellRecord(ctx, tenant, rec, now, v)
		}
	}
	// An event enqueued by other code than the service's routes: it is its
	// own story.
	v.Subject = row.Type + " event"
	v.Events = []storyEvent{eventOf(*row, tenant)}
	v.Notes = append(v.Notes, "No request that enqueued this event was found: it names no transfer, account or webhook delivery idem knows.")
	return nil
}

// tellTransfer tells a transfer's story; rec is its stored request when
// the query found it already.
func (c *Console) tellTransfer(ctx context.Context, tenant string, t ledger.Transfer, rec *inspect.KeyRecord, now time.Time, v *storyView) error {
	v.Subject = "transfer " + t.ID
	if t.ReversesID != "" {
		v.Subject = "reversal " + t.ID
	}
	// Both a transfer's and its reversals' events are keyed by the
	// original, so that a reversal's event never overtakes the original's.
	original := cmp.Or(t.ReversesID, t.ID)
	v.EventKey = "transfer/" + original
	reversals := t.Reversals
	if len(reversals) > storyReversals {
		v.MoreReversals = len(reversals) - storyReversals
		reversals = reversals[:storyReversals]
	}
	err := inspect.ReadAsOf(ctx, c.cfg.Driver, c.cfg.Ledger, &t.CreatedAt, c.cfg.Driver.BeginSnapshot, func(tx driver.Tx) error {
		var err error
		if v.Entries, err = c.entriesOf(ctx, tx, tenant, t); err != nil {
			return err
		}
		if t.ReversesID != "" {
			orig, err := c.cfg.Ledger.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: t.ReversesID})
			if err != nil {
				return err
			}
			v.Original = &orig
		}
		v.Reversals = make([]StoryRequest, len(reversals))
		for i, rv := range reversals {
			v.Reversals[i].Transfer = &reversals[i]
			if v.Reversals[i].Entries, err = c.entriesOf(ctx, tx, tenant, rv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	v.Transfer = &t
	if rec == nil {
		if rec, err = c.findRequest(ctx, tenant, t.ID, t.CreatedAt, now); err != nil {
			return err
		}
		if rec == nil {
			v.Notes = append(v.Notes, "No stored request was found for this transfer: its idempotency record expired and was deleted, "+
				"or it was not posted through the API, or the key retention changed since.")
		}
	}
	if rec != nil {
		v.Arrival, v.Answer = rec, jsonHTML(rec.Body, tenant)
		v.Replays = c.replays.of(tenant, rec.Operation, rec.Key)
	}
	anchors := []time.Time{t.CreatedAt}
	for i := range v.Reversals {
		rs := &v.Reversals[i]
		anchors = append(anchors, rs.Transfer.CreatedAt)
		rrec, err := c.findRequest(ctx, tenant, rs.Transfer.ID, rs.Transfer.CreatedAt, now)
		if err != nil {
			return err
		}
		if rrec != nil {
			rs.Arrival, rs.Answer = rrec, jsonHTML(rrec.Body, tenant)
			rs.Replays = c.replays.of(tenant, rrec.Operation, rrec.Key)
		}
	}
	events, notes, err := c.eventsNear(ctx, tenant, v.EventKey, anchors)
	if err != nil {
		return err
	}
	v.Notes = append(v.Notes, notes...)
	// Each event goes with the change it announces: its payload's id.
	for _, e := range events {
		placed := false
		for i := range v.Reversals {
			if e.subject == v.Reversals[i].Transfer.ID {
				v.Reversals[i].Events = append(v.Reversals[i].Events, e)
				placed = true
			}
		}
		if !placed && e.subject == t.ID {
			v.Events = append(v.Events, e)
		}
	}
	return nil
}

// entriesOf reads the entries a transfer wrote, debit first, with the
// running totals after each: those recorded at the transfer's time on its
// two accounts.
func (c *Console) entriesOf(ctx context.Context, tx driver.Tx, tenant string, t ledger.Transfer) ([]ledger.Entry, error) {
	at := t.CreatedAt
	var out []ledger.Entry
	for _, acct := range []string{t.DebitAccountID, t.CreditAccountID} {
		entries, _, err := c.cfg.Ledger.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: acct, AsOf: &at, Limit: storyEntriesPage})
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.TransferID == t.ID {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// findRequest finds the stored request whose answer is the resource id
// written at the time at: its record expires at its first arrival plus the
// key retention, so only the records expiring around at + retention are
// searched.
func (c *Console) findRequest(ctx context.Context, tenant, id string, at, now time.Time) (*inspect.KeyRecord, error) {
	quoted, _ := json.Marshal(id) // a string always encodes
	expires := at.Add(c.cfg.KeyRetention)
	recs, err := c.cfg.Driver.KeyFind(ctx, c.cfg.Driver.Reader(), &driver.KeyFindParams{
		Scope: tenant, ExpiresFrom: expires.Add(-storyWindow), ExpiresUntil: expires.Add(storyWindow),
		BodyContains: append([]byte(`"id":`), quoted...), Limit: 10, ScanLimit: storyScan,
	})
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		rec := inspect.KeyRecordOf(r, now)
		var body struct {
			ID string `json:"id"`
		}
		if !strings.HasPrefix(rec.Operation, "webhook:") && json.Unmarshal(rec.Body, &body) == nil && body.ID == id {
			return &rec, nil
		}
	}
	return nil, nil
}

// eventsNear reads the events of an ordering key enqueued around each
// anchor time, oldest first. The ids Enqueue gives are UUIDv7, ordered by
// their enqueue time, so each anchor is one bounded range of the outbox's
// primary key. notes say where a search stopped short.
func (c *Console) eventsNear(ctx context.Context, tenant, key string, anchors []time.Time) ([]storyEvent, []string, error) {
	d := c.cfg.Driver
	seen := map[string]bool{}
	var (
		out   []storyEvent
		notes []string
	)
	for _, at := range anchors {
		b, err := d.OutboxBrowse(ctx, d.Reader(), &driver.OutboxBrowseParams{
			Tenant: tenant, Key: key, Limit: storyEvents, ScanLimit: storyScan,
			BeforeID: uuidAt(at.Add(storyWindow), true), AfterID: uuidAt(at.Add(-storyWindow), false),
		})
		if err != nil {
			return nil, nil, err
		}
		if b.Scanned >= storyScan {
			notes = append(notes, fmt.Sprintf("The search for events stopped after %d events enqueued around %s; the events page lists every event of key %s.",
				storyScan, inspect.Time(at), key))
		}
		for _, r := range b.Rows {
			if !seen[r.ID] {
				seen[r.ID] = true
				out = append(out, eventOf(r, tenant))
			}
		}
	}
	slices.SortFunc(out, func(a, b storyEvent) int { return cmp.Compare(a.ID, b.ID) })
	return out, notes, nil
}

// uuidAt is the lowest UUIDv7 of the millisecond t, or with high the
// highest: every UUIDv7 drawn in that millisecond sorts between them.
func uuidAt(t time.Time, high bool) string {
	h := fmt.Sprintf("%012x", max(t.UnixMilli(), 0))
	if high {
		return h[:8] + "-" + h[8:12] + "-ffff-ffff-ffffffffffff"
	}
	return h[:8] + "-" + h[8:12] + "-0000-0000-000000000000"
}

// jsonHTML pretty-prints a JSON document for a page, with the ids it holds
// as links to their console pages: a transfer's id, reverses_id and
// transfer_id to the transfer page; an account's id and the account ids of
// a transfer or an entry to the account page. Anything that is not JSON
// (or nests deeper than maxJSONDepth) is shown as text.
func jsonHTML(doc []byte, tenant string) template.HTML {
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	n, err := parseJSONNode(dec, 0)
	if err != nil || dec.More() {
		return template.HTML(template.HTMLEscapeString(string(doc)))
	}
	var b strings.Builder
	n.write(&b, 0, "", tenant)
	return template.HTML(b.String())
}

const maxJSONDepth = 32

type jsonNode struct {
	object bool
	array  bool
	fields []jsonField // of an object, in document order
	items  []*jsonNode // of an array
	value  any         // a scalar: string, json.Number, bool or nil
}

type jsonField struct {
	key   string
	value *jsonNode
}

func parseJSONNode(dec *json.Decoder, depth int) (*jsonNode, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return &jsonNode{value: tok}, nil
	}
	n := &jsonNode{object: d == '{', array: d == '['}
	for dec.More() {
		if n.object {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := kt.(string) // object keys are strings
			v, err := parseJSONNode(dec, depth+1)
			if err != nil {
				return nil, err
			}
			n.fields = append(n.fields, jsonField{key, v})
			continue
		}
		v, err := parseJSONNode(dec, depth+1)
		if err != nil {
			return nil, err
		}
		n.items = append(n.items, v)
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return nil, err
	}
	return n, nil
}

func (n *jsonNode) has(key string) bool {
	for _, f := range n.fields {
		if f.key == key {
			return true
		}
	}
	return false
}

// write writes n at the indent; link is the page its string value links
// to ("transfer", "account" or "").
func (n *jsonNode) write(b *strings.Builder, indent int, link, tenant string) {
	pad := strings.Repeat("  ", indent+1)
	switch {
	case n.object:
		if len(n.fields) == 0 {
			b.WriteString("{}")
			return
		}
		kind := ""
		switch {
		case n.has("debit_account_id"):
			kind = "transfer"
		case n.has("currency") && n.has("flags"):
			kind = "account"
		}
		b.WriteString("{\n")
		for i, f := range n.fields {
			b.WriteString(pad)
			b.WriteString(template.HTMLEscapeString(jsonString(f.key)))
			b.WriteString(": ")
			f.value.write(b, indent+1, linkOf(kind, f.key), tenant)
			if i < len(n.fields)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(pad[2:] + "}")
	case n.array:
		if len(n.items) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteString("[\n")
		for i, item := range n.items {
			b.WriteString(pad)
			item.write(b, indent+1, link, tenant)
			if i < len(n.items)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(pad[2:] + "]")
	default:
		s, isString := n.value.(string)
		var text string
		switch v := n.value.(type) {
		case string:
			text = jsonString(v)
		case json.Number:
			text = v.String()
		case bool:
			text = fmt.Sprint(v)
		default:
			text = "null"
		}
		text = template.HTMLEscapeString(text)
		if !isString || s == "" || link == "" {
			b.WriteString(text)
			return
		}
		href := "/ui/transfers/" + url.PathEscape(s) + "?" + url.Values{"tenant": {tenant}}.Encode()
		if link == "account" {
			href = "/ui/accounts?" + url.Values{"tenant": {tenant}, "id": {s}}.Encode()
		}
		b.WriteString(`<a class="json-id" href="` + template.HTMLEscapeString(href) + `">` + text + `</a>`)
	}
}

// linkOf is the page a field's value links to in an object of the kind.
func linkOf(kind, key string) string {
	switch key {
	case "id":
		return kind
	case "reverses_id", "transfer_id":
		return "transfer"
	case "debit_account_id", "credit_account_id", "account_id":
		return "account"
	}
	return ""
}

func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the page escapes; keep "<" readable
	_ = enc.Encode(s)        // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
