package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// event is one entry of GET /v1/events.
type event struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	CreatedAt   time.Time       `json:"created_at"`
	Payload     json.RawMessage `json:"payload"`
	PublishedAt *time.Time      `json:"published_at"`
}

// Limits of the events check.
const (
	maxEventPages = 100_000
	eventsPage    = 1000
	// natsStream is the stream the relay publishes to (DESIGN.md).
	natsStream = "IDEM"
)

// eventType is the event an applied operation of each kind emits.
var eventType = map[Kind]string{
	KindAccount:  "account.created",
	KindTransfer: "transfer.created",
	KindReversal: "transfer.reversed",
}

// events checks the tenant's event list holds exactly one event per
// applied operation (by type and payload id) and none for the others; with
// cfg.NATS, that stream IDEM holds exactly one message per such event. It
// waits up to cfg.EventsWait for the relay to publish them.
func (v *verifier) events(ctx context.Context) (int, error) {
	want := map[string]*Op{} // type + " " + resource id
	for _, o := range v.j.Ops {
		want[eventType[o.Kind]+" "+o.ID] = o
	}
	prefix := v.j.RunID + "-"
	deadline := time.Now().Add(v.cfg.EventsWait)
	var ours []event
	for {
		all, err := v.listEvents(ctx)
		if err != nil {
			return 0, err
		}
		ours = ours[:0]
		complete := true
		found := map[string]bool{}
		for _, ev := range all {
			id := payloadID(ev.Payload)
			if !strings.HasPrefix(id, prefix) {
				continue // another run's or the deployment's own
			}
			ours = append(ours, ev)
			found[ev.Type+" "+id] = true
			if v.cfg.NATS != "" && ev.PublishedAt == nil {
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
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}

	count := map[string]int{}
	ids := map[string]int{}
	for _, ev := range ours {
		k := ev.Type + " " + payloadID(ev.Payload)
		count[k]++
		ids[ev.ID]++
		o, ok := want[k]
		switch {
		case !ok:
			v.violate("event_unexpected", nil, "event %s (%s) names no operation of this run", ev.ID, k)
		case !v.isApplied(o):
			v.violate("event_unexpected", o, "event %s (%s) for an operation that was not applied", ev.ID, ev.Type)
		}
	}
	for k, o := range want {
		switch n := count[k]; {
		case v.isApplied(o) && n == 0:
			v.violate("event_missing", o, "no %s event", eventType[o.Kind])
		case n > 1:
			v.violate("event_doubled", o, "%d %s events", n, eventType[o.Kind])
		}
	}
	for id, n := range ids {
		if n > 1 {
			v.violate("event_doubled", nil, "event id %s listed %d times", id, n)
		}
	}
	if v.cfg.NATS != "" {
		if err := v.natsCheck(ctx, ours); err != nil {
			return len(ours), err
		}
	}
	return len(ours), nil
}

func (v *verifier) isApplied(o *Op) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if o.Kind == KindAccount {
		_, exists := v.balances[o.ID]
		return exists
	}
	return v.applied[o]
}

func payloadID(p json.RawMessage) string {
	var m struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(p, &m)
	return m.ID
}

// listEvents reads every page of GET /v1/events, oldest first.
func (v *verifier) listEvents(ctx context.Context) ([]event, error) {
	var all []event
	after := ""
	for page := 0; ; page++ {
		if page == maxEventPages {
			return nil, fmt.Errorf("load: more than %d events pages", maxEventPages)
		}
		path := fmt.Sprintf("/v1/events?limit=%d", eventsPage)
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		status, body, err := v.cl.get(ctx, path)
		if err != nil {
			return nil, err
		}
		if status != 200 {
			return nil, fmt.Errorf("load: GET %s: %d %s (does the service serve events yet? run without --check-events)", path, status, truncate(body))
		}
		var p struct {
			Data       []event `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return nil, fmt.Errorf("load: GET %s: %w", path, err)
		}
		all = append(all, p.Data...)
		if p.NextCursor == nil || len(p.Data) == 0 {
			return all, nil
		}
		after = *p.NextCursor
	}
}

// natsCheck reads stream IDEM whole and checks it holds exactly one message
// per event, identified by the Nats-Msg-Id header.
func (v *verifier) natsCheck(ctx context.Context, evs []event) error {
	counts, err := streamMsgIDs(ctx, v.cfg.NATS)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		switch n := counts[ev.ID]; {
		case n == 0:
			v.violate("nats_missing", nil, "event %s (%s %s) has no message in stream %s", ev.ID, ev.Type, payloadID(ev.Payload), natsStream)
		case n > 1:
			v.violate("nats_doubled", nil, "event %s (%s %s) has %d messages in stream %s", ev.ID, ev.Type, payloadID(ev.Payload), n, natsStream)
		}
	}
	return nil
}

// streamMsgIDs counts the messages of stream IDEM by Nats-Msg-Id.
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
	s, err := js.Stream(ctx, natsStream)
	if err != nil {
		return nil, fmt.Errorf("load: stream %s: %w", natsStream, err)
	}
	last := s.CachedInfo().State.LastSeq
	counts := map[string]int{}
	if last == 0 {
		return counts, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("load: stream %s: consumer: %w", natsStream, err)
	}
	for empty := 0; empty < 3; {
		// FetchNoWait answers with what is stored now; every batch is read
		// to its end, so no fetch is left running behind the return.
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return nil, fmt.Errorf("load: stream %s: fetch: %w", natsStream, err)
		}
		got, done := 0, false
		for msg := range batch.Messages() {
			got++
			counts[msg.Headers().Get(nats.MsgIdHdr)]++
			if md, err := msg.Metadata(); err == nil && md.Sequence.Stream >= last {
				done = true
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("load: stream %s: fetch: %w", natsStream, err)
		}
		if done {
			return counts, nil
		}
		if got == 0 {
			// Nothing more now: the tail was deleted (limits or purge), or
			// is on its way; a few empty answers end the read.
			empty++
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return counts, nil
}
