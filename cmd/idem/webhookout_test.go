package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/idemhq/idem/idemclient"
	"github.com/idemhq/idem/internal/drivertest"
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

// exampleReceiver is examples/webhookreceiver, built and run as its own
// process on its own database, behind a proxy that verifies every
// delivery with the standard-webhooks library before passing it on and
// counts what the receiver answered. Of every third event the proxy loses
// the receiver's first answer, so that the receiver gets it again however
// the kills fall.
type exampleReceiver struct {
	*httptest.Server
	db          string // the receiver's database
	mu          sync.Mutex
	ok          map[string]int // webhook-id → 2xx answers
	refused     int            // deliveries the library did not verify
	notOK       int            // answers of the receiver that were not 2xx
	wh          *standardwebhooks.Webhook
	receiverURL string
}

var (
	receiverOnce sync.Once
	receiverBin  string
	receiverErr  error
)

// newExampleReceiver starts the proxy; start starts the receiver behind
// it, once the endpoint's secret is known.
func newExampleReceiver(t *testing.T) *exampleReceiver {
	rc := &exampleReceiver{ok: map[string]int{}, db: drivertest.PostgresURL(t)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond) // so that kills land mid-delivery
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("webhook-id")
		if err := rc.wh.Verify(body, r.Header); err != nil {
			rc.mu.Lock()
			rc.refused++
			rc.mu.Unlock()
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, rc.receiverURL+"/hooks", bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		rc.mu.Lock()
		status := resp.StatusCode
		if status/100 == 2 {
			rc.ok[id]++
			if rc.ok[id] == 1 && len(rc.ok)%3 == 0 {
				// The answer lost on its way back: the sender tries
				// again, and the receiver sees the event twice.
				status = http.StatusServiceUnavailable
			}
		} else if r.Context().Err() == nil {
			rc.notOK++
		}
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *exampleReceiver) start(t *testing.T, secret string) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	rc.wh = wh
	receiverOnce.Do(func() {
		receiverBin = filepath.Join(binDirOf(t), "webhookreceiver")
		out, err := exec.Command("go", "build", "-o", receiverBin, "github.com/idemhq/idem/examples/webhookreceiver").CombinedOutput()
		if err != nil {
			receiverErr = fmt.Errorf("go build webhookreceiver: %v\n%s", err, out)
		}
	})
	if receiverErr != nil {
		t.Fatal(receiverErr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(receiverBin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+rc.db, "WEBHOOK_SECRET="+secret, "ADDR="+addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("webhookreceiver stderr:\n%s", stderr.String())
		}
	})
	rc.receiverURL = "http://" + addr
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// has reports whether every event of ids was applied: answered 2xx.
func (rc *exampleReceiver) has(ids []string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, id := range ids {
		if rc.ok[id] == 0 {
			return false
		}
	}
	return true
}

// binDirOf is the directory the idem binary is built in, built first.
func binDirOf(t *testing.T) string {
	return filepath.Dir(binary(t))
}

// Relays SIGKILLed again and again while they fan out and deliver to three
// endpoints: in the end every event reached every endpoint whose filter
// matches, under its one webhook-id (the event's id), and no other event
// reached it. The transfers' endpoint is examples/webhookreceiver (each
// delivery verified by the standard-webhooks library on the way): it
// applied each transfer exactly once, one row of its own table per event,
// though it got some twice, and answered every delivery with a 2xx.
func TestWebhookEndpointsSurviveRelaySIGKILL(t *testing.T) {
	db := dbURL(t, "postgres")
	allow := "--webhook-allow-networks=127.0.0.0/8"
	srv := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--relay=false", allow)
	all, accounts := newHookReceiver(t), newHookReceiver(t)
	transfers := newExampleReceiver(t)
	for i, ep := range []struct {
		url   string
		types []string
	}{{all.URL, nil}, {transfers.URL, []string{"transfer.*"}}, {accounts.URL, []string{"account.created"}}} {
		created := call(t, "POST", srv.URL+"/v1/webhook-endpoints", fmt.Sprintf("ep-%d", i),
			map[string]any{"url": ep.url + "/hook", "event_types": ep.types})
		mustStatus(t, created, http.StatusCreated)
		if ep.url == transfers.URL {
			transfers.start(t, created.json(t)["secret"].(string))
		}
	}
	account(t, srv.URL, "k1", "EUR")
	account(t, srv.URL, "k2", "EUR")
	const n = 60
	for i := range n {
		mustStatus(t, call(t, "POST", srv.URL+"/v1/transfers", fmt.Sprintf("kt-%d", i),
			map[string]any{"debit_account_id": "k1", "credit_account_id": "k2", "amount": 1, "currency": "EUR"}), http.StatusCreated)
	}
	// The events, read from the outbox table: GET /v1/events lists an
	// event only once every transaction older than it has ended, on the
	// whole cluster, which a shared test server's other sessions delay.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var allIDs, transferIDs, accountIDs []string
	rows, err := conn.Query(ctx, `SELECT id::text, type FROM idem_outbox ORDER BY created_at`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, typ string
		if err := rows.Scan(&id, &typ); err != nil {
			t.Fatal(err)
		}
		allIDs = append(allIDs, id)
		if strings.HasPrefix(typ, "transfer.") {
			transferIDs = append(transferIDs, id)
		} else {
			accountIDs = append(accountIDs, id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(transferIDs) != n || len(accountIDs) != 2 {
		t.Fatalf("the outbox holds %d transfer and %d other events, want %d and 2", len(transferIDs), len(accountIDs), n)
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
				len(all.ids), len(allIDs), len(transfers.ok), len(transferIDs), len(accounts.ids), len(accountIDs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		rc   *hookReceiver
		want []string
	}{{all, allIDs}, {accounts, accountIDs}} {
		c.rc.mu.Lock()
		if len(c.rc.ids) != len(c.want) {
			t.Errorf("%s got %d distinct webhook-ids, want %d", c.rc.URL, len(c.rc.ids), len(c.want))
		}
		c.rc.mu.Unlock()
	}

	// The example receiver's effects: one row per transfer event, each
	// event once, and no delivery it refused or failed.
	transfers.mu.Lock()
	refused, notOK, delivered := transfers.refused, transfers.notOK, 0
	for _, k := range transfers.ok {
		delivered += k
	}
	if len(transfers.ok) != len(transferIDs) {
		t.Errorf("the example receiver accepted %d distinct webhook-ids, want %d", len(transfers.ok), len(transferIDs))
	}
	transfers.mu.Unlock()
	if refused != 0 || notOK != 0 {
		t.Errorf("%d deliveries failed the standard-webhooks verification, %d answers were not 2xx; want none", refused, notOK)
	}
	rconn, err := pgx.Connect(ctx, transfers.db)
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close(ctx)
	applied := map[string]int{}
	rows, err = rconn.Query(ctx, `SELECT event_id FROM received_transfers`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		applied[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range transferIDs {
		if applied[id] != 1 {
			t.Errorf("event %s applied %d times by the example receiver, want 1", id, applied[id])
		}
	}
	if len(applied) != len(transferIDs) {
		t.Errorf("the example receiver applied %d events, want %d", len(applied), len(transferIDs))
	}
	if delivered <= len(transferIDs) {
		t.Errorf("the example receiver accepted %d deliveries of %d events: none twice", delivered, len(transferIDs))
	}
	t.Logf("the example receiver applied %d events from %d accepted deliveries", len(applied), delivered)
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
