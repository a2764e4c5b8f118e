package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/webhook"
)

const webhookTestConfig = `
webhooks:
  stripe-main:
    provider: stripe
    secrets: [whsec_handler_test]
    tenant: acme
  slack-app:
    provider: slack
    secrets: [slack-signing-secret]
  gh:
    provider: github
    secrets: [gh-secret]
  shop:
    provider: shopify
    secrets: [shop-secret]
`

func newWebhookServer(t *testing.T, d driver.Driver) *Server {
	t.Helper()
	cfg := config.Default()
	cfg.Relay = false
	cfg.Webhooks = []byte(webhookTestConfig)
	s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// deliverStripe signs body with stripe-go as Stripe would, now, and posts
// it to the endpoint through the service's handler.
func deliverStripe(t *testing.T, s *Server, endpoint, secret, body string) *httptest.ResponseRecorder {
	t.Helper()
	p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: []byte(body), Secret: secret, Timestamp: time.Now()})
	r := httptest.NewRequest(http.MethodPost, "/v1/webhooks/"+endpoint, strings.NewReader(body))
	r.Header.Set("Stripe-Signature", p.Header)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}

func countRows(t *testing.T, d driver.Driver, query string, args ...any) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A registered Go handler runs once, in the delivery's transaction: its row,
// the dedupe key and the webhook.* event commit together. A handler that
// fails rolls all three back and the delivery is answered 503, so the
// provider retries; the retry runs it again and stores everything once.
func TestWebhookHandlers(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE handled (event_id TEXT PRIMARY KEY, type TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}

		s := newWebhookServer(t, d)
		var paidRuns, failedRuns atomic.Int32
		insert := func(ctx context.Context, tx driver.Tx, e webhook.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO handled (event_id, type) VALUES ($1, $2)`, e.ID, e.Type)
			return err
		}
		s.HandleWebhook("stripe", "invoice.paid", func(ctx context.Context, tx driver.Tx, e webhook.Event) error {
			paidRuns.Add(1)
			return insert(ctx, tx, e)
		})
		s.HandleWebhook("stripe", "charge.failed", func(ctx context.Context, tx driver.Tx, e webhook.Event) error {
			// The row is written before the failure: the rollback must undo it.
			if err := insert(ctx, tx, e); err != nil {
				return err
			}
			if failedRuns.Add(1) == 1 {
				return errors.New("downstream bookkeeping not ready")
			}
			return nil
		})
		handled := func(id string) int {
			return countRows(t, d, `SELECT count(*) FROM handled WHERE event_id = $1`, id)
		}
		events := func(typ string) int {
			return countRows(t, d, `SELECT count(*) FROM idem_outbox WHERE tenant = $1 AND type = $2`, "acme", typ)
		}
		key := func(id string) error {
			_, err := s.webhooks.keeper.Lookup(ctx, idem.Key{Scope: "acme", Operation: "webhook:stripe-main", Key: id})
			return err
		}

		paid := `{"id":"evt_paid_1","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","note":"<b>&</b>"}}}`
		for i, wantReplayed := range []string{"", "true", "true"} {
			w := deliverStripe(t, s, "stripe-main", "whsec_handler_test", paid)
			if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != wantReplayed {
				t.Fatalf("delivery %d: %d replayed=%q %s", i, w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
			}
			if got := w.Body.String(); got != `{"event_id":"evt_paid_1","received":true}`+"\n" {
				t.Fatalf("delivery %d answered %q", i, got)
			}
		}
		if paidRuns.Load() != 1 || handled("evt_paid_1") != 1 || events("webhook.stripe.invoice.paid") != 1 {
			t.Fatalf("handler ran %d times, %d rows, %d events", paidRuns.Load(), handled("evt_paid_1"), events("webhook.stripe.invoice.paid"))
		}
		var payload []byte
		if err := d.Reader().QueryRow(ctx, `SELECT payload FROM idem_outbox WHERE type = $1`, "webhook.stripe.invoice.paid").Scan(&payload); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Provider, EventID, Type string
			Body                    map[string]any
		}
		if err := json.Unmarshal(payload, &got); err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		_ = json.Unmarshal([]byte(paid), &want)
		if got.Provider != "stripe" || got.Type != "invoice.paid" || !jsonEqual(got.Body, want) {
			t.Fatalf("payload %s", payload)
		}
		if !strings.Contains(string(payload), `"event_id":"evt_paid_1"`) {
			t.Fatalf("payload %s has no event_id", payload)
		}

		failed := `{"id":"evt_failed_1","object":"event","type":"charge.failed","data":{"object":{"id":"ch_1"}}}`
		w := deliverStripe(t, s, "stripe-main", "whsec_handler_test", failed)
		if w.Code != 503 || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"code":"handler_failed"`) {
			t.Fatalf("failing handler: %d %v %s", w.Code, w.Header(), w.Body)
		}
		if handled("evt_failed_1") != 0 || events("webhook.stripe.charge.failed") != 0 || !errors.Is(key("evt_failed_1"), driver.ErrNotFound) {
			t.Fatalf("a failed handler left rows %d, events %d, key %v", handled("evt_failed_1"), events("webhook.stripe.charge.failed"), key("evt_failed_1"))
		}
		w = deliverStripe(t, s, "stripe-main", "whsec_handler_test", failed)
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry: %d %s", w.Code, w.Body)
		}
		if failedRuns.Load() != 2 || handled("evt_failed_1") != 1 || events("webhook.stripe.charge.failed") != 1 || key("evt_failed_1") != nil {
			t.Fatalf("retry: runs %d, rows %d, events %d, key %v", failedRuns.Load(), handled("evt_failed_1"), events("webhook.stripe.charge.failed"), key("evt_failed_1"))
		}

		// An event type without a handler is recorded only; the key is kept
		// for the webhook retention, not the service's 24h.
		w = deliverStripe(t, s, "stripe-main", "whsec_handler_test", `{"id":"evt_other","type":"customer.created"}`)
		if w.Code != 200 || events("webhook.stripe.customer.created") != 1 {
			t.Fatalf("unhandled type: %d %s", w.Code, w.Body)
		}
		rec, err := s.webhooks.keeper.Lookup(ctx, idem.Key{Scope: "acme", Operation: "webhook:stripe-main", Key: "evt_other"})
		if err != nil || rec.ExpiresAt.Before(time.Now().Add(WebhookRetention-time.Hour)) {
			t.Fatalf("key kept until %v (%v)", rec, err)
		}
	})
}

// createHandled makes the table the tests' handlers write their side
// effect to: one row per event id they handled.
func createHandled(t *testing.T, d driver.Driver) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, `CREATE TABLE handled (event_id TEXT PRIMARY KEY, type TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// serveRecovering is s.Handler().ServeHTTP(w, r) that fails the test, not
// the binary, when a panic escapes the service's handler.
func serveRecovering(t *testing.T, s *Server, w http.ResponseWriter, r *http.Request) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			t.Errorf("a panic escaped the service's handler: %v", v)
		}
	}()
	s.Handler().ServeHTTP(w, r)
}

// A handler that panics is a bug the intake answers 500 internal_error:
// its row, the webhook.* event and the dedupe key roll back, so the
// provider's redelivery runs the handler again, at once (the in-flight
// wait is at its one-minute bound, and the key is not left in flight), and
// records the event once; a later copy replays.
func TestWebhookHandlerPanic(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		createHandled(t, d)
		cfg := config.Default()
		cfg.Relay = false
		cfg.InFlightWait = time.Minute
		cfg.Webhooks = []byte(webhookTestConfig)
		s, err := New(ctx, cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		s.HandleWebhook("stripe", "invoice.paid", func(ctx context.Context, tx driver.Tx, e webhook.Event) error {
			if _, err := tx.Exec(ctx, `INSERT INTO handled (event_id, type) VALUES ($1, $2)`, e.ID, e.Type); err != nil {
				return err
			}
			if runs.Add(1) == 1 {
				panic("bookkeeping bug")
			}
			return nil
		})
		body := `{"id":"evt_panics_once","object":"event","type":"invoice.paid"}`
		deliver := func() *httptest.ResponseRecorder {
			p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: []byte(body), Secret: "whsec_handler_test", Timestamp: time.Now()})
			r := httptest.NewRequest(http.MethodPost, "/v1/webhooks/stripe-main", strings.NewReader(body))
			r.Header.Set("Stripe-Signature", p.Header)
			w := httptest.NewRecorder()
			serveRecovering(t, s, w, r)
			return w
		}
		recorded := func() (handled, events, keys int) {
			return countRows(t, d, `SELECT count(*) FROM handled`),
				countRows(t, d, `SELECT count(*) FROM idem_outbox WHERE type = $1`, "webhook.stripe.invoice.paid"),
				countRows(t, d, `SELECT count(*) FROM idem_keys`)
		}

		// Checked without stopping, so that an intake which lets the panic
		// escape also shows the key it holds.
		w := deliver()
		if w.Code != 500 || !strings.Contains(w.Body.String(), `"code":"internal_error"`) {
			t.Errorf("panicking handler: %d %s", w.Code, w.Body)
		}
		if h, e, k := recorded(); h != 0 || e != 0 || k != 0 {
			t.Errorf("a panic left %d rows, %d events, %d keys", h, e, k)
		}
		w = deliver()
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("redelivery after a panic: %d %s", w.Code, w.Body)
		}
		w = deliver()
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("copy after the redelivery: %d %s", w.Code, w.Body)
		}
		if h, e, k := recorded(); h != 1 || e != 1 || k != 1 || runs.Load() != 2 {
			t.Fatalf("%d rows, %d events, %d keys, %d runs; want 1, 1, 1, 2", h, e, k, runs.Load())
		}
	})
}

// An event id too long to be a key is stored under its hash, sha256:<hex>.
// A different event whose literal id is that very string is another event:
// both are recorded (two handler rows, two webhook.* events), and a
// redelivery of each is a replay of its own first delivery.
func TestWebhookHashedIDDoesNotMeetLiteralID(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		createHandled(t, d)
		s := newWebhookServer(t, d)
		var runs atomic.Int32
		s.HandleWebhook("stripe", "invoice.paid", func(ctx context.Context, tx driver.Tx, e webhook.Event) error {
			runs.Add(1)
			_, err := tx.Exec(ctx, `INSERT INTO handled (event_id, type) VALUES ($1, $2)`, e.ID, e.Type)
			return err
		})
		long := "evt_" + strings.Repeat("L", idem.MaxKeyLength)
		sum := sha256.Sum256([]byte(long))
		lookalike := "sha256:" + hex.EncodeToString(sum[:]) // the long id's key before the fix
		bodyOf := func(id string) string {
			return `{"id":"` + id + `","object":"event","type":"invoice.paid"}`
		}
		for _, round := range []struct{ replayed string }{{""}, {"true"}} {
			for _, id := range []string{long, lookalike} {
				w := deliverStripe(t, s, "stripe-main", "whsec_handler_test", bodyOf(id))
				if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != round.replayed {
					t.Fatalf("%.20s…: %d replayed=%q %s", id, w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
				}
				if want := `"event_id":"` + id + `"`; !strings.Contains(w.Body.String(), want) {
					t.Fatalf("%.20s… answered %s", id, w.Body)
				}
			}
		}
		for _, id := range []string{long, lookalike} {
			if n := countRows(t, d, `SELECT count(*) FROM handled WHERE event_id = $1`, id); n != 1 {
				t.Fatalf("%.20s…: %d handler rows, want 1", id, n)
			}
		}
		if n := countRows(t, d, `SELECT count(*) FROM idem_outbox WHERE type = $1`, "webhook.stripe.invoice.paid"); n != 2 || runs.Load() != 2 {
			t.Fatalf("%d events, %d handler runs; want 2, 2", n, runs.Load())
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// Slack's url_verification is answered with its challenge and stores
// nothing; an unknown endpoint is 404 (never 410, which makes senders
// disable the endpoint).
func TestWebhookChallengeAndUnknownEndpoint(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	s := newWebhookServer(t, d)
	body := `{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	ts := time.Now().Unix()
	sig := "v0=" + hexMAC("slack-signing-secret", "v0:"+itoa(ts)+":"+body)
	r := httptest.NewRequest(http.MethodPost, "/v1/webhooks/slack-app", strings.NewReader(body))
	r.Header.Set("X-Slack-Request-Timestamp", itoa(ts))
	r.Header.Set("X-Slack-Signature", sig)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"`) {
		t.Fatalf("challenge: %d %s", w.Code, w.Body)
	}
	if n := countRows(t, d, `SELECT count(*) FROM idem_keys`); n != 0 {
		t.Fatalf("challenge stored %d keys", n)
	}
	if n := countRows(t, d, `SELECT count(*) FROM idem_outbox`); n != 0 {
		t.Fatalf("challenge stored %d events", n)
	}

	w = deliverStripe(t, s, "no-such-endpoint", "whsec_handler_test", `{"id":"evt_1","type":"x"}`)
	if w.Code != 404 || !strings.Contains(w.Body.String(), `"code":"not_found"`) {
		t.Fatalf("unknown endpoint: %d %s", w.Code, w.Body)
	}
}

func TestWebhookEventType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ provider, typ, want string }{
		{"stripe", "invoice.paid", "webhook.stripe.invoice.paid"},
		{"shopify", "orders/create", "webhook.shopify.orders/create"},
		{"hmac", "", "webhook.hmac"},
		{"hmac", "a..b.", "webhook.hmac.a.b"},
		{"hmac", "odd type>*", "webhook.hmac.odd_type__"},
		{"hmac", "é", "webhook.hmac.__"},
		{"hmac", strings.Repeat("x.", 200), "webhook.hmac." + strings.TrimRight(strings.Repeat("x.", 200)[:255-len("webhook.hmac.")], ".")},
	} {
		if got := webhookEventType(tc.provider, tc.typ); got != tc.want {
			t.Errorf("webhookEventType(%q, %q) = %q, want %q", tc.provider, tc.typ, got, tc.want)
		}
	}
}

// The service refuses to start on a webhooks block it cannot serve.
func TestWebhookConfigErrors(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	for _, raw := range []string{
		"webhooks:\n  s:\n    provider: stripe\n    secret: [x]\n",
		"webhooks:\n  s:\n    provider: stripe\n    secrets: [x]\n    tenant: a.b\n",
		// An id header the signature does not cover.
		"webhooks:\n  h:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: X-Sig, id_header: X-Id}\n",
	} {
		cfg := config.Default()
		cfg.Relay = false
		cfg.Webhooks = []byte(raw)
		_, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if !errors.Is(err, webhook.ErrConfig) {
			t.Errorf("%q: %v, want a webhook configuration error", raw, err)
		}
	}
}

// An event id the keeper takes as it is (up to 255 bytes) but too long
// for the event's ordering key with its "webhook/<endpoint>/" prefix is
// stored and published once, its ordering key hashed; its redelivery is
// a replay, never 413.
func TestWebhookLongIDIsStored(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		s := newWebhookServer(t, d)
		for _, n := range []int{183, 230, idem.MaxKeyLength} {
			id := "evt_" + strings.Repeat("l", n-4)
			body := `{"id":"` + id + `","object":"event","type":"invoice.paid"}`
			for i, want := range []string{"", "true"} {
				w := deliverStripe(t, s, "stripe-main", "whsec_handler_test", body)
				if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != want {
					t.Fatalf("id of %d bytes, delivery %d: %d replayed=%q %s", n, i, w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
				}
			}
			if k := countRows(t, d, `SELECT count(*) FROM idem_keys WHERE operation = 'webhook:stripe-main' AND key = $1`, id); k != 1 {
				t.Fatalf("id of %d bytes: %d keys", n, k)
			}
		}
		var keys []string
		rows, err := d.Reader().Query(context.Background(), `SELECT okey FROM idem_outbox WHERE type = 'webhook.stripe.invoice.paid'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if len(keys) != 3 {
			t.Fatalf("%d events, want 3", len(keys))
		}
		for _, k := range keys {
			if len(k) > 255 {
				t.Errorf("ordering key of %d bytes", len(k))
			}
		}
	})
}

// GitHub and Shopify sign the body only; the delivery id and the type are
// headers anyone holding one signed delivery can change. Resending the
// same signed body under a fresh id (and another type) is the same event:
// one dedupe key, one webhook.* event, one handler run, and the copy is
// answered as a replay. The event marks its id and type unsigned.
func TestWebhookUnsignedIDReplay(t *testing.T) {
	t.Parallel()
	type delivery struct{ id, typ string }
	for _, p := range []struct {
		endpoint, provider, secret string
		sign                       func(r *http.Request, secret, body string)
		set                        func(r *http.Request, d delivery)
		deliveries                 []delivery
	}{
		{
			endpoint: "gh", provider: "github", secret: "gh-secret",
			sign: func(r *http.Request, secret, body string) {
				r.Header.Set("X-Hub-Signature-256", "sha256="+hexMAC(secret, body))
			},
			set: func(r *http.Request, d delivery) {
				r.Header.Set("X-GitHub-Hook-ID", "42")
				r.Header.Set("X-GitHub-Delivery", d.id)
				r.Header.Set("X-GitHub-Event", d.typ)
			},
			deliveries: []delivery{{"72d3162e-cc78-11e3-81ab-4c9367dc0958", "push"},
				{"00000000-0000-0000-0000-000000000001", "push"}, {"00000000-0000-0000-0000-000000000002", "release"}},
		},
		{
			endpoint: "shop", provider: "shopify", secret: "shop-secret",
			sign: func(r *http.Request, secret, body string) {
				m := hmac.New(sha256.New, []byte(secret))
				m.Write([]byte(body))
				r.Header.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(m.Sum(nil)))
			},
			set: func(r *http.Request, d delivery) {
				r.Header.Set("X-Shopify-Event-Id", d.id)
				r.Header.Set("X-Shopify-Topic", d.typ)
			},
			deliveries: []delivery{{"98880550-7158-44d4-b7cd-2c97c8a091b5", "orders/create"},
				{"fresh-event-id", "orders/create"}, {"another-id", "orders/cancelled"}},
		},
	} {
		t.Run(p.provider, func(t *testing.T) {
			t.Parallel()
			drivertest.Each(t, func(t *testing.T, d driver.Driver) {
				s := newWebhookServer(t, d)
				var runs atomic.Int32
				s.HandleWebhook(p.provider, webhook.AnyType, func(ctx context.Context, tx driver.Tx, e webhook.Event) error {
					if !e.IDUnsigned || !e.TypeUnsigned {
						t.Errorf("event %+v: id and type not marked unsigned", e)
					}
					runs.Add(1)
					return nil
				})
				body := `{"id":820982911946154508,"ref":"refs/heads/main","total_price":"10.00"}`
				for i, dl := range p.deliveries {
					r := httptest.NewRequest(http.MethodPost, "/v1/webhooks/"+p.endpoint, strings.NewReader(body))
					p.sign(r, p.secret, body)
					p.set(r, dl)
					w := httptest.NewRecorder()
					s.Handler().ServeHTTP(w, r)
					want := map[bool]string{true: "", false: "true"}[i == 0]
					if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != want {
						t.Fatalf("delivery %d (%s %s): %d replayed=%q %s", i, dl.id, dl.typ, w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
					}
				}
				keys := countRows(t, d, `SELECT count(*) FROM idem_keys WHERE operation = $1`, "webhook:"+p.endpoint)
				events := countRows(t, d, `SELECT count(*) FROM idem_outbox WHERE type LIKE $1`, "webhook."+p.provider+"%")
				if keys != 1 || events != 1 || runs.Load() != 1 {
					t.Fatalf("%d keys, %d events, %d handler runs; want 1, 1, 1", keys, events, runs.Load())
				}
				var payload []byte
				if err := d.Reader().QueryRow(context.Background(), `SELECT payload FROM idem_outbox WHERE type LIKE $1`, "webhook."+p.provider+"%").Scan(&payload); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(payload), `"unsigned":["event_id","type"]`) {
					t.Fatalf("payload does not mark the unsigned fields: %s", payload)
				}
			})
		})
	}
}

// hexMAC is Slack's scheme ("Verifying requests from Slack"): Slack
// publishes no Go signer.
func hexMAC(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A copy that arrives while the first is still in its handler waits
// InFlightWait, then gets 409 request_in_flight with Retry-After (not a
// 500, and nothing of its own stored); once the first commits, copies
// replay it.
func TestWebhookInFlight(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "postgres")
	cfg := config.Default()
	cfg.Relay = false
	cfg.InFlightWait = 50 * time.Millisecond
	cfg.Webhooks = []byte(webhookTestConfig)
	s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	s.HandleWebhook("stripe", webhook.AnyType, func(ctx context.Context, tx driver.Tx, e webhook.Event) error {
		runs.Add(1)
		close(entered)
		<-release
		return nil
	})
	body := `{"id":"evt_slow","type":"invoice.paid"}`
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- deliverStripe(t, s, "stripe-main", "whsec_handler_test", body) }()
	<-entered
	w := deliverStripe(t, s, "stripe-main", "whsec_handler_test", body)
	close(release)
	if w.Code != 409 || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"code":"request_in_flight"`) {
		t.Fatalf("copy in flight: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if w := <-first; w.Code != 200 {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	w = deliverStripe(t, s, "stripe-main", "whsec_handler_test", body)
	if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
		t.Fatalf("after commit: %d %s, handler ran %d times", w.Code, w.Body, runs.Load())
	}
	if n := countRows(t, d, `SELECT count(*) FROM idem_outbox WHERE type = $1`, "webhook.stripe.invoice.paid"); n != 1 {
		t.Fatalf("%d events", n)
	}
}
