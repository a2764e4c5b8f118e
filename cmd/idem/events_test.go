package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/cmd/idem/internal/embeddednats"
)

// startNATS is a real NATS server with JetStream on a loopback port, for
// serve's relay to publish to; it returns the server's URL and a stream
// reader.
func startNATS(t *testing.T) (string, func() []*jetstream.RawStreamMsg) {
	t.Helper()
	srv, err := embeddednats.Start(embeddednats.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	read := func() []*jetstream.RawStreamMsg {
		ctx := context.Background()
		st, err := js.Stream(ctx, "IDEM")
		if err != nil {
			return nil // not created yet: nothing published
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []*jetstream.RawStreamMsg
		for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	return srv.ClientURL(), read
}

type event struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	CreatedAt   time.Time       `json:"created_at"`
	Payload     json.RawMessage `json:"payload"`
	PublishedAt *time.Time      `json:"published_at"`
}

// allEvents follows GET /v1/events from the start to the last page.
func allEvents(t *testing.T, base string, header ...string) []event {
	t.Helper()
	var out []event
	after := ""
	for {
		r := call(t, "GET", base+"/v1/events?limit=2&after="+after, "", nil, header...)
		mustStatus(t, r, http.StatusOK)
		var page struct {
			Data       []event `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Data...)
		if page.NextCursor == nil {
			return out
		}
		after = *page.NextCursor
	}
}

// Events are written with the change that causes them, listed in commit
// order, and published once each — none for a refused or duplicate request.
func TestEvents(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		natsURL, stream := startNATS(t)
		p, _ := serveDB(t, dialect, nil, "--publish", natsURL)
		u := p.URL
		bodies := map[string]string{}
		for _, id := range []string{"alice", "bob"} {
			r := call(t, "POST", u+"/v1/accounts", "acct-"+id, map[string]any{"id": id, "currency": "EUR"})
			mustStatus(t, r, 201)
			bodies["account.created/"+id] = string(r.Body)
		}
		account(t, u, "wallet", "EUR", "debits_must_not_exceed_credits")
		tr := call(t, "POST", u+"/v1/transfers", "pay-1", transfer("alice", "bob", 500))
		mustStatus(t, tr, 201)
		bodies["transfer.created"] = string(tr.Body)
		id := tr.json(t)["id"].(string)
		call(t, "POST", u+"/v1/transfers", "pay-1", transfer("alice", "bob", 500))                           // replay
		mustStatus(t, call(t, "POST", u+"/v1/transfers", "over-1", transfer("wallet", "bob", 1)), 422)       // refused
		mustStatus(t, call(t, "POST", u+"/v1/transfers/"+id+"/reversals", "rev-big", `{"amount":501}`), 422) // refused
		rev := call(t, "POST", u+"/v1/transfers/"+id+"/reversals", "rev-1", `{"amount":200,"reason":"refund"}`)
		mustStatus(t, rev, 201)
		bodies["transfer.reversed"] = string(rev.Body)

		var events []event
		waitFor(t, func() bool {
			events = allEvents(t, u)
			if len(events) != 5 {
				return false
			}
			for _, e := range events {
				if e.PublishedAt == nil {
					return false
				}
			}
			return true
		})
		wantTypes := []string{"account.created", "account.created", "account.created", "transfer.created", "transfer.reversed"}
		for i, e := range events {
			if e.Type != wantTypes[i] {
				t.Fatalf("event %d is %s, want %s (events %+v)", i, e.Type, wantTypes[i], events)
			}
		}
		// The payload is the resource as the API returned it.
		if string(events[0].Payload)+"\n" != bodies["account.created/alice"] ||
			string(events[3].Payload)+"\n" != bodies["transfer.created"] ||
			string(events[4].Payload)+"\n" != bodies["transfer.reversed"] {
			t.Fatalf("payloads differ from the API's answers:\n%s\n%s", events[3].Payload, bodies["transfer.created"])
		}

		// The stream holds exactly one message per event, under its id.
		msgs := stream()
		seen := map[string]int{}
		for _, m := range msgs {
			seen[m.Header.Get("Nats-Msg-Id")]++
		}
		if len(msgs) != len(events) {
			t.Fatalf("stream holds %d messages for %d events", len(msgs), len(events))
		}
		for _, e := range events {
			if seen[e.ID] != 1 {
				t.Fatalf("event %s (%s) is in the stream %d times", e.ID, e.Type, seen[e.ID])
			}
		}
		if msgs[3].Subject != "idem.default.transfer.created" {
			t.Fatalf("subject %q", msgs[3].Subject)
		}
		if r := call(t, "GET", u+"/v1/events?after=bogus", "", nil); r.Status != 400 || r.code(t) != "invalid_request" {
			t.Fatalf("bad cursor: %d %s", r.Status, r.Body)
		}
	})
}

// Events are a tenant's own.
func TestEventsTenantScoped(t *testing.T) {
	const keyA, keyB = "tenant-a-secret-0001", "tenant-b-secret-0002"
	natsURL, _ := startNATS(t)
	p, _ := serveDB(t, "sqlite", []string{"IDEM_API_KEYS=acme:" + keyA + ",globex:" + keyB}, "--publish", natsURL)
	mustStatus(t, call(t, "POST", p.URL+"/v1/accounts", "a", map[string]any{"id": "a", "currency": "EUR"}, "Authorization", "Bearer "+keyA), 201)
	waitFor(t, func() bool { return len(allEvents(t, p.URL, "Authorization", "Bearer "+keyA)) == 1 })
	if ev := allEvents(t, p.URL, "Authorization", "Bearer "+keyB); len(ev) != 0 {
		t.Fatalf("tenant B sees %d of A's events", len(ev))
	}
}
