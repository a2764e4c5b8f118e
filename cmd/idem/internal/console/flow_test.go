package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/outbox"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// flowEnv is the console alone on a real database and its outbox, on the
// test's clock: the sampler runs only when the test calls SampleOutbox.
type flowEnv struct {
	D       driver.Driver
	Outbox  *outbox.Outbox
	Console *console.Console
	Clock   *fakeClock
	URL     string
}

func newFlowEnv(t *testing.T, dialect string) *flowEnv {
	t.Helper()
	d := drivertest.Open(t, dialect)
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Now().UTC()}
	c, err := console.New(console.Config{Driver: d, Ledger: mustLedger(t, d), Outbox: inspect.NewOutboxView(ob),
		Clock: clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(c.Handler())
	t.Cleanup(hs.Close)
	return &flowEnv{D: d, Outbox: ob, Console: c, Clock: clock, URL: hs.URL}
}

// enqueue commits messages of the given ordering keys, one each, and
// returns their ids.
func (e *flowEnv) enqueue(t *testing.T, keys ...string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := e.D.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ids []string
	for _, k := range keys {
		id := outbox.NewID()
		ids = append(ids, id)
		if err := e.Outbox.Enqueue(ctx, tx, outbox.Message{ID: id, Tenant: "acme", Type: "order.paid", Key: k,
			Payload: []byte(`{"order":"` + k + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

// runRelay runs a relay with pub until done reports true, then stops it.
func runRelay(t *testing.T, d driver.Driver, pub outbox.Publisher, maxAttempts int, done func() bool) {
	t.Helper()
	r, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: pub, MaxAttempts: maxAttempts,
		PollInterval: 10 * time.Millisecond, BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	defer func() { stop(); <-errc }()
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not get there in 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *flowEnv) stats(t *testing.T) outbox.Stats {
	t.Helper()
	st, err := e.Outbox.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var chartPointRE = regexp.MustCompile(`<circle cx="[^"]+" cy="[^"]+" r="2.5" data-value="([^"]+)">`)

// chartValues reads the values of a chart's first series.
func chartValues(t *testing.T, page, id string) []float64 {
	t.Helper()
	fig := section(t, page, `<figure class="chart" id="`+id+`">`, `</g>`)
	var out []float64
	for _, m := range chartPointRE.FindAllStringSubmatch(fig, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// TestFlowChartsAnOutage: the broker goes down, messages pile up, the
// sampler (driven by the test's clock) sees the backlog grow and age; the
// broker comes back, the relay drains the outbox, and the next sample is
// back at zero. On both databases.
func TestFlowChartsAnOutage(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := newFlowEnv(t, dialect)
			broker := &switchableBroker{}
			e.enqueue(t, "order/1", "order/2", "order/3", "order/4", "order/5")
			// Down: the relay tries, fails as a whole, and keeps the five.
			tries := 0
			runRelay(t, e.D, broker, 0, func() bool { tries++; return tries > 5 })
			if st := e.stats(t); st.Unsent != 5 || st.Dead != 0 {
				t.Fatalf("during the outage the outbox holds %d unsent and %d dead, want 5 and 0", st.Unsent, st.Dead)
			}
			ctx := context.Background()
			for range 3 {
				e.Clock.Add(time.Minute)
				e.Console.SampleOutbox(ctx)
			}
			broker.set(true)
			runRelay(t, e.D, broker, 0, func() bool { return e.stats(t).Unsent == 0 })
			e.Clock.Add(time.Minute)
			e.Console.SampleOutbox(ctx)

			status, page := get(t, e.URL+"/ui/outbox")
			if status != http.StatusOK {
				t.Fatalf("outbox page: %d", status)
			}
			backlog := chartValues(t, page, "chart-backlog")
			if len(backlog) != 4 || backlog[0] != 5 || backlog[2] != 5 || backlog[3] != 0 {
				t.Fatalf("backlog points %v, want [5 5 5 0]", backlog)
			}
			ages := chartValues(t, page, "chart-age")
			if len(ages) != 4 || !(ages[0] > 50 && ages[1] > ages[0] && ages[2] > ages[1]) || ages[3] != 0 {
				t.Errorf("oldest-waiting points %v, want growing from a minute, then 0", ages)
			}
			for _, want := range []string{"4 sample(s)", "survives nothing", `id="samples"`} {
				if !strings.Contains(page, want) {
					t.Errorf("outbox page lacks %q", want)
				}
			}
		})
	}
}

// makeDeadLetters makes dead letters in tenant acme: two under key
// order/7 and one under order/8. It returns their ids in that order.
func (e *flowEnv) makeDeadLetters(t *testing.T) (a, b, c string) {
	t.Helper()
	ids := e.enqueue(t, "order/7", "order/7", "order/8")
	a, b, c = ids[0], ids[1], ids[2]
	// The broker refuses: the first message of each key dies, and the
	// relay holds the rest of the key behind it.
	runRelay(t, e.D, refusingBroker{}, 1, func() bool { return e.stats(t).Dead == 2 })
	// So a key never gets a second dead letter from one relay; older
	// relays and several processes could leave one. Write it as the relay
	// writes a dead letter, through the driver.
	ctx := context.Background()
	tx, err := e.D.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	now := time.Now()
	if err := e.D.OutboxFail(ctx, tx, &driver.OutboxFailParams{ID: b, Tenant: "acme", Key: "order/7", Attempts: 1,
		Error: "broker refused the message (again)", Now: now, HoldUntil: now, Dead: true}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return a, b, c
}

// live reports whether the message's row is live again: not dead, its
// attempts reset.
func (e *flowEnv) live(t *testing.T, id string) bool {
	t.Helper()
	row, err := e.D.OutboxGet(context.Background(), e.D.Reader(), &driver.OutboxGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return row.DeadAt.IsZero() && row.Attempts == 0 && row.SentAt.IsZero()
}

// TestFlowDeadLettersByKey: dead letters are grouped by key; a group's redrive
// and a letter's both ask for confirmation first, and only the confirmed
// post makes the rows live again. On both databases.
func TestFlowDeadLettersByKey(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := newFlowEnv(t, dialect)
			a, b, c := e.makeDeadLetters(t)
			h := e.Console.Handler()
			page := do(t, h, http.MethodGet, "/ui/outbox", loopback, nil).Body.String()
			group7 := section(t, page, `<tbody class="dead-group" data-key="order/7" data-tenant="acme">`, `</tbody>`)
			if !strings.Contains(group7, `<td class="count">2</td>`) || !strings.Contains(group7, a) || !strings.Contains(group7, b) ||
				!strings.Contains(group7, "broker refused the message (again)") {
				t.Fatalf("group order/7:\n%s", group7)
			}
			group8 := section(t, page, `<tbody class="dead-group" data-key="order/8" data-tenant="acme">`, `</tbody>`)
			if !strings.Contains(group8, `<td class="count">1</td>`) || !strings.Contains(group8, c) || strings.Contains(group8, a) {
				t.Fatalf("group order/8:\n%s", group8)
			}
			token := csrfOf(t, page)

			// The group's button: a confirmation naming both letters, and
			// nothing redriven yet.
			group := url.Values{"csrf": {token}, "tenant": {"acme"}, "key": {"order/7"}}
			w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, group)
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `id="confirm-redrive"`) ||
				!strings.Contains(w.Body.String(), a) || !strings.Contains(w.Body.String(), b) {
				t.Fatalf("group confirmation: %d\n%s", w.Code, w.Body)
			}
			if e.live(t, a) || e.live(t, b) {
				t.Fatal("the confirmation page redrove")
			}
			group.Set("confirm", "1")
			w = do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, group)
			if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "redriven_count=2") {
				t.Fatalf("confirmed group redrive: %d %q", w.Code, w.Header().Get("Location"))
			}
			if !e.live(t, a) || !e.live(t, b) || e.live(t, c) {
				t.Fatalf("after the group's redrive: %s live %v, %s live %v, %s live %v (want true, true, false)",
					a, e.live(t, a), b, e.live(t, b), c, e.live(t, c))
			}

			// One letter: the same two steps.
			one := url.Values{"csrf": {token}, "id": {c}}
			if w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, one); w.Code != http.StatusOK || e.live(t, c) {
				t.Fatalf("letter confirmation: %d, live %v", w.Code, e.live(t, c))
			}
			one.Set("confirm", "1")
			if w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, one); w.Code != http.StatusSeeOther || !e.live(t, c) {
				t.Fatalf("confirmed letter redrive: %d, live %v", w.Code, e.live(t, c))
			}
			if st := e.stats(t); st.Dead != 0 || st.Unsent != 3 {
				t.Fatalf("after the redrives: %d dead, %d unsent; want 0 and 3", st.Dead, st.Unsent)
			}
			// A group with nothing left to redrive is not found.
			if w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, group); w.Code != http.StatusNotFound {
				t.Fatalf("redriving an empty group: %d", w.Code)
			}
		})
	}
}

// TestFlowSamplerStopsWithItsContext: Run samples at once, and returns when
// its context ends (TestMain's goleak finds a sampler left running).
func TestFlowSamplerStopsWithItsContext(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := newFlowEnv(t, dialect)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Console.Run(ctx) }()
			deadline := time.Now().Add(30 * time.Second)
			for e.Console.OutboxSamples() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("Run took no sample")
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			// Without an outbox there is nothing to sample: Run returns at once.
			d := drivertest.Open(t, dialect)
			c, err := console.New(console.Config{Driver: d, Ledger: mustLedger(t, d)})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
