package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
)

// intakeFixture is an Intake on d with one stripe endpoint, "stripe-main"
// in tenant acme, the outcomes it reported, and the table its handlers
// write their side effect to.
type intakeFixture struct {
	d  driver.Driver
	in *Intake

	mu       sync.Mutex
	outcomes []string
}

func newIntakeFixture(t *testing.T, d driver.Driver, cfg IntakeConfig) *intakeFixture {
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
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &intakeFixture{d: d}
	if cfg.Keeper == nil {
		if cfg.Keeper, err = idem.New(d, idem.Config{Retention: Retention, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Outbox, err = outbox.New(d, outbox.Config{MaxPayloadBytes: MaxEventPayloadBytes}); err != nil {
		t.Fatal(err)
	}
	cfg.Endpoints = []Endpoint{{Name: "stripe-main", Provider: "stripe", Secrets: []string{"whsec_old", "whsec_new"}, Tenant: "acme"}}
	cfg.Logger = quiet
	cfg.OnAnswer = func(endpoint string, kind Kind) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.outcomes = append(f.outcomes, endpoint+" "+string(kind))
	}
	if f.in, err = NewIntake(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// insertHandled is a handler whose side effect is one row per event id.
func insertHandled(ctx context.Context, tx driver.Tx, e Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO handled (event_id, type) VALUES ($1, $2)`, e.ID, e.Type)
	return err
}

func (f *intakeFixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := f.d.Reader().QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// stored is what the database holds: handler rows, webhook.* events, keys.
func (f *intakeFixture) stored(t *testing.T) [3]int {
	return [3]int{
		f.count(t, `SELECT count(*) FROM handled`),
		f.count(t, `SELECT count(*) FROM idem_outbox WHERE type LIKE 'webhook.%'`),
		f.count(t, `SELECT count(*) FROM idem_keys`),
	}
}

func (f *intakeFixture) takeOutcomes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.outcomes
	f.outcomes = nil
	return out
}

// post sends a Stripe delivery of body, signed with secret at ts, to h at
// path.
func post(h http.Handler, path, secret, body string, ts time.Time) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header = signStripe([]string{secret}, delivery{body: []byte(body), ts: ts})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The exported intake end to end, on both drivers: a signed delivery runs
// the handler once and writes one webhook.* event with it; Stripe's
// redelivery (new timestamp, rotated secret) replays the stored answer and
// writes nothing; a forged delivery is refused 401 and writes nothing; an
// unknown endpoint is 404. OnAnswer hears each delivery to a configured
// endpoint.
func TestIntakeServesOnce(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		reg := NewRegistry()
		reg.Handle("stripe", "invoice.paid", insertHandled)
		f := newIntakeFixture(t, d, IntakeConfig{Handlers: reg})
		mux := http.NewServeMux()
		mux.Handle("POST /hooks/{endpoint}", f.in)
		now := time.Now()

		body := `{"id":"evt_once","object":"event","type":"invoice.paid","data":{"object":{"note":"<b>&</b>"}}}`
		w := post(mux, "/hooks/stripe-main", "whsec_old", body, now.Add(-4*time.Minute))
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "" || w.Body.String() != `{"event_id":"evt_once","received":true}`+"\n" {
			t.Fatalf("first delivery: %d %v %s", w.Code, w.Header(), w.Body)
		}
		if got := f.stored(t); got != [3]int{1, 1, 1} {
			t.Fatalf("after the first delivery: rows, events, keys = %v, want 1 1 1", got)
		}
		var tenant, key string
		var payload []byte
		if err := d.Reader().QueryRow(context.Background(),
			`SELECT tenant, okey, payload FROM idem_outbox WHERE type = 'webhook.stripe.invoice.paid'`).Scan(&tenant, &key, &payload); err != nil {
			t.Fatal(err)
		}
		want := `{"provider":"stripe","endpoint":"stripe-main","event_id":"evt_once","type":"invoice.paid","body":` + body + `}`
		if tenant != "acme" || key != "webhook/stripe-main/evt_once" || string(payload) != want {
			t.Fatalf("event: tenant %q key %q payload %s", tenant, key, payload)
		}

		w = post(mux, "/hooks/stripe-main", "whsec_new", body, now)
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != `{"event_id":"evt_once","received":true}`+"\n" {
			t.Fatalf("redelivery: %d %v %s", w.Code, w.Header(), w.Body)
		}
		if got := f.stored(t); got != [3]int{1, 1, 1} {
			t.Fatalf("after the redelivery: rows, events, keys = %v, want 1 1 1", got)
		}

		forged := `{"id":"evt_forged","object":"event","type":"invoice.paid"}`
		w = post(mux, "/hooks/stripe-main", "whsec_attacker", forged, now)
		if w.Code != 401 || w.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(w.Body.String(), `"code":"signature_invalid"`) {
			t.Fatalf("forged: %d %v %s", w.Code, w.Header(), w.Body)
		}
		w = post(mux, "/hooks/no-such", "whsec_old", forged, now)
		if w.Code != 404 || !strings.Contains(w.Body.String(), `"code":"not_found"`) {
			t.Fatalf("unknown endpoint: %d %s", w.Code, w.Body)
		}
		if got := f.stored(t); got != [3]int{1, 1, 1} {
			t.Fatalf("after the refusals: rows, events, keys = %v, want 1 1 1", got)
		}
		if got, want := f.takeOutcomes(), []string{"stripe-main first", "stripe-main replayed", "stripe-main rejected_signature_invalid"}; !slices.Equal(got, want) {
			t.Fatalf("outcomes %q, want %q", got, want)
		}
	})
}

// A redelivery past the keeper's Retention, within its Memory, is answered
// as the first delivery was, 200 and marked replayed, so that the provider
// stops; the handler does not run again.
func TestIntakeRedeliveryPastRetention(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		reg := NewRegistry()
		reg.Handle("stripe", "invoice.paid", insertHandled)
		var later atomic.Int64
		k, err := idem.New(d, idem.Config{Retention: time.Hour, Memory: 48 * time.Hour,
			Clock: func() time.Time { return time.Now().Add(time.Duration(later.Load())) }})
		if err != nil {
			t.Fatal(err)
		}
		f := newIntakeFixture(t, d, IntakeConfig{Handlers: reg, Keeper: k})
		mux := http.NewServeMux()
		mux.Handle("POST /hooks/{endpoint}", f.in)
		body := `{"id":"evt_late","object":"event","type":"invoice.paid"}`
		if w := post(mux, "/hooks/stripe-main", "whsec_old", body, time.Now()); w.Code != 200 {
			t.Fatalf("first delivery: %d %s", w.Code, w.Body)
		}
		later.Store(int64(2 * time.Hour))
		w := post(mux, "/hooks/stripe-main", "whsec_new", body, time.Now())
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != `{"event_id":"evt_late","received":true}`+"\n" {
			t.Fatalf("redelivery past the retention: %d %v %s", w.Code, w.Header(), w.Body)
		}
		if got := f.stored(t); got != [3]int{1, 1, 1} {
			t.Fatalf("rows, events, keys = %v, want 1 1 1", got)
		}
		if got, want := f.takeOutcomes(), []string{"stripe-main first", "stripe-main replayed"}; !slices.Equal(got, want) {
			t.Fatalf("outcomes %q, want %q", got, want)
		}
	})
}

// A handler's error is 503 handler_failed with Retry-After and its panic
// 500 internal_error; either rolls back its row, the event and the key, so
// the provider's next delivery runs it again and records the event once.
// One Handler serves every event; Endpoint mounts the endpoint at a path
// of its own.
func TestIntakeHandlerFailsThenPanicsThenRuns(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var mu sync.Mutex
		runs := 0
		f := newIntakeFixture(t, d, IntakeConfig{RetryAfter: 3 * time.Second, Handler: func(ctx context.Context, tx driver.Tx, e Event) error {
			if err := insertHandled(ctx, tx, e); err != nil {
				return err
			}
			mu.Lock()
			runs++
			n := runs
			mu.Unlock()
			switch n {
			case 1:
				return errors.New("bookkeeping not ready")
			case 2:
				panic("bookkeeping bug")
			}
			return nil
		}})
		h := f.in.Endpoint("stripe-main")
		body := `{"id":"evt_retried","object":"event","type":"customer.created"}`

		w := post(h, "/stripe", "whsec_new", body, time.Now())
		if w.Code != 503 || w.Header().Get("Retry-After") != "3" || !strings.Contains(w.Body.String(), `"code":"handler_failed"`) {
			t.Fatalf("failing handler: %d %v %s", w.Code, w.Header(), w.Body)
		}
		if got := f.stored(t); got != [3]int{0, 0, 0} {
			t.Fatalf("a failed handler left rows, events, keys = %v", got)
		}
		w = post(h, "/stripe", "whsec_new", body, time.Now())
		if w.Code != 500 || !strings.Contains(w.Body.String(), `"code":"internal_error"`) {
			t.Fatalf("panicking handler: %d %s", w.Code, w.Body)
		}
		if got := f.stored(t); got != [3]int{0, 0, 0} {
			t.Fatalf("a panic left rows, events, keys = %v", got)
		}
		w = post(h, "/stripe", "whsec_new", body, time.Now())
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("third delivery: %d %s", w.Code, w.Body)
		}
		if got := f.stored(t); got != [3]int{1, 1, 1} || runs != 3 {
			t.Fatalf("rows, events, keys = %v after %d runs, want 1 1 1 after 3", got, runs)
		}
		if got, want := f.takeOutcomes(), []string{"stripe-main handler_failed", "stripe-main panicked", "stripe-main first"}; !slices.Equal(got, want) {
			t.Fatalf("outcomes %q, want %q", got, want)
		}
	})
}

// NewIntake refuses a configuration it cannot serve, and Endpoint panics
// on a name that is not configured.
func TestNewIntakeRefuses(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	k, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stripe := Endpoint{Name: "s", Provider: "stripe", Secrets: []string{"whsec_x"}}
	dotted := stripe
	dotted.Tenant = "a.b"
	for _, tc := range []struct {
		name    string
		cfg     IntakeConfig
		wantCfg bool // a *ConfigError
	}{
		{"no keeper", IntakeConfig{Outbox: ob}, false},
		{"no outbox", IntakeConfig{Keeper: k}, false},
		{"both handler kinds", IntakeConfig{Keeper: k, Outbox: ob, Handlers: NewRegistry(), Handler: insertHandled}, false},
		{"retry after", IntakeConfig{Keeper: k, Outbox: ob, RetryAfter: time.Millisecond}, false},
		{"tenant not a subject token", IntakeConfig{Keeper: k, Outbox: ob, Endpoints: []Endpoint{dotted}}, true},
		{"name twice", IntakeConfig{Keeper: k, Outbox: ob, Endpoints: []Endpoint{stripe, stripe}}, true},
		{"invalid endpoint", IntakeConfig{Keeper: k, Outbox: ob, Endpoints: []Endpoint{{Name: "s", Provider: "stripe"}}}, true},
	} {
		_, err := NewIntake(tc.cfg)
		if err == nil || errors.Is(err, ErrConfig) != tc.wantCfg {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	in, err := NewIntake(IntakeConfig{Keeper: k, Outbox: ob, Endpoints: []Endpoint{stripe}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Endpoint of an unknown name did not panic")
		}
	}()
	in.Endpoint("t")
}

func TestEventType(t *testing.T) {
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
		if got := EventType(Event{Provider: tc.provider, Type: tc.typ}); got != tc.want {
			t.Errorf("EventType(%q, %q) = %q, want %q", tc.provider, tc.typ, got, tc.want)
		}
	}
}

// The event's payload is the documented JSON; a body that is not JSON is
// carried as body_base64.
func TestEventPayloadOfNonJSONBody(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	f := newIntakeFixture(t, d, IntakeConfig{})
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	ep := f.in.endpoints["stripe-main"].Endpoint
	if err := f.in.enqueue(ctx, tx, ep, Event{Provider: "github", ID: "1:2", Type: "push", Body: []byte("payload=%7B%7D")}); err != nil {
		t.Fatal(err)
	}
	var payload []byte
	if err := tx.QueryRow(ctx, `SELECT payload FROM idem_outbox WHERE type = 'webhook.github.push'`).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(payload, &got); err != nil || got["body_base64"] != "cGF5bG9hZD0lN0IlN0Q=" || bytes.Contains(payload, []byte(`"body"`)) {
		t.Fatalf("payload %s (%v)", payload, err)
	}
}
