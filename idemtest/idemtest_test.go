package idemtest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/natspub"
)

func TestMain(m *testing.M) {
	idemtest.RelayMain("good", runRelay(relayGood))
	idemtest.RelayMain("short-window", runRelay(relayShortWindow))
	idemtest.RelayMain("fresh-ids", runRelay(relayFreshIDs))
	os.Exit(idemtest.Main(m))
}

// fakeTB records what a helper reports, so that a test can assert that the
// helper failed, and why.
type fakeTB struct {
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (f *fakeTB) Helper()             {}
func (f *fakeTB) Logf(string, ...any) {}
func (f *fakeTB) Cleanup(fn func())   { f.mu.Lock(); f.cleanups = append(f.cleanups, fn); f.mu.Unlock() }
func (f *fakeTB) Errorf(s string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(s, a...))
}

func (f *fakeTB) Fatalf(s string, a ...any) {
	f.Errorf(s, a...)
	runtime.Goexit()
}

func (f *fakeTB) report() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.errs, "\n")
}

// capture runs fn against a fakeTB (in a goroutine of its own, so Fatalf
// can stop it) and returns what it reported.
func capture(fn func(tb idemtest.TB)) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return f.report()
}

// shop is a real database with an orders table: the side effect counted.
type shop struct {
	d driver.Driver
	// With race set, checkThenInsert holds a copy that found no record
	// until a second one has (checked counts them).
	race    bool
	checked atomic.Int32
}

func newShop(t *testing.T) *shop {
	t.Helper()
	ctx := context.Background()
	d, err := postgres.Open(ctx, postgres.Config{URL: idemtest.Postgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	s := &shop{d: d}
	s.exec(t, `CREATE TABLE orders (id bigserial PRIMARY KEY, ref text NOT NULL)`)
	s.exec(t, `CREATE TABLE seen (key text NOT NULL, status int NOT NULL, body bytea NOT NULL)`)
	return s
}

func (s *shop) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func (s *shop) orders() int {
	ctx := context.Background()
	tx, err := s.d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		panic(err)
	}
	return n
}

// placeOrder is the business handler: it inserts an order through the
// transaction idemhttp hands it, or through one of its own when unguarded.
func (s *shop) placeOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	tx := idemhttp.Tx(ctx)
	if tx == nil {
		own, err := s.d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer own.Rollback(ctx)
		defer own.Commit(ctx)
		tx = own
	}
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO orders (ref) VALUES ($1) RETURNING id`, "o").Scan(&id); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order_id":%d}`, id)
}

// checkThenInsert dedupes in Go: it looks the key up, and inserts when it
// is not there. Sequential copies are caught; concurrent ones race between
// the read and the insert (principle 1 says why the database must decide).
func (s *shop) checkThenInsert(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := r.Header.Get(idemhttp.HeaderKey)
	tx, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	defer tx.Rollback(ctx)
	var n int
	_ = tx.QueryRow(ctx, `SELECT count(*) FROM seen WHERE key = $1`, key).Scan(&n)
	if n > 0 {
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `{"status":"already done"}`)
		return
	}
	// The work, long enough for a second copy to check too: the race is
	// what this handler shows, so it waits for it (a loaded machine could
	// otherwise run the copies one after another).
	s.checked.Add(1)
	for deadline := time.Now().Add(5 * time.Second); s.race && s.checked.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	tx.Exec(ctx, `INSERT INTO orders (ref) VALUES ($1)`, key)
	tx.Exec(ctx, `INSERT INTO seen (key, status, body) VALUES ($1, 201, '')`, key)
	if err := tx.Commit(ctx); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, `{"status":"created"}`)
}

func guarded(t *testing.T, s *shop, h http.HandlerFunc) http.Handler {
	t.Helper()
	k, err := idem.New(s.d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := idemhttp.New(idemhttp.Config{Keeper: k})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", m.Wrap(h))
	return mux
}

func orderRequest() *http.Request {
	r, _ := http.NewRequest("POST", "http://shop.test/orders", strings.NewReader(`{"sku":"tea","qty":1}`))
	r.Header.Set(idemhttp.HeaderKey, "order-1")
	r.Header.Set("Content-Type", "application/json")
	return r
}

func TestSendTwice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler func(t *testing.T, s *shop) http.Handler
		want    []string // substrings of the failure report; none means pass
	}{
		{"behind idemhttp passes", func(t *testing.T, s *shop) http.Handler { return guarded(t, s, s.placeOrder) }, nil},
		{"insert without the keeper fails", func(t *testing.T, s *shop) http.Handler { return http.HandlerFunc(s.placeOrder) },
			[]string{"side effect happened again", "different body", "lacks Idempotent-Replayed"}},
		{"check-then-insert with another answer fails", func(t *testing.T, s *shop) http.Handler { return http.HandlerFunc(s.checkThenInsert) },
			[]string{"status 200, the first 201", "lacks Idempotent-Replayed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t)
			h := tt.handler(t, s)
			report := capture(func(tb idemtest.TB) { idemtest.SendTwice(tb, h, orderRequest(), s.orders) })
			assertReport(t, report, tt.want)
			if tt.want == nil && s.orders() != 1 {
				t.Errorf("orders = %d, want 1", s.orders())
			}
		})
	}
}

func TestSendConcurrently(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler func(t *testing.T, s *shop) http.Handler
		want    []string
	}{
		{"behind idemhttp passes", func(t *testing.T, s *shop) http.Handler { return guarded(t, s, s.placeOrder) }, nil},
		{"check-then-insert races and fails", func(t *testing.T, s *shop) http.Handler {
			s.race = true
			return http.HandlerFunc(s.checkThenInsert)
		},
			[]string{"concurrent copies changed the count by"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t)
			h := tt.handler(t, s)
			report := capture(func(tb idemtest.TB) { idemtest.SendConcurrently(tb, h, orderRequest(), 8, s.orders) })
			assertReport(t, report, tt.want)
		})
	}
}

// forgetful runs the work every time: a keeper that stores nothing.
type forgetful struct{ d driver.Driver }

func (f forgetful) Do(ctx context.Context, req idem.Request, work idem.Work) (idem.Result, error) {
	tx, err := f.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return idem.Result{}, err
	}
	defer tx.Rollback(ctx)
	o, err := work(ctx, tx)
	if err != nil {
		return idem.Result{}, err
	}
	return idem.Result{Outcome: o}, tx.Commit(ctx)
}

func TestDoTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	work := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO orders (ref) VALUES ('w') RETURNING id`).Scan(&id); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{Status: 201, Body: fmt.Appendf(nil, `{"order_id":%d}`, id)}, nil
	}
	req := idem.Request{Key: idem.Key{Scope: "acme", Operation: "place-order", Key: "order-1"}, Body: []byte(`{"sku":"tea"}`)}
	tests := []struct {
		name       string
		concurrent bool
		doer       func(t *testing.T, s *shop) idemtest.Doer
		want       []string
	}{
		{"keeper twice passes", false, keeper, nil},
		{"keeper concurrently passes", true, keeper, nil},
		{"forgetful twice fails", false, func(t *testing.T, s *shop) idemtest.Doer { return forgetful{s.d} },
			[]string{"side effect happened again", "different body", "not marked Replayed"}},
		{"forgetful concurrently fails", true, func(t *testing.T, s *shop) idemtest.Doer { return forgetful{s.d} },
			[]string{"changed the count by 8", "8 of 8 concurrent Do calls were not replays"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t)
			d := tt.doer(t, s)
			report := capture(func(tb idemtest.TB) {
				if tt.concurrent {
					idemtest.DoConcurrently(tb, d, req, 8, work, s.orders)
				} else {
					idemtest.DoTwice(tb, d, req, work, s.orders)
				}
			})
			assertReport(t, report, tt.want)
		})
	}
}

func keeper(t *testing.T, s *shop) idemtest.Doer {
	k, err := idem.New(s.d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func assertReport(t *testing.T, report string, want []string) {
	t.Helper()
	if want == nil {
		if report != "" {
			t.Errorf("the helper failed on an idempotent subject:\n%s", report)
		}
		return
	}
	if report == "" {
		t.Fatalf("the helper passed a subject that is not idempotent")
	}
	for _, w := range want {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q:\n%s", w, report)
		}
	}
}

// Environment of the relay children.
const (
	envDB   = "IDEMTEST_TEST_DB"
	envNATS = "IDEMTEST_TEST_NATS"
)

// Relay children: the real thing, and two bugs the kill test must catch.
const (
	relayGood = iota
	// relayShortWindow keeps JetStream's duplicate window (1s) shorter than
	// the relay's failover time (lease 2s): the republish after a crash
	// falls outside the window and is stored again.
	relayShortWindow
	// relayFreshIDs gives every publish a new message id instead of the
	// outbox row's: the broker cannot drop a republish, and consumers
	// cannot tell which outbox message they got.
	relayFreshIDs
)

// runRelay is the child's main: outbox.Relay over natspub, as idem relay
// runs it, or with one of the bugs above.
func runRelay(kind int) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		d, err := postgres.Open(ctx, postgres.Config{URL: os.Getenv(envDB), MaxConns: 4})
		if err != nil {
			return err
		}
		defer d.Close()
		nc, err := nats.Connect(os.Getenv(envNATS))
		if err != nil {
			return err
		}
		cfg, lease := natspub.Config{CloseConn: true}, time.Second
		if kind == relayShortWindow {
			cfg.Duplicates, lease = time.Second, 2*time.Second
		}
		pub, err := natspub.New(ctx, nc, cfg)
		if err != nil {
			return err
		}
		defer pub.Close()
		var p outbox.Publisher = pub
		if kind == relayFreshIDs {
			p = freshIDPublisher{pub}
		}
		r, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: p, LeaseTTL: lease, PollInterval: 10 * time.Millisecond})
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}
}

type freshIDPublisher struct{ outbox.Publisher }

func (f freshIDPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		m.ID = outbox.NewID()
		out[i] = m
	}
	return f.Publisher.Publish(ctx, out)
}

func TestKillRelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		child, failpoint string
		timeout          time.Duration
		want             []string // substrings of the failure report; none means pass
		stored           int      // messages the stream holds at the end
	}{
		{"good", idemtest.BeforePublish, 20 * time.Second, nil, 5},
		{"good", idemtest.AfterPublish, 20 * time.Second, nil, 5},
		{"short-window", idemtest.AfterPublish, 20 * time.Second, []string{"5 of 5 message(s) reached the broker more than once"}, 10},
		{"fresh-ids", idemtest.AfterPublish, 20 * time.Second, []string{"5 of 5 message(s) never reached the broker with their outbox id"}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.child+"/"+tt.failpoint, func(t *testing.T) {
			t.Parallel()
			dbURL := idemtest.Postgres(t)
			natsURL, messages := idemtest.NATS(t)
			ids := enqueue(t, dbURL, 5)
			report := capture(func(tb idemtest.TB) {
				idemtest.KillRelay(tb, idemtest.RelayCrash{
					Command:   idemtest.RelayCommand(tt.child, envDB+"="+dbURL, envNATS+"="+natsURL),
					Failpoint: tt.failpoint,
					DB:        dbURL,
					Messages:  messages,
					Want:      ids,
					Timeout:   tt.timeout,
				})
			})
			assertReport(t, report, tt.want)
			if n := len(messages()); n != tt.stored {
				t.Errorf("the broker holds %d messages, want %d", n, tt.stored)
			}
		})
	}
}

func enqueue(t *testing.T, dbURL string, n int) []string {
	t.Helper()
	ctx := context.Background()
	d, err := postgres.Open(ctx, postgres.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ids []string
	for i := range n {
		id := outbox.NewID()
		ids = append(ids, id)
		if err := ob.Enqueue(ctx, tx, outbox.Message{ID: id, Type: "order.placed", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}
