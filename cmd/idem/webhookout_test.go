package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/idemclient"
)

// hookReceiver records the webhook-id of every request it gets.
type hookReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	ids map[string]int // webhook-id → requests
}

func newHookReceiver(t *testing.T) *hookReceiver {
	rc := &hookReceiver{ids: map[string]int{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond) // so that kills land mid-delivery
		rc.mu.Lock()
		rc.ids[r.Header.Get("webhook-id")]++
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *hookReceiver) has(ids []string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, id := range ids {
		if rc.ids[id] == 0 {
			return false
		}
	}
	return true
}

// Relays SIGKILLed again and again while they fan out and deliver to three
// endpoints: in the end every event reached every endpoint whose filter
// matches, under its one webhook-id (the event's id), and no other event
// reached it.
func TestWebhookEndpointsSurviveRelaySIGKILL(t *testing.T) {
	db := dbURL(t, "postgres")
	allow := "--webhook-allow-networks=127.0.0.0/8"
	srv := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--relay=false", allow)
	all, transfers, accounts := newHookReceiver(t), newHookReceiver(t), newHookReceiver(t)
	for i, ep := range []struct {
		rc    *hookReceiver
		types []string
	}{{all, nil}, {transfers, []string{"transfer.*"}}, {accounts, []string{"account.created"}}} {
		mustStatus(t, call(t, "POST", srv.URL+"/v1/webhook-endpoints", fmt.Sprintf("ep-%d", i),
			map[string]any{"url": ep.rc.URL + "/hook", "event_types": ep.types}), http.StatusCreated)
	}
	account(t, srv.URL, "k1", "EUR")
	account(t, srv.URL, "k2", "EUR")
	const n = 60
	for i := range n {
		mustStatus(t, call(t, "POST", srv.URL+"/v1/transfers", fmt.Sprintf("kt-%d", i),
			map[string]any{"debit_account_id": "k1", "credit_account_id": "k2", "amount": 1, "currency": "EUR"}), http.StatusCreated)
	}
	var page struct {
		Data []struct{ ID, Type string } `json:"data"`
	}
	waitFor(t, func() bool { // listed once committed (docs/api.md)
		_ = json.Unmarshal(call(t, "GET", srv.URL+"/v1/events?limit=1000", "", nil).Body, &page)
		return len(page.Data) == n+2
	})
	var allIDs, transferIDs, accountIDs []string
	for _, e := range page.Data {
		allIDs = append(allIDs, e.ID)
		if strings.HasPrefix(e.Type, "transfer.") {
			transferIDs = append(transferIDs, e.ID)
		} else {
			accountIDs = append(accountIDs, e.ID)
		}
	}

	relayArgs := []string{"relay", "--db", db, "--publish", "stdout", "--relay-lease", "1s", "--relay-poll", "10ms",
		allow, "--webhook-timeout", "500ms", "--webhook-schedule", "0,50ms,50ms,50ms,50ms,50ms,50ms,50ms"}
	for i := range 5 {
		p := launch(t, false, nil, relayArgs...)
		time.Sleep(time.Duration(150+100*i) * time.Millisecond)
		p.signal(syscall.SIGKILL)
		_ = p.wait(30 * time.Second)
	}
	launch(t, false, nil, relayArgs...)
	deadline := time.Now().Add(90 * time.Second) // leases of killed deliverers last 11s
	for !(all.has(allIDs) && transfers.has(transferIDs) && accounts.has(accountIDs)) {
		if time.Now().After(deadline) {
			t.Fatalf("not every event reached its endpoints: all %d/%d, transfers %d/%d, accounts %d/%d",
				len(all.ids), len(allIDs), len(transfers.ids), len(transferIDs), len(accounts.ids), len(accountIDs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		rc   *hookReceiver
		want []string
	}{{all, allIDs}, {transfers, transferIDs}, {accounts, accountIDs}} {
		c.rc.mu.Lock()
		if len(c.rc.ids) != len(c.want) {
			t.Errorf("%s got %d distinct webhook-ids, want %d", c.rc.URL, len(c.rc.ids), len(c.want))
		}
		c.rc.mu.Unlock()
	}
}

// The Go client drives the endpoints of a real idem serve: register,
// receive, read the attempts, rotate, replay, delete.
func TestWebhookEndpointsGoClient(t *testing.T) {
	srv, _ := serveDB(t, "sqlite", nil, "--webhook-allow-networks=127.0.0.0/8", "--relay-poll=10ms")
	rc := newHookReceiver(t)
	c, err := idemclient.New(idemclient.Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ep, err := c.CreateWebhookEndpoint(ctx, idemclient.WebhookEndpointParams{URL: rc.URL + "/hook", EventTypes: []string{"account.*"}})
	if err != nil || ep.Status != http.StatusCreated || !strings.HasPrefix(ep.Secret, "whsec_") {
		t.Fatalf("create: %+v, %v", ep, err)
	}
	account(t, srv.URL, "gc1", "EUR")
	var events struct {
		Data []struct{ ID string } `json:"data"`
	}
	waitFor(t, func() bool {
		_ = json.Unmarshal(call(t, "GET", srv.URL+"/v1/events", "", nil).Body, &events)
		return len(events.Data) == 1 && rc.has([]string{events.Data[0].ID})
	})
	var att *idemclient.WebhookAttemptPage
	waitFor(t, func() bool {
		att, err = c.WebhookAttempts(ctx, ep.ID, idemclient.WebhookAttemptsParams{})
		return err == nil && len(att.Data) == 1
	})
	if att.Data[0].Status != http.StatusOK || att.Data[0].EventID != events.Data[0].ID {
		t.Errorf("attempt %+v", att.Data[0])
	}
	rot, err := c.RotateWebhookEndpointSecret(ctx, ep.ID, "")
	if err != nil || rot.SecretsActive != 2 || rot.Secret == ep.Secret {
		t.Fatalf("rotate: %+v, %v", rot, err)
	}
	since := time.Now().Add(-time.Hour)
	rp, err := c.ReplayWebhookEndpoint(ctx, ep.ID, idemclient.WebhookReplayParams{Since: &since})
	if err != nil || rp.Deliveries != 1 {
		t.Fatalf("replay: %+v, %v", rp, err)
	}
	waitFor(t, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return rc.ids[events.Data[0].ID] == 2
	})
	off := false
	if up, err := c.UpdateWebhookEndpoint(ctx, ep.ID, idemclient.WebhookEndpointPatch{Enabled: &off}); err != nil || up.Enabled {
		t.Fatalf("update: %+v, %v", up, err)
	}
	if err := c.DeleteWebhookEndpoint(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	page, err := c.WebhookEndpoints(ctx, idemclient.PageParams{})
	if err != nil || len(page.Data) != 0 {
		t.Fatalf("list after delete: %+v, %v", page, err)
	}
	if _, err := c.GetWebhookEndpoint(ctx, ep.ID); err == nil {
		t.Fatal("the deleted endpoint is still read")
	}
}
