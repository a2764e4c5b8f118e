package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/embeddednats"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/natspub"
)

// TestMain runs the tests on a throwaway Postgres, then fails the run if a
// goroutine outlived them (a relay, consumer or connection left running).
func TestMain(m *testing.M) {
	code := testpg.Main(m)
	stopRabbit()
	code = leakcheck.After(code)
	os.Exit(code)
}

// stream is a JetStream stream on an embedded server of the test's own.
type stream struct {
	srv *embeddednats.Server
	pub *natspub.Publisher
	js  jetstream.JetStream
}

func newStream(t testing.TB, listen string) *stream {
	t.Helper()
	srv, err := embeddednats.Start(embeddednats.Config{DataDir: t.TempDir(), Listen: listen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := natspub.New(context.Background(), nc, natspub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	return &stream{srv: srv, pub: pub, js: js}
}

type streamMsg struct {
	ID, Subject, Key string
	Payload          []byte
}

// messages reads the whole stream, in stream order.
func (s *stream) messages(t testing.TB) []streamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := s.js.Stream(ctx, "IDEM")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []streamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %d: %v", seq, err)
		}
		out = append(out, streamMsg{ID: m.Header.Get("Nats-Msg-Id"), Subject: m.Subject,
			Key: m.Header.Get(natspub.HeaderKey), Payload: m.Data})
	}
	return out
}

// countByID counts the stream's copies of each message id.
func countByID(msgs []streamMsg) map[string]int {
	c := map[string]int{}
	for _, m := range msgs {
		c[m.ID]++
	}
	return c
}

// recorder wraps a publisher: it counts each message's publish calls, can
// refuse attempts, and checks that no key has two messages in flight.
type recorder struct {
	inner outbox.Publisher
	mu    sync.Mutex
	calls map[string]int
	order []string // ids in the order the inner publisher accepted them
	// fail, when set, decides whether an attempt is refused.
	fail     func(m outbox.Message, attempt int) error
	inflight map[string]bool
	overlap  bool
}

func newRecorder(inner outbox.Publisher) *recorder {
	return &recorder{inner: inner, calls: map[string]int{}, inflight: map[string]bool{}}
}

func (r *recorder) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	var pass []outbox.Message
	var idx []int
	r.mu.Lock()
	for i, m := range msgs {
		k := m.Tenant + "/" + m.Key
		if r.inflight[k] {
			r.overlap = true
		}
		r.inflight[k] = true
		r.calls[m.ID]++
		if r.fail != nil {
			if err := r.fail(m, r.calls[m.ID]); err != nil {
				errs[i] = err
				continue
			}
		}
		pass = append(pass, m)
		idx = append(idx, i)
	}
	r.mu.Unlock()
	var res []error
	if r.inner != nil && len(pass) > 0 {
		res = r.inner.Publish(ctx, pass)
	} else {
		res = make([]error, len(pass))
	}
	r.mu.Lock()
	for j, i := range idx {
		errs[i] = res[j]
		if res[j] == nil {
			r.order = append(r.order, msgs[i].ID)
		}
	}
	for _, m := range msgs {
		delete(r.inflight, m.Tenant+"/"+m.Key)
	}
	r.mu.Unlock()
	return errs
}

func (r *recorder) Close() error { return nil }

func (r *recorder) snapshot() (map[string]int, []string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := make(map[string]int, len(r.calls))
	for k, v := range r.calls {
		c[k] = v
	}
	return c, append([]string(nil), r.order...), r.overlap
}

// runRelay runs a relay until the test ends.
func runRelay(t testing.TB, d driver.Driver, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	r, err := outbox.NewRelay(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline (a hang, not a speed check).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitDrained waits until the outbox holds nothing unsent. It fails when
// the backlog has not shrunk for 30s (a relay that is stuck), not after a
// fixed total: on a loaded 2-core machine SQLite under -race drains a
// backlog at a few dozen messages a second, and 1200 took longer than 30s.
func waitDrained(t testing.TB, d driver.Driver) {
	t.Helper()
	least, since := unsent(t, d), time.Now()
	for least != 0 {
		if time.Since(since) > 30*time.Second {
			t.Fatalf("timed out waiting for the backlog to drain: %d unsent, none sent for 30s", least)
		}
		time.Sleep(5 * time.Millisecond)
		if n := unsent(t, d); n < least {
			least, since = n, time.Now()
		}
	}
}

// waitListed waits until List shows at least n of the default tenant's
// messages. On Postgres a committed message is listed once every
// transaction older than its own has ended, in the whole cluster (the
// list's horizon is the snapshot's xmin, see docs/outbox.md): the tests
// share one cluster, and another test's open transaction holds a message
// back for a while after its commit.
func waitListed(t testing.TB, ob *outbox.Outbox, d driver.Driver, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d message(s) listed", n), func() bool {
		events, _, err := ob.List(context.Background(), d.Reader(), outbox.ListQuery{Tenant: idem.DefaultTenant, Limit: outbox.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		return len(events) >= n
	})
}

func enqueue(t testing.TB, d driver.Driver, ob *outbox.Outbox, msgs ...outbox.Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := ob.Enqueue(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func msg(key string, n int) outbox.Message {
	return outbox.Message{ID: outbox.NewID(), Type: "test.happened", Key: key,
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"key":%q}`, n, key))}
}

func newOutbox(t testing.TB, d driver.Driver) *outbox.Outbox {
	t.Helper()
	// Redrives wait 10ms rather than 5s: a relay cycle judges the key held
	// all the same (TestRedriveMidCycle).
	ob, err := outbox.New(d, outbox.Config{RedriveDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// unsent counts rows not yet marked sent.
func unsent(t testing.TB, d driver.Driver) int64 {
	t.Helper()
	s, err := d.OutboxStats(context.Background(), d.Reader())
	if err != nil {
		t.Fatal(err)
	}
	return s.Unsent
}
