package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
)

// event is one entry of GET /v1/events.
type event struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	CreatedAt   time.Time       `json:"created_at"`
	Payload     json.RawMessage `json:"payload"`
	PublishedAt *time.Time      `json:"published_at"`
}

// NATSStream is the stream the relay publishes to (docs/outbox.md).
const NATSStream = "IDEM"

// Limits of the events check.
const (
	maxEventPages = 100_000
	eventsPage    = 1000
)

// eventType is the event an applied operation of each kind emits.
var eventType = map[run.Kind]string{
	run.KindAccount:  "account.created",
	run.KindTransfer: "transfer.created",
	run.KindReversal: "transfer.reversed",
	run.KindHold:     "transfer.pending",
	run.KindPost:     "transfer.posted",
	run.KindVoid:     "transfer.voided",
	run.KindExpiry:   "transfer.expired",
}

// opEventType is the event o emits when applied.
func opEventType(o *run.Op) string {
	if o.Kind == run.KindWebhook {
		return run.WebhookEventType(o.Type)
	}
	return eventType[o.Kind]
}

// events checks the tenant's event list holds exactly one event per
// applied operation (by type and payload id: a webhook delivery's
// event_id) and none for the others; an unresolved webhook delivery, which
// has no resource of its own to look up, may have at most one. With
// cfg.NATS, stream IDEM must hold exactly one message per such event. It
// waits up to cfg.EventsWait for the relay to publish them. It returns the
// events of the run checked, and how many of them were webhook events.
func (v *verifier) events(ctx context.Context, l *listing) (int, int, error) {
	want := map[string]*run.Op{} // type + " " + resource id
	for _, o := range v.j.Ops {
		want[opEventType(o)+" "+o.ID] = o
	}
	for _, o := range v.expiries {
		want[opEventType(o)+" "+o.ID] = o
	}
	prefix := v.j.RunID + "-"
	deadline := time.Now().Add(v.cfg.EventsWait)
	el := l.events
	var ours []event
	for {
		ours = ours[:0]
		complete := true
		found := map[string]bool{}
		// from is the first page to read again when something is still
		// missing: the last (it may have grown), or the page of the first
		// event still unpublished, whose published_at may have changed.
		from := len(el.pages) - 1
		for i, ev := range el.all {
			id := PayloadID(ev.Payload)
			if !strings.HasPrefix(id, prefix) && !strings.HasPrefix(payloadPendingID(ev.Payload), prefix) {
				continue // another run's or the deployment's own
			}
			ours = append(ours, ev)
			found[ev.Type+" "+id] = true
			if v.cfg.NATS != "" && ev.PublishedAt == nil {
				if complete {
					from = min(from, el.pageOf(i))
				}
				complete = false
			}
		}
		for k, o := range want {
			if v.isApplied(o) && !found[k] {
				complete = false
			}
		}
		if complete || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if err := v.listEvents(ctx, el, from); err != nil {
			return 0, 0, err
		}
	}

	count := map[string]int{}
	ids := map[string]int{}
	webhooks := 0
	for _, ev := range ours {
		k := ev.Type + " " + PayloadID(ev.Payload)
		count[k]++
		ids[ev.ID]++
		o, ok := want[k]
		switch {
		case !ok:
			v.violate("event_unexpected", nil, "event %s (%s) names no operation of this run", ev.ID, k)
		case o.Kind == run.KindWebhook && !o.Acknowledged():
			// Unresolved: the server may have committed it and died
			// before answering. One event is its effect; more are checked
			// below.
			webhooks++
			v.checkWebhookPayload(o, ev)
		case !v.isApplied(o):
			v.violate("event_unexpected", o, "event %s (%s) for an operation that was not applied", ev.ID, ev.Type)
		case o.Kind == run.KindWebhook:
			webhooks++
			v.checkWebhookPayload(o, ev)
		}
	}
	for k, o := range want {
		switch n := count[k]; {
		case v.isApplied(o) && n == 0:
			v.violate("event_missing", o, "no %s event", opEventType(o))
		case n > 1 && o.Kind == run.KindWebhook:
			v.violate("event_doubled", o, "%d %s events for one delivery id: a redelivery was applied again", n, opEventType(o))
		case n > 1:
			v.violate("event_doubled", o, "%d %s events", n, opEventType(o))
		}
	}
	for id, n := range ids {
		if n > 1 {
			v.violate("event_doubled", nil, "event id %s listed %d times", id, n)
		}
	}
	for _, o := range v.j.Ops {
		if o.Kind == run.KindWebhook {
			v.st.Checked.Add(1)
		}
	}
	if v.cfg.NATS != "" {
		if err := v.natsCheck(ctx, ours); err != nil {
			return len(ours), webhooks, err
		}
	}
	return len(ours), webhooks, nil
}

// isApplied reports whether o's effect must be there: an account that
// exists, a transfer or reversal found applied, a webhook delivery
// acknowledged with 2xx.
func (v *verifier) isApplied(o *run.Op) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch o.Kind {
	case run.KindAccount:
		_, exists := v.balances[o.ID]
		return exists
	case run.KindWebhook:
		return o.Applied()
	case run.KindExpiry:
		return true // read from the ledger
	}
	return v.applied[o]
}

// checkWebhookPayload checks a webhook event carries the delivery it
// claims: the provider, the endpoint, the type and the body as sent.
func (v *verifier) checkWebhookPayload(o *run.Op, ev event) {
	var p struct {
		Provider string          `json:"provider"`
		Endpoint string          `json:"endpoint"`
		Type     string          `json:"type"`
		Body     json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		v.violate("webhook_differs", o, "event %s payload: %v", ev.ID, err)
		return
	}
	got, gerr := decodeObject(p.Body)
	want, werr := decodeObject([]byte(o.Body))
	switch {
	case p.Provider != run.WebhookProvider || "/v1/webhooks/"+url.PathEscape(p.Endpoint) != o.Path || p.Type != o.Type:
		v.violate("webhook_differs", o, "event %s names provider %q, endpoint %q, type %q; the delivery went to %s with type %q",
			ev.ID, p.Provider, p.Endpoint, p.Type, o.Path, o.Type)
	case gerr != nil || werr != nil || !reflect.DeepEqual(got, want):
		v.violate("webhook_differs", o, "event %s carries body %s; the delivery sent %s", ev.ID, run.Truncate(p.Body), run.Truncate([]byte(o.Body)))
	}
}

// payloadPendingID is the hold a settlement event's payload settles (""
// for any other event): an expiry's own id is the service's, the hold's
// the run's.
func payloadPendingID(p json.RawMessage) string {
	var m struct {
		PendingID string `json:"pending_id"`
	}
	_ = json.Unmarshal(p, &m)
	return m.PendingID
}

// PayloadID is the id an event's payload names: the resource's id, or a
// webhook event's event_id (the delivery's stable id).
func PayloadID(p json.RawMessage) string {
	var m struct {
		ID      string `json:"id"`
		EventID string `json:"event_id"`
	}
	_ = json.Unmarshal(p, &m)
	if m.ID == "" {
		return m.EventID
	}
	return m.ID
}

// eventList is the tenant's events as listed so far, oldest first, with
// where each page began, so that a later look reads again only from the
// page where something may have changed: following next_cursor never
// skips an event (docs/api.md), so an event listed later comes after the
// pages already read.
type eventList struct {
	all   []event
	pages []eventPage
}

// eventPage is one page read: the cursor it was read after ("" for the
// first) and the index of its first event in all.
type eventPage struct {
	after string
	start int
}

// pageOf is the index of the page that holds event i.
func (el *eventList) pageOf(i int) int {
	p := 0
	for p+1 < len(el.pages) && el.pages[p+1].start <= i {
		p++
	}
	return p
}

// listEvents reads GET /v1/events into el again from page from (from
// the first when from < 0 or nothing was read yet) to the end.
func (v *verifier) listEvents(ctx context.Context, el *eventList, from int) error {
	after := ""
	if from < 0 || from >= len(el.pages) {
		from = 0
	}
	if from < len(el.pages) {
		after = el.pages[from].after
		v.st.Listed.Add(-int64(len(el.all) - el.pages[from].start))
		el.all = el.all[:el.pages[from].start]
		el.pages = el.pages[:from]
	}
	for {
		if len(el.pages) == maxEventPages {
			return fmt.Errorf("load: more than %d events pages", maxEventPages)
		}
		path := fmt.Sprintf("/v1/events?limit=%d", eventsPage)
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		status, body, err := v.cl.Get(ctx, path)
		if err != nil {
			return err
		}
		if status != 200 {
			return fmt.Errorf("load: GET %s: %d %s (does the service serve events yet? run without --check-events)", path, status, run.Truncate(body))
		}
		var p struct {
			Data       []event `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return fmt.Errorf("load: GET %s: %w", path, err)
		}
		el.pages = append(el.pages, eventPage{after: after, start: len(el.all)})
		el.all = append(el.all, p.Data...)
		v.st.Listed.Add(int64(len(p.Data)))
		if p.NextCursor == nil || len(p.Data) == 0 {
			return nil
		}
		after = *p.NextCursor
	}
}

// natsCheck reads stream IDEM whole and checks it holds exactly one message
// per event, identified by the Nats-Msg-Id header.
func (v *verifier) natsCheck(ctx context.Context, evs []event) error {
	counts, err := ReadStream(ctx, v.cfg.NATS)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		switch n := counts[ev.ID]; {
		case n == 0:
			v.violate("nats_missing", nil, "event %s (%s %s) has no message in stream %s", ev.ID, ev.Type, PayloadID(ev.Payload), NATSStream)
		case n > 1:
			v.violate("nats_doubled", nil, "event %s (%s %s) has %d messages in stream %s", ev.ID, ev.Type, PayloadID(ev.Payload), n, NATSStream)
		}
	}
	return nil
}

// natsReadAttempts bounds the reads of the stream ReadStream tries.
const natsReadAttempts = 5

// ReadStream counts the messages of stream IDEM by Nats-Msg-Id, reading
// it again with a new consumer when a read fails: a cluster that has just
// had a node restart may have no stream leader for a moment (requests time
// out) or not know a new consumer everywhere at once (no responders).
func ReadStream(ctx context.Context, natsURL string) (map[string]int, error) {
	for attempt := 1; ; attempt++ {
		counts, err := streamMsgIDs(ctx, natsURL)
		if err == nil || attempt == natsReadAttempts || ctx.Err() != nil {
			return counts, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// streamReadStall bounds how long streamMsgIDs waits for a stream read
// that has stopped short of the stream's last message.
const streamReadStall = 30 * time.Second

// streamMsgIDs counts the messages of stream IDEM by Nats-Msg-Id.
//
// It reads until it has passed the last sequence the stream's leader
// reports, asking the leader again each time it gets there. A consumer in
// a cluster can be served from a replica that is still catching up (a node
// just restarted, a leader just elected): its fetches answer empty before
// the end, and stopping at the first empty answer would count the tail as
// missing. A read that makes no progress for streamReadStall is an error.
func streamMsgIDs(ctx context.Context, natsURL string) (map[string]int, error) {
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second), nats.Name("idem load verify"))
	if err != nil {
		return nil, fmt.Errorf("load: connect to NATS %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("load: JetStream: %w", err)
	}
	s, err := js.Stream(ctx, NATSStream)
	if err != nil {
		return nil, fmt.Errorf("load: stream %s: %w", NATSStream, err)
	}
	counts := map[string]int{}
	st := s.CachedInfo().State
	if st.Msgs == 0 {
		return counts, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("load: stream %s: consumer: %w", NATSStream, err)
	}
	var pos uint64 // the highest stream sequence read
	progress := time.Now()
	for unheard := 0; ; {
		// FetchNoWait answers with what is stored now; every batch is read
		// to its end, so no fetch is left running behind the return.
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return nil, fmt.Errorf("load: stream %s: fetch: %w", NATSStream, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			counts[msg.Headers().Get(nats.MsgIdHdr)]++
			if md, err := msg.Metadata(); err == nil && md.Sequence.Stream > pos {
				pos = md.Sequence.Stream
			}
		}
		if err := batch.Error(); err != nil {
			if got == 0 && errors.Is(err, nats.ErrNoResponders) && unheard < 25 {
				// In a cluster the new consumer's interest reaches our
				// server a moment after its creation: nothing was
				// delivered, so ask again.
				unheard++
				time.Sleep(200 * time.Millisecond)
				continue
			}
			return nil, fmt.Errorf("load: stream %s: fetch: %w", NATSStream, err)
		}
		if got > 0 {
			progress = time.Now()
			if pos < st.LastSeq {
				continue
			}
		}
		// At the end as last reported, or nothing now short of it (the
		// replica serving the consumer is behind, or the rest was deleted
		// by limits or a purge): ask the leader where the stream ends.
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("load: stream %s: %w", NATSStream, err)
		}
		if st = info.State; pos >= st.LastSeq || st.Msgs == 0 || st.FirstSeq > st.LastSeq {
			return counts, nil
		}
		if got > 0 {
			continue
		}
		if time.Since(progress) > streamReadStall {
			return nil, fmt.Errorf("load: stream %s: read stopped at sequence %d of %d for %s", NATSStream, pos, st.LastSeq, streamReadStall)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
