package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
)

// A backlog many batches long drains through the pipelined relay (the next
// batch read while the current one publishes) with a key that is refused
// now and then: each message is handed to the broker once unless it was
// refused, each key's messages reach the stream in enqueue order, and no
// key ever has two messages in flight.
func TestPipelinedDrain(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ob := newOutbox(t, d)
		st := newStream(t, "")
		rec := newRecorder(st.pub)
		rec.fail = func(m outbox.Message, attempt int) error {
			if m.Key == "k3" && attempt == 1 && m.Payload[6]%4 == 0 {
				return errors.New("refused once")
			}
			return nil
		}
		const n = 1200
		want := map[string][]string{}
		for i := 0; i < n; i += 100 {
			var batch []outbox.Message
			for j := i; j < i+100; j++ {
				m := msg(fmt.Sprintf("k%d", j%7), j)
				want[m.Key] = append(want[m.Key], m.ID)
				batch = append(batch, m)
			}
			enqueue(t, d, ob, batch...)
		}
		r := runRelay(t, d, outbox.RelayConfig{Publisher: rec, BatchSize: 40,
			BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond})
		r.Notify()
		waitDrained(t, d)

		byKey := map[string][]string{}
		got := st.messages(t)
		for _, m := range got {
			byKey[m.Key] = append(byKey[m.Key], m.ID)
		}
		if len(got) != n {
			t.Fatalf("stream holds %d messages, want %d", len(got), n)
		}
		for k, ids := range want {
			if fmt.Sprint(byKey[k]) != fmt.Sprint(ids) {
				t.Fatalf("key %s out of order in the stream", k)
			}
		}
		calls, _, overlap := rec.snapshot()
		refused := 0
		for id, c := range calls {
			switch {
			case c == 2:
				refused++
			case c != 1:
				t.Fatalf("id %s handed to the broker %d times", id, c)
			}
		}
		if refused == 0 {
			t.Fatal("no message was refused: the test proves nothing about failures mid-pipeline")
		}
		if overlap {
			t.Fatal("two messages of one key in flight at once")
		}
	})
}

// The relay's Prometheus metrics, read back from a registry: the backlog
// and its oldest age while the broker is down (outages are no failures),
// then published, failed and dead-lettered counts, then the gauges after
// the drain.
func TestRelayMetrics(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		reg := prometheus.NewRegistry()
		poison := msg("bad", 0)
		msgs := []outbox.Message{poison}
		for i := range 10 {
			msgs = append(msgs, msg(fmt.Sprintf("k%d", i), i))
		}
		enqueue(t, d, ob, msgs...)

		// The broker is down, and the relay's clock is an hour ahead.
		down := newRecorder(nil)
		down.fail = func(outbox.Message, int) error { return outbox.BrokerUnavailable(errors.New("connection refused")) }
		stop := startStoppable(t, d, outbox.RelayConfig{Publisher: down, Registerer: reg,
			BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
			Clock: func() time.Time { return time.Now().Add(time.Hour) }})
		waitFor(t, "backlog gauge", func() bool { return gaugeIs(t, reg, "idem_outbox_backlog", 11) })
		waitFor(t, "attempts during the outage", func() bool { c, _, _ := down.snapshot(); return len(c) > 0 })
		if age := metric(t, reg, "idem_outbox_oldest_unsent_age_seconds"); age < 3590 || age > 3700 {
			t.Fatalf("oldest unsent age = %vs, want about 3600", age)
		}
		if s := metric(t, reg, "idem_outbox_relay_shards"); s != driver.OutboxShards {
			t.Fatalf("shards gauge = %v, want %d", s, driver.OutboxShards)
		}
		if v := metric(t, reg, "idem_outbox_dead_letters"); v != 0 {
			t.Fatalf("during an outage idem_outbox_dead_letters = %v, want 0", v)
		}
		stop()
		for _, name := range []string{"idem_outbox_published_total", "idem_outbox_publish_failures_total", "idem_outbox_dead_lettered_total"} {
			if v := metric(t, reg, name); v != 0 {
				t.Fatalf("during an outage %s = %v, want 0", name, v)
			}
		}
		// A stopped relay leases no shard, so it reports no database figures.
		if _, ok := lookupMetric(t, reg, "idem_outbox_backlog"); ok {
			t.Fatal("a stopped relay still exports the backlog")
		}

		// The broker is back and refuses the poison twice: a dead letter.
		rec := newRecorder(nil)
		rec.fail = func(m outbox.Message, _ int) error {
			if m.ID == poison.ID {
				return errors.New("poison")
			}
			return nil
		}
		stop = startStoppable(t, d, outbox.RelayConfig{Publisher: rec, Registerer: reg, MaxAttempts: 2,
			BackoffMin: time.Millisecond, BackoffMax: time.Millisecond})
		waitFor(t, "dead letter", func() bool { dead, _, _ := ob.Dead(ctx, outbox.DeadQuery{Limit: 10}); return len(dead) == 1 })
		waitDrained(t, d)
		stop()
		for name, want := range map[string]float64{
			"idem_outbox_published_total":        10,
			"idem_outbox_publish_failures_total": 2,
			"idem_outbox_dead_lettered_total":    1,
		} {
			if v := metric(t, reg, name); v != want {
				t.Errorf("%s = %v, want %v", name, v, want)
			}
		}

		// A fresh relay refreshes the gauges when it starts.
		stop = startStoppable(t, d, outbox.RelayConfig{Publisher: newRecorder(nil), Registerer: reg})
		waitFor(t, "gauges after the drain", func() bool {
			return gaugeIs(t, reg, "idem_outbox_backlog", 0) && gaugeIs(t, reg, "idem_outbox_dead_letters", 1)
		})
		if age := metric(t, reg, "idem_outbox_oldest_unsent_age_seconds"); age != 0 {
			t.Fatalf("oldest unsent age with no backlog = %v, want 0", age)
		}
		stop()
	})
}

// Several relays share one database: the database-wide gauges are exported
// by the one relay leasing shard 0, so a sum over every process counts the
// backlog once; when that relay stops, the relay that takes shard 0 over
// reports them instead.
func TestRelayStatsReportedOnce(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ob := newOutbox(t, d)
		var msgs []outbox.Message
		for i := range 7 {
			msgs = append(msgs, msg(fmt.Sprintf("k%d", i), i))
		}
		enqueue(t, d, ob, msgs...)

		// The broker is down, so the backlog stays at 7.
		down := newRecorder(nil)
		down.fail = func(outbox.Message, int) error { return outbox.BrokerUnavailable(errors.New("connection refused")) }
		regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
		stops := make([]func(), 2)
		for i, reg := range regs {
			stops[i] = startStoppable(t, d, outbox.RelayConfig{Publisher: down, Registerer: reg,
				Owner: fmt.Sprintf("relay-%d", i), LeaseTTL: time.Second,
				BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})
		}
		half := float64(driver.OutboxShards / 2)
		waitFor(t, "shards shared evenly", func() bool {
			return gaugeIs(t, regs[0], "idem_outbox_relay_shards", half) && gaugeIs(t, regs[1], "idem_outbox_relay_shards", half)
		})
		reporters := func() []int {
			var out []int
			for i, reg := range regs {
				if _, ok := lookupMetric(t, reg, "idem_outbox_backlog"); ok {
					out = append(out, i)
				}
			}
			return out
		}
		waitFor(t, "one reporter", func() bool { r := reporters(); return len(r) == 1 && gaugeIs(t, regs[r[0]], "idem_outbox_backlog", 7) })
		for _, name := range []string{"idem_outbox_oldest_unsent_age_seconds", "idem_outbox_dead_letters"} {
			if _, ok := lookupMetric(t, regs[1-reporters()[0]], name); ok {
				t.Fatalf("the relay without shard 0 exports %s", name)
			}
		}

		// The reporter stops: the other relay takes shard 0 and reports.
		was := reporters()[0]
		stops[was]()
		if _, ok := lookupMetric(t, regs[was], "idem_outbox_backlog"); ok {
			t.Fatal("a stopped relay still exports the backlog")
		}
		waitFor(t, "the other relay reports", func() bool { return gaugeIs(t, regs[1-was], "idem_outbox_backlog", 7) })
	})
}

// Retention deletes published rows older than Retention, RetentionBatch
// rows per statement, as many statements as it takes, and keeps unsent
// rows and dead letters whatever their age.
func TestRetention(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		clock := &fakeClock{t: time.Now()}
		poison := msg("bad", 0)
		batch := []outbox.Message{poison}
		for i := range 40 {
			batch = append(batch, msg(fmt.Sprintf("k%d", i), i))
		}
		enqueue(t, d, ob, batch...)
		rec := newRecorder(nil)
		rec.fail = func(m outbox.Message, _ int) error {
			if m.ID == poison.ID {
				return errors.New("poison")
			}
			return nil
		}
		cfg := outbox.RelayConfig{Publisher: rec, MaxAttempts: 1, Clock: clock.now,
			Retention: time.Minute, RetentionBatch: 3, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond}
		stop := startStoppable(t, d, cfg)
		waitDrained(t, d)
		stop()
		waitListed(t, ob, d, 41)
		if sent, total := countRows(t, ob, d); sent != 40 || total != 41 {
			t.Fatalf("%d sent of %d rows before retention, want 40 of 41", sent, total)
		}

		// One more row, unsent because the broker is down; two minutes
		// later the published rows are past retention.
		late := msg("late", 0)
		enqueue(t, d, ob, late)
		waitListed(t, ob, d, 42)
		down := newRecorder(nil)
		down.fail = func(outbox.Message, int) error { return outbox.BrokerUnavailable(errors.New("connection refused")) }
		cfg.Publisher = down
		clock.advance(2 * time.Minute)
		stop = startStoppable(t, d, cfg)
		defer stop()
		// The clock stands still, so only the first pass runs: it takes 14
		// statements of 3 (ten were a pass's bound once, which left a busy
		// outbox growing).
		waitFor(t, "a retention pass", func() bool { sent, _ := countRows(t, ob, d); return sent == 0 })
		if _, total := countRows(t, ob, d); total != 2 {
			t.Fatalf("%d rows remain, want 2 (the unsent row and the dead letter)", total)
		}
		s, err := ob.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Unsent != 1 || s.Dead != 1 {
			t.Fatalf("stats %+v, want 1 unsent and 1 dead", s)
		}
	})
}

// A retention pass runs beside the publishing: while its statement is held
// up in the database, messages enqueued then are still published. In the
// publishing loop, as it once was, a pass of many statements held every
// message back until it ended. PostgreSQL only: SQLite's one writer would
// be held with the statement, and the enqueue would wait for it.
func TestRetentionBesidePublishing(t *testing.T) {
	d := drivertest.Open(t, "postgres")
	ob := newOutbox(t, d)
	held := &holdRetention{Driver: d, entered: make(chan struct{}), release: make(chan struct{})}
	rec := newRecorder(nil)
	startStoppable(t, held, outbox.RelayConfig{Publisher: rec, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})
	<-held.entered // the first pass, at start
	defer close(held.release)
	m := msg("while-retaining", 1)
	enqueue(t, d, ob, m)
	waitFor(t, "the message published during the pass", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.calls[m.ID] == 1
	})
}

// holdRetention is a driver whose first retention statement waits for
// release.
type holdRetention struct {
	driver.Driver
	once             sync.Once
	entered, release chan struct{}
}

func (h *holdRetention) OutboxDeleteSent(ctx context.Context, tx driver.Tx, p *driver.OutboxDeleteSentParams) (int, error) {
	h.once.Do(func() {
		close(h.entered)
		<-h.release
	})
	return h.Driver.OutboxDeleteSent(ctx, tx, p)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// startStoppable runs a relay until the returned stop is called (at the
// latest when the test ends); stop returns once Run has returned.
func startStoppable(t *testing.T, d driver.Driver, cfg outbox.RelayConfig) func() {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	r, err := outbox.NewRelay(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// metric reads one unlabelled gauge or counter from reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, ok := lookupMetric(t, reg, name)
	if !ok {
		t.Fatalf("registry has no metric %s", name)
	}
	return v
}

// lookupMetric reads one unlabelled gauge or counter from reg, if reg
// exports it.
func lookupMetric(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue(), true
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
	}
	return 0, false
}

// gaugeIs reports whether reg exports name with value want.
func gaugeIs(t *testing.T, reg *prometheus.Registry, name string, want float64) bool {
	v, ok := lookupMetric(t, reg, name)
	return ok && v == want
}

// countRows counts the default tenant's rows and those of them published.
func countRows(t *testing.T, ob *outbox.Outbox, d driver.Driver) (sent, total int) {
	t.Helper()
	events, _, err := ob.List(context.Background(), d.Reader(), outbox.ListQuery{Tenant: idem.DefaultTenant, Limit: outbox.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.PublishedAt != nil {
			sent++
		}
	}
	return sent, len(events)
}

// On Postgres a lease's expiry is the database's clock's business: a relay
// whose host clock runs an hour ahead does not see a live relay's leases as
// expired, and takes no shard from it.
func TestLeaseUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "postgres")
	ctx := context.Background()
	acquire := func(owner string, now time.Time) []int {
		t.Helper()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		got, err := d.OutboxShardAcquire(ctx, tx, &driver.OutboxShardParams{Owner: owner, Now: now,
			Until: now.Add(30 * time.Second), TTL: 30 * time.Second, Limit: driver.OutboxShards})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := acquire("a", time.Now()); len(got) != driver.OutboxShards {
		t.Fatalf("first relay acquired %d shards, want %d", len(got), driver.OutboxShards)
	}
	if got := acquire("skewed", time.Now().Add(time.Hour)); len(got) != 0 {
		t.Fatalf("a relay with its clock an hour ahead took %d live shards", len(got))
	}
}

// Retention deletes a key's expired hold only an hour after it expired: a
// relay cycle elsewhere may have judged the key held at its start, and the
// hold must not vanish under it.
func TestRetentionKeepsRecentHolds(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ob := newOutbox(t, d)
		clock := &fakeClock{t: time.Now()}
		poison, ok := msg("bad", 0), msg("good", 0)
		enqueue(t, d, ob, poison, ok)
		refuse := newRecorder(nil)
		refuse.fail = func(m outbox.Message, _ int) error {
			if m.ID == poison.ID {
				return errors.New("refused")
			}
			return nil
		}
		cfg := outbox.RelayConfig{Publisher: refuse, MaxAttempts: 100, Clock: clock.now, Retention: time.Minute,
			BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond}
		stop := startStoppable(t, d, cfg)
		waitFor(t, "a refusal and a publish", func() bool { c, _, _ := refuse.snapshot(); return c[poison.ID] == 1 && c[ok.ID] == 1 })
		stop()
		if n := holds(t, d); n != 1 {
			t.Fatalf("%d holds after the refusal, want 1", n)
		}

		// Ten minutes on, the hold expired long ago for its key, and the
		// published row is past retention: the pass deletes the row, keeps
		// the hold.
		clock.advance(10 * time.Minute)
		cfg.Publisher = newRecorder(nil)
		stop = startStoppable(t, d, cfg)
		waitFor(t, "the published row deleted", func() bool { _, total := countRows(t, ob, d); return total == 1 })
		if n := holds(t, d); n != 1 {
			t.Fatalf("%d holds ten minutes after expiry, want 1 (kept for an hour)", n)
		}
		clock.advance(2 * time.Hour)
		waitFor(t, "the hold deleted", func() bool { return holds(t, d) == 0 })
		stop()
	})
}

func holds(t *testing.T, d driver.Driver) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), "SELECT count(*) FROM idem_outbox_holds").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
