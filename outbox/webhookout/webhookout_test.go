package webhookout_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookout"
	"github.com/idemhq/idem/webhook"
)

// loopback is the allow-list the tests' receivers need: they listen on
// 127.0.0.1.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// received is one request a receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a real HTTP server on loopback; answer decides each answer
// from the number of requests before it.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []received
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.got)
		rc.got = append(rc.got, received{header: r.Header.Clone(), body: body})
		rc.mu.Unlock()
		answer(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func ok(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

// env is one database with the endpoints, a fan-out and a deliverer.
type env struct {
	d   driver.Driver
	eps *webhookout.Endpoints
	fan *webhookout.FanOut
	w   *webhookout.Deliverer
	ob  *outbox.Outbox
}

func newEnv(t *testing.T, d driver.Driver, cfg webhookout.DelivererConfig) *env {
	t.Helper()
	if cfg.AllowNetworks == nil {
		cfg.AllowNetworks = loopback
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.Schedule == nil {
		cfg.Schedule = []time.Duration{0, 50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	eps, err := webhookout.New(d, webhookout.Config{AllowNetworks: cfg.AllowNetworks, Clock: cfg.Clock, Sealer: cfg.Sealer})
	if err != nil {
		t.Fatal(err)
	}
	w, err := webhookout.NewDeliverer(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fan, err := webhookout.NewFanOut(d, webhookout.FanOutConfig{Written: w.Notify, Clock: cfg.Clock, Sealer: cfg.Sealer})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(d, outbox.Config{Clock: cfg.Clock, Sealer: cfg.Sealer})
	if err != nil {
		t.Fatal(err)
	}
	return &env{d: d, eps: eps, fan: fan, w: w, ob: ob}
}

// run runs the deliverer until the test ends.
func (e *env) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// tx runs fn in a committed transaction.
func (e *env) tx(t *testing.T, fn func(tx driver.Tx) error) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func (e *env) create(t *testing.T, tenant string, in webhookout.NewEndpoint) webhookout.Endpoint {
	t.Helper()
	var ep webhookout.Endpoint
	e.tx(t, func(tx driver.Tx) (err error) {
		ep, err = e.eps.Create(context.Background(), tx, tenant, in)
		return err
	})
	return ep
}

// emit commits an event in the outbox and hands it to the fan-out as the
// relay would; it returns the event.
func (e *env) emit(t *testing.T, tenant, typ string) outbox.Message {
	t.Helper()
	m := outbox.Message{ID: outbox.NewID(), Tenant: tenant, Type: typ, Payload: json.RawMessage(`{"n":1}`)}
	e.tx(t, func(tx driver.Tx) error { return e.ob.Enqueue(context.Background(), tx, m) })
	m.CreatedAt = time.Now().UTC()
	if errs := e.fan.Publish(context.Background(), []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	return m
}

func (e *env) delivery(t *testing.T, endpoint, event string) *driver.WebhookDeliveryRow {
	t.Helper()
	r, err := e.d.WebhookDeliveryGet(context.Background(), e.d.Reader(),
		&driver.WebhookDeliveryGetParams{Key: driver.WebhookDeliveryKey{EndpointID: endpoint, EventID: event}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) attempts(t *testing.T, tenant, endpoint string) []webhookout.Attempt {
	t.Helper()
	var out []webhookout.Attempt
	e.tx(t, func(tx driver.Tx) (err error) {
		out, _, err = e.eps.Attempts(context.Background(), tx, tenant, endpoint, webhookout.AttemptQuery{})
		return err
	})
	return out
}

func (e *env) endpoint(t *testing.T, tenant, id string) webhookout.Endpoint {
	t.Helper()
	var ep webhookout.Endpoint
	e.tx(t, func(tx driver.Tx) (err error) {
		ep, err = e.eps.Get(context.Background(), tx, tenant, id)
		return err
	})
	return ep
}

// eventually waits up to 20s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func verifier(t *testing.T, secrets ...string) webhook.Verifier {
	t.Helper()
	v, err := webhook.NewVerifier(webhook.Endpoint{Name: "test", Provider: webhook.ProviderStandard, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Each event goes to every enabled endpoint of its tenant whose filter
// matches, once however many times the relay hands it over.
func TestFanOut(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, webhookout.DelivererConfig{})
		url := "http://127.0.0.1:9/hook"
		all := e.create(t, "acme", webhookout.NewEndpoint{URL: url})
		transfers := e.create(t, "acme", webhookout.NewEndpoint{URL: url, EventTypes: []string{"transfer.*"}})
		exact := e.create(t, "acme", webhookout.NewEndpoint{URL: url, EventTypes: []string{"account.created"}})
		off := false
		disabled := e.create(t, "acme", webhookout.NewEndpoint{URL: url, Enabled: &off})
		other := e.create(t, "globex", webhookout.NewEndpoint{URL: url})

		ctx := context.Background()
		now := time.Now().UTC()
		msgs := []outbox.Message{
			{ID: outbox.NewID(), Tenant: "acme", Type: "transfer.created", Payload: json.RawMessage(`{}`), CreatedAt: now},
			{ID: outbox.NewID(), Tenant: "acme", Type: "account.created", Payload: json.RawMessage(`{}`), CreatedAt: now},
			{ID: outbox.NewID(), Tenant: "globex", Type: "transfer.created", Payload: json.RawMessage(`{}`), CreatedAt: now},
		}
		for range 2 { // a relay that republishes after a crash
			for _, err := range e.fan.Publish(ctx, msgs) {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		want := map[[2]string]bool{
			{all.ID, msgs[0].ID}: true, {all.ID, msgs[1].ID}: true,
			{transfers.ID, msgs[0].ID}: true,
			{exact.ID, msgs[1].ID}:     true,
			{other.ID, msgs[2].ID}:     true,
		}
		for _, ep := range []string{all.ID, transfers.ID, exact.ID, disabled.ID, other.ID} {
			for _, m := range msgs {
				_, err := d.WebhookDeliveryGet(ctx, d.Reader(), &driver.WebhookDeliveryGetParams{
					Key: driver.WebhookDeliveryKey{EndpointID: ep, EventID: m.ID}})
				if got := err == nil; got != want[[2]string{ep, m.ID}] {
					t.Errorf("delivery of %s to %s: exists %v, want %v (%v)", m.Type, ep, got, !got, err)
				}
			}
		}
	})
}

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		types []string
		typ   string
		want  bool
	}{
		{nil, "a.b", true},
		{[]string{"*"}, "a.b", true},
		{[]string{"a.*"}, "a.b", true},
		{[]string{"a.*"}, "a.b.c", true},
		{[]string{"a.*"}, "a", false},
		{[]string{"a.*"}, "ab.c", false},
		{[]string{"a.b"}, "a.b", true},
		{[]string{"a.b"}, "a.bc", false},
	} {
		if got := webhookout.Matches(c.types, c.typ); got != c.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", c.types, c.typ, got, c.want)
		}
	}
}

// A receiver that answers 500 twice then 200 gets three attempts with one
// webhook-id, each signed; the log holds the three, the delivery is
// delivered, and the endpoint, failing after the first, is healthy again.
func TestRetryUntilSuccess(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n < 2 {
				http.Error(w, "boom "+strings.Repeat("x", 2000), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		e := newEnv(t, d, webhookout.DelivererConfig{})
		ep := e.create(t, "acme", webhookout.NewEndpoint{URL: rc.URL + "/hook?token=s3cret"})
		if !strings.HasPrefix(ep.Secret, "whsec_") {
			t.Fatalf("create answered secret %q", ep.Secret)
		}
		e.run(t)
		m := e.emit(t, "acme", "transfer.created")
		eventually(t, "delivered", func() bool { return e.delivery(t, ep.ID, m.ID).State == driver.WebhookDelivered })

		reqs := rc.requests()
		if len(reqs) != 3 {
			t.Fatalf("%d requests, want 3", len(reqs))
		}
		v := verifier(t, ep.Secret)
		for i, r := range reqs {
			if id := r.header.Get("webhook-id"); id != m.ID {
				t.Errorf("request %d: webhook-id %q, want %q", i, id, m.ID)
			}
			if _, err := v.Verify(r.header, r.body, time.Now()); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			var env struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(r.body, &env); err != nil || env.Type != "transfer.created" || string(env.Data) != `{"n":1}` {
				t.Errorf("request %d: body %s", i, r.body)
			}
		}
		if del := e.delivery(t, ep.ID, m.ID); del.Attempts != 3 || del.LastStatus != 200 {
			t.Errorf("delivery %+v", del)
		}
		att := e.attempts(t, "acme", ep.ID)
		if len(att) != 3 || att[0].Status != 200 || att[1].Status != 500 || att[2].Status != 500 {
			t.Fatalf("attempts %+v", att)
		}
		if len(att[1].Response) > webhookout.ResponseBytes+3 || !strings.HasPrefix(att[1].Response, "boom") {
			t.Errorf("logged answer %d bytes: %.40q", len(att[1].Response), att[1].Response)
		}
		if strings.Contains(att[1].Error, "s3cret") {
			t.Errorf("the error shows the URL's token: %q", att[1].Error)
		}
		if got := e.endpoint(t, "acme", ep.ID); got.FailingSince != nil || !got.Enabled || got.Secret != "" {
			t.Errorf("endpoint after success: %+v", got)
		}
	})
}

// A delivery whose schedule is spent is failed; a replay sends it again
// with the same webhook-id.
func TestScheduleSpentThenReplay(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var mu sync.Mutex
		status := http.StatusServiceUnavailable
		rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
		rc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			s := status
			mu.Unlock()
			rc.mu.Lock()
			rc.got = append(rc.got, received{header: r.Header.Clone()})
			rc.mu.Unlock()
			w.WriteHeader(s)
		})
		e := newEnv(t, d, webhookout.DelivererConfig{Schedule: []time.Duration{0, 20 * time.Millisecond}})
		ep := e.create(t, "acme", webhookout.NewEndpoint{URL: rc.URL})
		e.run(t)
		m := e.emit(t, "acme", "transfer.created")
		eventually(t, "failed", func() bool { return e.delivery(t, ep.ID, m.ID).State == driver.WebhookFailed })
		if n := len(rc.requests()); n != 2 {
			t.Fatalf("%d requests for a schedule of 2", n)
		}
		mu.Lock()
		status = http.StatusOK
		mu.Unlock()
		var n int
		e.tx(t, func(tx driver.Tx) (err error) {
			n, err = e.eps.Replay(context.Background(), tx, "acme", ep.ID, webhookout.Replay{Since: m.CreatedAt.Add(-time.Minute)})
			return err
		})
		if n != 1 {
			t.Fatalf("replay since made %d pending, want 1", n)
		}
		e.w.Notify()
		eventually(t, "delivered", func() bool { return e.delivery(t, ep.ID, m.ID).State == driver.WebhookDelivered })
		// Once more, by its id.
		e.tx(t, func(tx driver.Tx) (err error) {
			n, err = e.eps.Replay(context.Background(), tx, "acme", ep.ID, webhookout.Replay{EventID: m.ID})
			return err
		})
		e.w.Notify()
		eventually(t, "four requests", func() bool { return len(rc.requests()) == 4 })
		for _, r := range rc.requests() {
			if r.header.Get("webhook-id") != m.ID {
				t.Errorf("webhook-id %q, want %q", r.header.Get("webhook-id"), m.ID)
			}
		}
		// Another tenant can neither replay nor read the endpoint.
		ctx := context.Background()
		tx, _ := d.Begin(ctx, driver.BeginOptions{})
		defer tx.Rollback(ctx)
		if _, err := e.eps.Replay(ctx, tx, "globex", ep.ID, webhookout.Replay{EventID: m.ID}); !errors.Is(err, webhookout.ErrNotFound) {
			t.Errorf("another tenant's replay: %v", err)
		}
		if _, _, err := e.eps.Attempts(ctx, tx, "globex", ep.ID, webhookout.AttemptQuery{}); !errors.Is(err, webhookout.ErrNotFound) {
			t.Errorf("another tenant's attempts: %v", err)
		}
	})
}

// 410 Gone disables the endpoint at once, with a webhook_endpoint.disabled
// event in its tenant's outbox; a redirect is a failure, not followed.
func TestGoneDisablesRedirectFails(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		target := newReceiver(t, ok)
		gone := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) })
		redirect := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
		})
		e := newEnv(t, d, webhookout.DelivererConfig{Schedule: []time.Duration{0, time.Hour}})
		g := e.create(t, "acme", webhookout.NewEndpoint{URL: gone.URL})
		r := e.create(t, "acme", webhookout.NewEndpoint{URL: redirect.URL})
		e.run(t)
		m := e.emit(t, "acme", "transfer.created")
		eventually(t, "disabled", func() bool { return !e.endpoint(t, "acme", g.ID).Enabled })
		if del := e.delivery(t, g.ID, m.ID); del.State != driver.WebhookFailed || del.LastStatus != 410 {
			t.Errorf("delivery to the 410 endpoint: %+v", del)
		}
		ep := e.endpoint(t, "acme", g.ID)
		if ep.DisabledAt == nil || !strings.Contains(ep.DisabledReason, "410") {
			t.Errorf("disabled endpoint %+v", ep)
		}
		eventually(t, "redirect attempted", func() bool { return e.delivery(t, r.ID, m.ID).Attempts == 1 })
		if del := e.delivery(t, r.ID, m.ID); del.State != driver.WebhookPending || del.LastStatus != http.StatusTemporaryRedirect {
			t.Errorf("delivery to the redirecting endpoint: %+v", del)
		}
		if n := len(target.requests()); n != 0 {
			t.Errorf("the redirect was followed: %d requests at its target", n)
		}
		// The event of the disabling, in the tenant's outbox. (Read from the
		// table: GET /v1/events lists it only once every older transaction
		// of the cluster has ended.)
		q := `SELECT count(*) FROM idem_outbox WHERE tenant = $1 AND type = $2 AND convert_from(payload, 'UTF8') LIKE $3`
		if d.Dialect() == "sqlite" {
			q = `SELECT count(*) FROM idem_outbox WHERE tenant = ?1 AND type = ?2 AND CAST(payload AS TEXT) LIKE ?3`
		}
		var found int
		if err := d.Reader().QueryRow(context.Background(), q, "acme", webhookout.EventEndpointDisabled, "%"+g.ID+"%").Scan(&found); err != nil {
			t.Fatal(err)
		}
		if found != 1 {
			t.Errorf("%d %s events for %s, want 1", found, webhookout.EventEndpointDisabled, g.ID)
		}
		// The disabled endpoint gets no more deliveries.
		m2 := e.emit(t, "acme", "transfer.created")
		if _, err := d.WebhookDeliveryGet(context.Background(), d.Reader(), &driver.WebhookDeliveryGetParams{
			Key: driver.WebhookDeliveryKey{EndpointID: g.ID, EventID: m2.ID}}); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("a disabled endpoint got a delivery: %v", err)
		}
	})
}

// Timeouts and closed connections are failures, retried; an endpoint that
// fails for DisableAfter is disabled.
func TestTimeoutCloseAndDisableAfter(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		slow := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		closer := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}
		advance := func(d time.Duration) {
			mu.Lock()
			now = now.Add(d)
			mu.Unlock()
		}
		e := newEnv(t, d, webhookout.DelivererConfig{Clock: clock, Timeout: 300 * time.Millisecond,
			Schedule: []time.Duration{0, time.Minute, time.Minute, time.Minute, time.Minute}, DisableAfter: 2 * time.Minute})
		s := e.create(t, "acme", webhookout.NewEndpoint{URL: slow.URL})
		c := e.create(t, "acme", webhookout.NewEndpoint{URL: closer.URL})
		e.run(t)
		m := e.emit(t, "acme", "transfer.created")
		eventually(t, "first attempts", func() bool {
			return e.delivery(t, s.ID, m.ID).Attempts == 1 && e.delivery(t, c.ID, m.ID).Attempts == 1
		})
		ts := e.attempts(t, "acme", s.ID)
		if len(ts) != 1 || ts[0].Status != 0 || !strings.Contains(strings.ToLower(ts[0].Error), "timeout") {
			t.Errorf("slow endpoint's attempts %+v", ts)
		}
		cs := e.attempts(t, "acme", c.ID)
		if len(cs) != 1 || cs[0].Status != 0 || cs[0].Error == "" {
			t.Errorf("closing endpoint's attempts %+v", cs)
		}
		if ep := e.endpoint(t, "acme", c.ID); ep.FailingSince == nil || !ep.Enabled {
			t.Errorf("endpoint after a failure: %+v", ep)
		}
		// Each minute (and up to a tenth more, the jitter) the retry comes due; after two minutes of failures
		// the endpoints are disabled.
		for i := 2; i <= 3; i++ {
			advance(70 * time.Second)
			e.w.Notify()
			eventually(t, "retry", func() bool { return e.delivery(t, c.ID, m.ID).Attempts == i })
		}
		eventually(t, "disabled", func() bool { return !e.endpoint(t, "acme", c.ID).Enabled })
		if ep := e.endpoint(t, "acme", c.ID); !strings.Contains(ep.DisabledReason, "failing since") {
			t.Errorf("disabled endpoint %+v", ep)
		}
	})
}

// One endpoint that never answers does not hold back another, by
// construction rather than by timing: with the slow endpoint's receiver
// blocking every request until the test ends, every delivery to the fast
// endpoint is delivered, at its first attempt, while the slow one holds
// exactly its PerEndpoint slots and none of its requests has ended. So no
// fast delivery waited on a slow one (none of those ended), and the slow
// endpoint's backlog took no slot beyond its own. The latency this buys is
// BenchmarkEndpointDown's (the healthy endpoints' p99 beside a dead one).
func TestSlowEndpointDoesNotDelayOthers(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		var blockedMu sync.Mutex
		blocked, ended := 0, 0 // the slow receiver's requests in its handler, and those that left it
		slow := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			blockedMu.Lock()
			blocked++
			blockedMu.Unlock()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			blockedMu.Lock()
			blocked--
			ended++
			blockedMu.Unlock()
		})
		fast := newReceiver(t, ok)
		const perEndpoint = 2
		e := newEnv(t, d, webhookout.DelivererConfig{Timeout: time.Minute, LeaseTTL: time.Hour, Concurrency: 8, PerEndpoint: perEndpoint})
		s := e.create(t, "acme", webhookout.NewEndpoint{URL: slow.URL})
		f := e.create(t, "acme", webhookout.NewEndpoint{URL: fast.URL})
		e.run(t)
		var ids []string
		for range 30 {
			ids = append(ids, e.emit(t, "acme", "transfer.created").ID)
		}
		eventually(t, "fast endpoint done", func() bool {
			for _, id := range ids {
				if e.delivery(t, f.ID, id).State != driver.WebhookDelivered {
					return false
				}
			}
			return true
		})
		blockedMu.Lock()
		b, n := blocked, ended
		blockedMu.Unlock()
		if n != 0 {
			t.Errorf("%d requests to the slow endpoint ended before the fast endpoint was done, want 0", n)
		}
		if got := len(slow.requests()); got != perEndpoint || b != perEndpoint {
			t.Errorf("the slow endpoint got %d requests, %d blocked now; want its %d slots, all blocked", got, b, perEndpoint)
		}
		if got := len(fast.requests()); got != len(ids) {
			t.Errorf("the fast endpoint got %d requests, want one per event (%d)", got, len(ids))
		}
		for _, id := range ids {
			if del := e.delivery(t, f.ID, id); del.Attempts != 1 {
				t.Errorf("fast delivery %s took %d attempts, want 1", id, del.Attempts)
			}
			if del := e.delivery(t, s.ID, id); del.State != driver.WebhookPending || del.Attempts != 0 {
				t.Errorf("slow delivery %s: %s after %d attempts, want pending, none recorded", id, del.State, del.Attempts)
			}
		}
	})
}

// A deliverer claims ahead: besides its attempts in flight it holds as
// many leased deliveries queued, which start as attempts end. Stopping,
// it gives the queued ones' leases back, so that they are due at once
// rather than when their leases end.
func TestStopGivesBackQueuedLeases(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		release := make(chan struct{})
		rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		e := newEnv(t, d, webhookout.DelivererConfig{Timeout: 10 * time.Second, Concurrency: 1, PerEndpoint: 1})
		ep := e.create(t, "acme", webhookout.NewEndpoint{URL: rc.URL})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = e.w.Run(ctx)
		}()
		defer close(release)
		var ids []string
		for range 3 {
			ids = append(ids, e.emit(t, "acme", "transfer.created").ID)
		}
		leased := func() (n int) {
			for _, id := range ids {
				if e.delivery(t, ep.ID, id).Owner != "" {
					n++
				}
			}
			return n
		}
		eventually(t, "one attempt in flight and one queued", func() bool { return len(rc.requests()) == 1 && leased() == 2 })
		cancel()
		<-done
		sent := rc.requests()[0].header.Get("webhook-id")
		now := time.Now()
		for _, id := range ids {
			if id == sent {
				continue // cut short by the stop: its lease lapses
			}
			if del := e.delivery(t, ep.ID, id); del.Owner != "" || del.NextAt.After(now) || del.State != driver.WebhookPending {
				t.Errorf("delivery %s after the stop: owner %q, due %s, %s; want unleased, due now, pending", id, del.Owner, del.NextAt, del.State)
			}
		}
		if n := len(rc.requests()); n != 1 {
			t.Errorf("%d requests, want the one attempt", n)
		}
	})
}

// During a rotation's overlap each delivery is signed with both secrets:
// a receiver holding either verifies it.
func TestSecretRotation(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		rc := newReceiver(t, ok)
		e := newEnv(t, d, webhookout.DelivererConfig{})
		ep := e.create(t, "acme", webhookout.NewEndpoint{URL: rc.URL})
		var rotated webhookout.Endpoint
		e.tx(t, func(tx driver.Tx) (err error) {
			rotated, err = e.eps.RotateSecret(context.Background(), tx, "acme", ep.ID, "")
			return err
		})
		if rotated.Secret == "" || rotated.Secret == ep.Secret || rotated.SecretsActive != 2 {
			t.Fatalf("rotated %+v", rotated)
		}
		e.run(t)
		e.emit(t, "acme", "transfer.created")
		eventually(t, "delivered", func() bool { return len(rc.requests()) == 1 })
		r := rc.requests()[0]
		if n := len(strings.Fields(r.header.Get("webhook-signature"))); n != 2 {
			t.Errorf("%d signatures, want 2", n)
		}
		for _, s := range []string{ep.Secret, rotated.Secret} {
			if _, err := verifier(t, s).Verify(r.header, r.body, time.Now()); err != nil {
				t.Errorf("verify with one secret: %v", err)
			}
		}
		if got := e.endpoint(t, "acme", ep.ID); got.Secret != "" {
			t.Errorf("a read shows the secret")
		}
	})
}

// Without the allow-list, URLs of internal addresses are refused when
// registered, and a host name that resolves to one is refused when the
// delivery connects.
func TestSSRFRefused(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		eps, err := webhookout.New(d, webhookout.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, u := range []string{
			"https://127.0.0.1/hook", "https://169.254.169.254/latest/meta-data", "https://10.1.2.3/",
			"https://[::1]:8443/", "https://[::ffff:127.0.0.1]/", "http://example.com/", "ftp://example.com/",
			"https://192.168.1.1/", "https://[fd00:ec2::254]/", "https://0.0.0.0/",
		} {
			if _, err := eps.Create(ctx, tx, "acme", webhookout.NewEndpoint{URL: u}); !errors.Is(err, webhookout.ErrInvalid) {
				t.Errorf("create %s: %v, want refused", u, err)
			}
		}
		if _, err := eps.Create(ctx, tx, "acme", webhookout.NewEndpoint{URL: "https://example.com/hook"}); err != nil {
			t.Errorf("a public https URL: %v", err)
		}
	})
}

// A host name resolving to loopback passes registration (its answer may
// change) and is refused at the connection, on the address it resolved
// to.
func TestSSRFResolvedAddress(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		rc := newReceiver(t, ok)
		_, port, _ := net.SplitHostPort(rc.Listener.Addr().String())
		e := newEnv(t, d, webhookout.DelivererConfig{AllowNetworks: []netip.Prefix{}, Timeout: time.Second})
		// localhost resolves to 127.0.0.1 (or ::1): refused on connect.
		ep := e.create(t, "acme", webhookout.NewEndpoint{URL: "https://localhost:" + port + "/hook"})
		e.run(t)
		m := e.emit(t, "acme", "transfer.created")
		eventually(t, "attempt", func() bool { return e.delivery(t, ep.ID, m.ID).Attempts >= 1 })
		att := e.attempts(t, "acme", ep.ID)
		if len(att) == 0 || !strings.Contains(att[len(att)-1].Error, "not allowed") {
			t.Errorf("attempts %+v", att)
		}
		if n := len(rc.requests()); n != 0 {
			t.Errorf("the receiver on loopback got %d requests", n)
		}
	})
}

// dnsServer answers A queries for any name over UDP with the next of
// answers (the last one repeated), and AAAA queries with nothing: a DNS
// server whose answer changes between two lookups.
func dnsServer(t *testing.T, answers ...netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		buf := make([]byte, 512)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := buf[:k]
			if len(q) < 12 {
				continue
			}
			// The question: labels up to a zero byte, then type and class.
			i := 12
			for i < len(q) && q[i] != 0 {
				i += int(q[i]) + 1
			}
			if i+5 > len(q) {
				continue
			}
			qtype := int(q[i+1])<<8 | int(q[i+2])
			resp := append([]byte{}, q[:i+5]...)
			resp[2], resp[3] = 0x81, 0x80 // a response, recursion available
			resp[6], resp[7] = 0, 0       // no answers yet
			resp[8], resp[9], resp[10], resp[11] = 0, 0, 0, 0
			if qtype == 1 {
				mu.Lock()
				a := answers[min(n, len(answers)-1)]
				n++
				mu.Unlock()
				ip := a.As4()
				resp[7] = 1
				resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4)
				resp = append(resp, ip[:]...)
			}
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	return pc.LocalAddr().String()
}

// A name that resolves to a public address when checked and to loopback
// when the delivery connects (DNS rebinding) is refused at the connection:
// the guard checks the address connected to, not an earlier answer.
func TestSSRFRebindingRefused(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		// A TCP listener on loopback that counts connections.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		var accepted sync.WaitGroup
		var conns int
		var mu sync.Mutex
		accepted.Add(1)
		go func() {
			defer accepted.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns++
				mu.Unlock()
				c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close(); accepted.Wait() })
		_, port, _ := net.SplitHostPort(ln.Addr().String())

		dns := dnsServer(t, netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1"))
		resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "udp", dns)
		}}
		// The check a validator would make: public.
		addrs, err := resolver.LookupNetIP(context.Background(), "ip4", "rebind.example")
		if err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("93.184.216.34") {
			t.Fatalf("first answer %v, %v", addrs, err)
		}
		e := newEnv(t, d, webhookout.DelivererConfig{AllowNetworks: []netip.Prefix{}, Resolver: resolver, Timeout: time.Second})
		ep := e.create(t, "acme", webhookout.NewEndpoint{URL: "https://rebind.example:" + port + "/hook"})
		e.run(t)
		m := e.emit(t, "acme", "transfer.created")
		eventually(t, "attempt", func() bool { return e.delivery(t, ep.ID, m.ID).Attempts >= 1 })
		att := e.attempts(t, "acme", ep.ID)
		if len(att) == 0 || !strings.Contains(att[len(att)-1].Error, "127.0.0.1 is internal") {
			t.Errorf("attempts %+v", att)
		}
		mu.Lock()
		defer mu.Unlock()
		if conns != 0 {
			t.Errorf("%d connections reached the loopback listener", conns)
		}
	})
}
