package console_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookout"
)

// The webhooks page shows a tenant's endpoint failing, with its attempts;
// its replay button, CSRF-protected, makes the delivery pending again.
func TestWebhooksPageAndReplay(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	ctx := context.Background()
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "receiver down", http.StatusInternalServerError)
	}))
	t.Cleanup(rc.Close)
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	eps, err := webhookout.New(d, webhookout.Config{AllowNetworks: allow})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := eps.Create(ctx, tx, "acme", webhookout.NewEndpoint{URL: rc.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := webhookout.NewDeliverer(d, webhookout.DelivererConfig{AllowNetworks: allow, PollInterval: 10 * time.Millisecond,
		Schedule: []time.Duration{0}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fan, err := webhookout.NewFanOut(d, webhookout.FanOutConfig{Written: w.Notify})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	m := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "transfer.created", Payload: json.RawMessage(`{}`), CreatedAt: time.Now()}
	if errs := fan.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	key := driver.WebhookDeliveryKey{EndpointID: ep.ID, EventID: m.ID}
	state := func() *driver.WebhookDeliveryRow {
		r, err := d.WebhookDeliveryGet(ctx, d.Reader(), &driver.WebhookDeliveryGetParams{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	deadline := time.Now().Add(20 * time.Second)
	for state().State != driver.WebhookFailed {
		if time.Now().After(deadline) {
			t.Fatal("the delivery did not fail")
		}
		time.Sleep(10 * time.Millisecond)
	}

	c, err := console.New(console.Config{Driver: d, Ledger: mustLedger(t, d), Endpoints: eps, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	page := do(t, h, http.MethodGet, "/ui/webhooks?tenant=acme&endpoint="+ep.ID, loopback, nil)
	body := page.Body.String()
	for _, want := range []string{ep.ID, "failing since", "0% of 1", m.ID, "answered 500", "/ui/webhooks/replay"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	form := url.Values{"tenant": {"acme"}, "endpoint": {ep.ID}, "event_id": {m.ID}}
	if r := do(t, h, http.MethodPost, "/ui/webhooks/replay", loopback, form); r.Code != http.StatusForbidden {
		t.Errorf("replay without a CSRF token: %d", r.Code)
	}
	if s := state(); s.State != driver.WebhookFailed {
		t.Fatalf("a refused replay changed the delivery: %s", s.State)
	}
	form.Set("csrf", csrfOf(t, body))
	if r := do(t, h, http.MethodPost, "/ui/webhooks/replay", loopback, form); r.Code != http.StatusSeeOther {
		t.Fatalf("replay: %d %s", r.Code, r.Body)
	}
	// Made pending again; the deliverer attempts it once more (and it fails
	// again, the receiver still down).
	deadline = time.Now().Add(20 * time.Second)
	for state().Attempts != 1 || state().State != driver.WebhookFailed || len(attemptsOf(t, eps, d, ep.ID)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the replay was not attempted: %+v", state())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func attemptsOf(t *testing.T, eps *webhookout.Endpoints, d driver.Driver, id string) []webhookout.Attempt {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	att, _, err := eps.Attempts(ctx, tx, "acme", id, webhookout.AttemptQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return att
}
