package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/cmd/idem/internal/server"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
)

// service is the whole service on a real database, console included, as
// idem serve builds it: the console the server mounts is the one that
// hears of its replays.
type service struct {
	D       driver.Driver
	Outbox  *outbox.Outbox
	Console *console.Console
	URL     string
}

const (
	acmeKey   = "secret-acme-key-0123456789"
	globexKey = "secret-globex-key-0123456789"
)

// newService serves the API (tenants acme and globex, by API key) and the
// console (loopback, no admin key) on a fresh database of the dialect.
// No relay runs: a test publishes with relayOnce.
func newService(t *testing.T, dialect string) *service {
	t.Helper()
	return newServiceWith(t, dialect, config.Default())
}

func newServiceWith(t *testing.T, dialect string, cfg config.Config) *service {
	t.Helper()
	d := drivertest.Open(t, dialect)
	cfg.Relay = false
	keys, err := config.ParseAPIKeys("acme:" + acmeKey + ",globex:" + globexKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg.APIKeys = keys
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(context.Background(), cfg, d, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if srv.Console() == nil {
		t.Fatal("the server built no console")
	}
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &service{D: d, Outbox: ob, Console: srv.Console(), URL: hs.URL}
}

// call sends a JSON POST to the API as the tenant of apiKey and returns
// the status and whether the answer was a replay.
func (s *service) call(t *testing.T, apiKey, path, idemKey string, body, out any) (int, bool) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", idemKey)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, rb)
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true"
}

// chargedTwice is a tenant's story for the console: a wallet funded with
// 2000, charged 500 under charge-1 (its event published), the charge sent
// again under the same key (a replay), and the charge reversed under
// refund-1 (its event still pending).
type chargedTwice struct {
	Charge, Reversal ledger.Transfer
}

func (s *service) chargeTwice(t *testing.T, apiKey string) chargedTwice {
	t.Helper()
	var c chargedTwice
	s.call(t, apiKey, "/v1/accounts", "acct-bank", map[string]any{"id": "bank", "currency": "EUR"}, nil)
	s.call(t, apiKey, "/v1/accounts", "acct-wallet", map[string]any{"id": "wallet", "currency": "EUR"}, nil)
	s.call(t, apiKey, "/v1/accounts", "acct-merchant", map[string]any{"id": "merchant", "currency": "EUR"}, nil)
	s.call(t, apiKey, "/v1/transfers", "fund-1", map[string]any{"debit_account_id": "bank", "credit_account_id": "wallet",
		"amount": 2000, "currency": "EUR"}, nil)
	charge := map[string]any{"debit_account_id": "wallet", "credit_account_id": "merchant", "amount": 500, "currency": "EUR"}
	s.call(t, apiKey, "/v1/transfers", "charge-1", charge, &c.Charge)
	s.relayOnce(t, acceptingBroker{})
	var again ledger.Transfer
	if _, replayed := s.call(t, apiKey, "/v1/transfers", "charge-1", charge, &again); !replayed || again.ID != c.Charge.ID {
		t.Fatalf("the second charge-1 was not a replay of %s: replayed %v, id %s", c.Charge.ID, replayed, again.ID)
	}
	s.call(t, apiKey, "/v1/transfers/"+c.Charge.ID+"/reversals", "refund-1", map[string]any{"reason": "charged twice"}, &c.Reversal)
	return c
}

// acceptingBroker takes every message.
type acceptingBroker struct{}

func (acceptingBroker) Publish(_ context.Context, msgs []outbox.Message) []error {
	return make([]error, len(msgs))
}
func (acceptingBroker) Close() error { return nil }

// switchableBroker is down (every publish fails as unavailable) until up
// is set.
type switchableBroker struct {
	mu sync.Mutex
	up bool
}

func (b *switchableBroker) set(up bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.up = up
}

func (b *switchableBroker) Publish(_ context.Context, msgs []outbox.Message) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := make([]error, len(msgs))
	if !b.up {
		for i := range errs {
			errs[i] = outbox.BrokerUnavailable(errors.New("nats: no servers available for connection"))
		}
	}
	return errs
}
func (b *switchableBroker) Close() error { return nil }

// relayOnce runs a relay with pub until the outbox has nothing unsent,
// then stops it.
func (s *service) relayOnce(t *testing.T, pub outbox.Publisher) {
	t.Helper()
	ctx := context.Background()
	r, err := outbox.NewRelay(s.D, outbox.RelayConfig{Publisher: pub, PollInterval: 10 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := s.Outbox.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Unsent == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay left %d messages unsent", st.Unsent)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// section returns the page from the first start to the end that follows
// it: a rough cut, enough to check what one timeline row says.
func section(t *testing.T, page, start, end string) string {
	t.Helper()
	i := strings.Index(page, start)
	if i < 0 {
		t.Fatalf("page has no %q:\n%s", start, page)
	}
	rest := page[i:]
	if j := strings.Index(rest[len(start):], end); j >= 0 {
		return rest[:len(start)+j]
	}
	return rest
}

var timelineRowRE = regexp.MustCompile(`<li class="tl (tl-[a-z]+)[^"]*"`)

// timelineRows lists the classes of the page's timeline rows, in order.
func timelineRows(page string) []string {
	var out []string
	for _, m := range timelineRowRE.FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestStoryOfACharge tells the story of a charge with a replay and a
// reversal, from its Idempotency-Key, its transfer id and its event id, on
// both databases: every row of the timeline is there and says what the
// database holds.
func TestStoryOfACharge(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			s := newService(t, dialect)
			c := s.chargeTwice(t, acmeKey)
			recs, err := inspect.Keys(context.Background(), s.D, time.Now(), "acme", "POST /v1/transfers", "charge-1")
			if err != nil || len(recs) != 1 {
				t.Fatalf("charge-1's record: %v %v", recs, err)
			}
			rec := recs[0]

			status, page := get(t, s.URL+"/ui/story?tenant=acme&q=charge-1")
			if status != http.StatusOK {
				t.Fatalf("story: %d\n%s", status, page)
			}
			// The timeline: arrival, answer, ledger rows, the charge's
			// event and its replay; then the reversal with its own
			// arrival, answer, ledger rows and event.
			want := []string{"tl-arrival", "tl-answer", "tl-ledger", "tl-event", "tl-replay",
				"tl-reversal", "tl-arrival", "tl-answer", "tl-ledger", "tl-event"}
			if got := timelineRows(page); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("timeline rows %v, want %v\n%s", got, want, page)
			}
			if !strings.Contains(page, `id="story-matched">Found by the Idempotency-Key of POST /v1/transfers`) {
				t.Errorf("the page does not say what it matched")
			}
			arrival := section(t, page, `<li class="tl tl-arrival">`, `</li>`)
			for _, w := range []string{rec.Fingerprint, `class="status">201<`, inspect.Time(rec.FirstSeen), "POST /v1/transfers"} {
				if !strings.Contains(arrival, w) {
					t.Errorf("arrival lacks %q:\n%s", w, arrival)
				}
			}
			answer := section(t, page, `<li class="tl tl-answer">`, `</li>`)
			for _, w := range []string{
				`<a class="json-id" href="/ui/transfers/` + c.Charge.ID + `?tenant=acme">&#34;` + c.Charge.ID + `&#34;</a>`,
				`<a class="json-id" href="/ui/accounts?id=wallet&amp;tenant=acme">&#34;wallet&#34;</a>`,
				"\n  &#34;amount&#34;: 500,\n",
			} {
				if !strings.Contains(answer, w) {
					t.Errorf("stored answer lacks %q:\n%s", w, answer)
				}
			}
			ledgerRows := section(t, page, `<li class="tl tl-ledger">`, `</li>`)
			for _, w := range []string{c.Charge.ID, "15.00 EUR (1500)", "5.00 EUR (500)", ">wallet<", ">merchant<", ">debit<", ">credit<"} {
				if !strings.Contains(ledgerRows, w) {
					t.Errorf("ledger rows lack %q:\n%s", w, ledgerRows)
				}
			}
			if n := strings.Count(ledgerRows, `<tr class="entry">`); n != 2 {
				t.Errorf("ledger rows: %d entries, want 2", n)
			}
			chargeEvent := section(t, page, `<li class="tl tl-event`, `</li>`)
			if !strings.Contains(chargeEvent, "transfer.created") || !strings.Contains(chargeEvent, "state-published") {
				t.Errorf("the charge's event is not shown published:\n%s", chargeEvent)
			}
			reversal := section(t, page, `<li class="tl tl-reversal"`, `<p class="hint">Events:`)
			for _, w := range []string{c.Reversal.ID, "refund-1", "charged twice", "transfer.reversed", "state-pending", "20.00 EUR (2000)"} {
				if !strings.Contains(reversal, w) {
					t.Errorf("reversal lacks %q:\n%s", w, reversal)
				}
			}
			if !strings.Contains(section(t, page, `<li class="tl tl-replay">`, `</li>`), "charge-1") {
				t.Errorf("the replay row does not name the key")
			}

			// By the transfer id: the same story, its request found by the
			// stored answer.
			_, page = get(t, s.URL+"/ui/story?tenant=acme&q="+c.Charge.ID)
			if got := timelineRows(page); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("by transfer id: timeline rows %v, want %v", got, want)
			}
			if !strings.Contains(page, "Found by the transfer id") || !strings.Contains(page, rec.Fingerprint) {
				t.Errorf("by transfer id: the page does not say so or lacks the arrival")
			}

			// By the reversal's event id: the same story, that event
			// highlighted.
			var evID string
			b, err := s.D.OutboxBrowse(context.Background(), s.D.Reader(), &driver.OutboxBrowseParams{Tenant: "acme",
				Type: "transfer.reversed", Limit: 1, ScanLimit: 1000})
			if err != nil || len(b.Rows) != 1 {
				t.Fatalf("the reversal's event: %v %v", b, err)
			}
			evID = b.Rows[0].ID
			_, page = get(t, s.URL+"/ui/story?tenant=acme&q="+evID)
			if !strings.Contains(page, "Found by the id of a transfer.reversed event") ||
				!strings.Contains(page, `class="tl tl-event focus" id="event-`+evID+`"`) {
				t.Errorf("by event id: not found or not highlighted:\n%s", page)
			}
		})
	}
}

// TestStoryTenantIsolation: a tenant's story is never told under another
// tenant, whatever names it — key, transfer id or event id — even where
// both tenants used the same key.
func TestStoryTenantIsolation(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			s := newService(t, dialect)
			acme := s.chargeTwice(t, acmeKey)
			globex := s.chargeTwice(t, globexKey)

			_, page := get(t, s.URL+"/ui/story?tenant=globex&q=charge-1")
			if strings.Contains(page, acme.Charge.ID) || !strings.Contains(page, globex.Charge.ID) {
				t.Errorf("globex's charge-1 story shows acme's transfer (or not its own)")
			}
			var acmeEvent string
			b, err := s.D.OutboxBrowse(context.Background(), s.D.Reader(), &driver.OutboxBrowseParams{Tenant: "acme",
				Type: "transfer.created", Limit: 1, ScanLimit: 1000})
			if err != nil || len(b.Rows) != 1 {
				t.Fatalf("acme's event: %v %v", b, err)
			}
			acmeEvent = b.Rows[0].ID
			for _, q := range []string{acme.Charge.ID, acme.Reversal.ID, acmeEvent} {
				status, page := get(t, s.URL+"/ui/story?tenant=globex&q="+url.QueryEscape(q))
				if status != http.StatusNotFound || !strings.Contains(page, `id="no-story"`) || strings.Contains(page, `id="timeline"`) {
					t.Errorf("globex asking for acme's %s: %d\n%s", q, status, page)
				}
			}
			status, page := get(t, s.URL+"/ui/story?tenant=initech&q=charge-1")
			if status != http.StatusNotFound || strings.Contains(page, acme.Charge.ID) || strings.Contains(page, globex.Charge.ID) {
				t.Errorf("a tenant that never used charge-1: %d", status)
			}
		})
	}
}

// TestStoryAmbiguous: a key used for two operations names two requests;
// the page lists both, and each link tells one.
func TestStoryAmbiguous(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			s := newService(t, dialect)
			s.call(t, acmeKey, "/v1/accounts", "same-key", map[string]any{"id": "a1", "currency": "EUR"}, nil)
			s.call(t, acmeKey, "/v1/accounts", "acct-2", map[string]any{"id": "a2", "currency": "EUR"}, nil)
			var tr ledger.Transfer
			s.call(t, acmeKey, "/v1/transfers", "same-key", map[string]any{"debit_account_id": "a1", "credit_account_id": "a2",
				"amount": 100, "currency": "EUR"}, &tr)

			status, page := get(t, s.URL+"/ui/story?tenant=acme&q=same-key")
			if status != http.StatusOK || !strings.Contains(page, `id="story-matches"`) || strings.Contains(page, `id="timeline"`) {
				t.Fatalf("ambiguous key: %d\n%s", status, page)
			}
			for _, op := range []string{"accounts", "transfers"} {
				// html/template writes the "+" of a space as &#43;.
				link := "/ui/story?match=key%3APOST&#43;%2Fv1%2F" + op + "&amp;q=same-key&amp;tenant=acme"
				if !strings.Contains(page, `href="`+link+`"`) {
					t.Errorf("no link to the %s match:\n%s", op, page)
				}
			}
			_, page = get(t, s.URL+"/ui/story?"+url.Values{"tenant": {"acme"}, "q": {"same-key"}, "match": {"key:POST /v1/transfers"}}.Encode())
			if !strings.Contains(page, `id="timeline"`) || !strings.Contains(page, tr.ID) {
				t.Errorf("the transfer match does not tell the transfer's story:\n%s", page)
			}
			_, page = get(t, s.URL+"/ui/story?"+url.Values{"tenant": {"acme"}, "q": {"same-key"}, "match": {"key:POST /v1/accounts"}}.Encode())
			if !strings.Contains(page, "account.created") || strings.Contains(page, `class="tl tl-ledger"`) {
				t.Errorf("the account match does not tell the account's story:\n%s", page)
			}
		})
	}
}

// TestStoryOfAWebhookDelivery: a provider's event id tells the delivery's
// story: its dedupe record and the webhook.* event it enqueued, for an id
// kept as is and for one too long to be a key (kept hashed).
func TestStoryOfAWebhookDelivery(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.Webhooks = []byte("webhooks:\n  stripe-main:\n    provider: stripe\n    secrets: [whsec_story_test]\n    tenant: acme\n")
			s := newServiceWith(t, dialect, cfg)
			long := "evt_" + strings.Repeat("x", 300)
			for _, id := range []string{"evt_story_1", long} {
				body := `{"id":"` + id + `","type":"charge.succeeded","data":{"object":{"amount":500}}}`
				p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: []byte(body),
					Secret: "whsec_story_test", Timestamp: time.Now()})
				req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/webhooks/stripe-main", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Stripe-Signature", p.Header)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("delivery %s: %d", id[:12], resp.StatusCode)
				}

				status, page := get(t, s.URL+"/ui/story?tenant=acme&q="+url.QueryEscape(id))
				if status != http.StatusOK {
					t.Fatalf("story of %s: %d", id[:12], status)
				}
				if !strings.Contains(page, "Found by the event id of a delivery to webhook endpoint stripe-main") ||
					!strings.Contains(page, "webhook.stripe.charge.succeeded") || !strings.Contains(page, "webhook:stripe-main") {
					t.Errorf("story of %s:\n%s", id[:12], page)
				}
				if got := timelineRows(page); strings.Join(got, " ") != "tl-arrival tl-answer tl-event" {
					t.Errorf("story of %s: timeline rows %v", id[:12], got)
				}
				if status, _ := get(t, s.URL+"/ui/story?tenant=globex&q="+url.QueryEscape(id)); status != http.StatusNotFound {
					t.Errorf("another tenant's webhook delivery: %d", status)
				}
			}
		})
	}
}
