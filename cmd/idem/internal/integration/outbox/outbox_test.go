package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
)

// A rolled-back Enqueue leaves nothing; a committed one is published to
// JetStream exactly once, and the row is marked sent.
func TestEnqueueRollbackCommitPublish(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		st := newStream(t, "")

		rolled := msg("k", 0)
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Enqueue(ctx, tx, rolled); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		committed := msg("k", 1)
		enqueue(t, d, ob, committed)
		if n := unsent(t, d); n != 1 {
			t.Fatalf("unsent rows = %d, want 1 (the rolled-back one must not exist)", n)
		}

		r := runRelay(t, d, outbox.RelayConfig{Publisher: st.pub})
		r.Notify()
		waitDrained(t, d)
		got := countByID(st.messages(t))
		if len(got) != 1 || got[committed.ID] != 1 {
			t.Fatalf("stream holds %v, want one copy of %s only", got, committed.ID)
		}
		waitListed(t, ob, d, 1)
		events, _, err := ob.List(ctx, d.Reader(), outbox.ListQuery{Tenant: idem.DefaultTenant})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 || events[0].ID != committed.ID || events[0].PublishedAt == nil {
			t.Fatalf("events = %+v, want the committed message, published", events)
		}
	})
}

// Transaction A begins writing first (a lower id, a lower transaction id)
// but commits after B. The relay, which reads without a cursor, publishes B
// at once and A once it commits. The list holds B back while A is open, so
// that no reader can pass B's cursor and then miss A; after A's commit it
// lists A then B, and a reader that had listed A finds B after A's cursor.
func TestOutOfOrderCommit(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "postgres")
	ctx := context.Background()
	ob := newOutbox(t, d)
	rec := newRecorder(nil)
	r := runRelay(t, d, outbox.RelayConfig{Publisher: rec})

	a, b := msg("a", 1), msg("b", 2) // a's id sorts first
	txA, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	if err := ob.Enqueue(ctx, txA, a); err != nil {
		t.Fatal(err)
	}
	// The driver sends a write no one reads back with the transaction's
	// next statement: this one makes A open on the server, its row written.
	if _, err := txA.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	enqueue(t, d, ob, b)
	r.Notify()
	waitFor(t, "b published", func() bool { c, _, _ := rec.snapshot(); return c[b.ID] == 1 })
	listAll := func() []string {
		var ids []string
		after := ""
		for {
			events, next, err := ob.List(ctx, d.Reader(), outbox.ListQuery{Tenant: idem.DefaultTenant, After: after, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range events {
				ids = append(ids, e.ID)
			}
			if next == "" {
				return ids
			}
			after = next
		}
	}
	if ids := listAll(); len(ids) != 0 {
		t.Fatalf("listed %v while a, which began first, is open: want nothing yet", ids)
	}

	// The relay has published past a's id; a commits now.
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r.Notify()
	waitFor(t, "a published", func() bool { c, _, _ := rec.snapshot(); return c[a.ID] == 1 })
	waitListed(t, ob, d, 2) // past the horizon of every other test's transactions too
	if ids := listAll(); len(ids) != 2 || ids[0] != a.ID || ids[1] != b.ID {
		t.Fatalf("listed %v, want [a b] = [%s %s]", ids, a.ID, b.ID)
	}
	first, next, err := ob.List(ctx, d.Reader(), outbox.ListQuery{Tenant: idem.DefaultTenant, Limit: 1})
	if err != nil || len(first) != 1 || first[0].ID != a.ID {
		t.Fatalf("first page: %+v, %v", first, err)
	}
	rest, _, err := ob.List(ctx, d.Reader(), outbox.ListQuery{Tenant: idem.DefaultTenant, After: next, Limit: 10})
	if err != nil || len(rest) != 1 || rest[0].ID != b.ID {
		t.Fatalf("after cursor %s: %+v, %v", next, rest, err)
	}
}

// A publisher that refuses some attempts: every key's messages still reach
// the broker in enqueue order, no key ever has two in flight, and other
// keys move on meanwhile.
func TestPerKeyOrderUnderRetries(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ob := newOutbox(t, d)
		st := newStream(t, "")
		rec := newRecorder(st.pub)
		rec.fail = func(m outbox.Message, attempt int) error {
			if m.Key != "slow" && len(m.ID)%3 == 0 || attempt > 2 {
				return nil
			}
			if m.Key == "slow" || m.ID[len(m.ID)-1]%2 == 0 {
				return fmt.Errorf("refused attempt %d", attempt)
			}
			return nil
		}
		want := map[string][]string{}
		keys := []string{"slow", "k1", "k2", "k3", "k4"}
		for i := range 10 {
			var batch []outbox.Message
			for _, k := range keys {
				m := msg(k, i)
				want[k] = append(want[k], m.ID)
				batch = append(batch, m)
			}
			enqueue(t, d, ob, batch...)
		}
		r := runRelay(t, d, outbox.RelayConfig{Publisher: rec, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 10})
		r.Notify()
		waitDrained(t, d)

		msgs := st.messages(t)
		byKey := map[string][]string{}
		for _, m := range msgs {
			byKey[m.Key] = append(byKey[m.Key], m.ID)
		}
		for _, k := range keys {
			if fmt.Sprint(byKey[k]) != fmt.Sprint(want[k]) {
				t.Errorf("key %s in stream: %v, want %v", k, byKey[k], want[k])
			}
		}
		calls, _, overlap := rec.snapshot()
		if overlap {
			t.Error("two messages of one key were in flight at once")
		}
		retried := 0
		for _, n := range calls {
			if n > 1 {
				retried++
			}
		}
		if retried == 0 {
			t.Error("no message was retried: the test proves nothing")
		}
	})
}

// A message refused MaxAttempts times becomes a dead letter that holds its
// own key only; redriving it publishes it, then the rest of its key.
func TestDeadLetterBlocksOnlyItsKey(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		var mu sync.Mutex
		refuse := true
		rec := newRecorder(nil)
		poison := msg("bad", 0)
		rec.fail = func(m outbox.Message, attempt int) error {
			mu.Lock()
			defer mu.Unlock()
			if m.ID == poison.ID && refuse {
				return errors.New("poison")
			}
			return nil
		}
		after := msg("bad", 1)
		other := msg("good", 0)
		enqueue(t, d, ob, poison, after, other)
		r := runRelay(t, d, outbox.RelayConfig{Publisher: rec, MaxAttempts: 3, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond})
		r.Notify()
		var dead []outbox.DeadLetter
		waitFor(t, "dead letter", func() bool {
			var err error
			dead, _, err = ob.Dead(ctx, outbox.DeadQuery{Limit: 10})
			return err == nil && len(dead) == 1
		})
		waitFor(t, "other key published", func() bool { c, _, _ := rec.snapshot(); return c[other.ID] == 1 })
		if dead[0].ID != poison.ID || dead[0].Attempts != 3 || dead[0].LastError == "" {
			t.Fatalf("dead letter = %+v", dead[0])
		}
		time.Sleep(50 * time.Millisecond) // give the relay cycles in which it must not publish "after"
		if c, _, _ := rec.snapshot(); c[after.ID] != 0 {
			t.Fatalf("message behind a dead letter was published %d times", c[after.ID])
		}

		mu.Lock()
		refuse = false
		mu.Unlock()
		if err := ob.Redrive(ctx, poison.ID); err != nil {
			t.Fatal(err)
		}
		if err := ob.Redrive(ctx, poison.ID); !errors.Is(err, outbox.ErrNotDead) {
			t.Fatalf("second redrive: %v, want ErrNotDead", err)
		}
		r.Notify()
		waitDrained(t, d)
		_, order, _ := rec.snapshot()
		pos := map[string]int{}
		for i, id := range order {
			pos[id] = i
		}
		if pos[poison.ID] > pos[after.ID] {
			t.Fatalf("after redrive, order %v: poison must precede its successor", order)
		}
	})
}

// Two relays on one Postgres database: every message is in the stream
// exactly once, and no message was even handed to the broker twice.
func TestTwoRelays(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "postgres")
	ob := newOutbox(t, d)
	st := newStream(t, "")
	rec := newRecorder(st.pub)
	r1 := runRelay(t, d, outbox.RelayConfig{Publisher: rec, BatchSize: 50})
	r2 := runRelay(t, d, outbox.RelayConfig{Publisher: rec, BatchSize: 50})
	const n = 600
	for i := range n / 20 {
		var batch []outbox.Message
		for j := range 20 {
			batch = append(batch, msg(fmt.Sprintf("k%d", j%7), i*20+j))
		}
		enqueue(t, d, ob, batch...)
		r1.Notify()
		r2.Notify()
	}
	waitDrained(t, d)
	got := countByID(st.messages(t))
	if len(got) != n {
		t.Fatalf("stream holds %d ids, want %d", len(got), n)
	}
	for id, c := range got {
		if c != 1 {
			t.Fatalf("id %s in stream %d times", id, c)
		}
	}
	calls, _, overlap := rec.snapshot()
	for id, c := range calls {
		if c != 1 {
			t.Fatalf("id %s handed to the broker %d times", id, c)
		}
	}
	if overlap {
		t.Fatal("two messages of one key in flight at once")
	}
}

// While the broker is down nothing is lost and nothing becomes a dead
// letter; when it returns, the backlog drains.
func TestBrokerDown(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		st := newStream(t, "")
		var mu sync.Mutex
		down := true
		rec := newRecorder(st.pub)
		rec.fail = func(outbox.Message, int) error {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return outbox.BrokerUnavailable(errors.New("connection refused"))
			}
			return nil
		}
		r := runRelay(t, d, outbox.RelayConfig{Publisher: rec, MaxAttempts: 1, BackoffMin: time.Millisecond, BackoffMax: 20 * time.Millisecond})
		var ids []string
		for i := range 50 {
			m := msg(fmt.Sprintf("k%d", i%5), i)
			ids = append(ids, m.ID)
			enqueue(t, d, ob, m)
		}
		r.Notify()
		waitFor(t, "attempts during the outage", func() bool { c, _, _ := rec.snapshot(); return len(c) >= 5 })
		time.Sleep(50 * time.Millisecond)
		if dead, _, _ := ob.Dead(ctx, outbox.DeadQuery{Limit: 10}); len(dead) != 0 {
			t.Fatalf("an outage made %d dead letters", len(dead))
		}
		mu.Lock()
		down = false
		mu.Unlock()
		waitDrained(t, d)
		got := countByID(st.messages(t))
		for _, id := range ids {
			if got[id] != 1 {
				t.Fatalf("id %s in stream %d times", id, got[id])
			}
		}
	})
}

func TestEnqueueValidates(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	ob := newOutbox(t, d)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		m    outbox.Message
	}{
		{"no type", outbox.Message{Payload: []byte(`{}`)}},
		{"bad json", outbox.Message{Type: "x", Payload: []byte(`{`)}},
		{"dotted tenant", outbox.Message{Type: "x", Tenant: "a.b", Payload: []byte(`{}`)}},
		{"bad id", outbox.Message{ID: "nope", Type: "x", Payload: []byte(`{}`)}},
		{"wildcard type", outbox.Message{Type: "x.*", Payload: []byte(`{}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			err = ob.Enqueue(ctx, tx, tc.m)
			var me *outbox.MessageError
			if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.As(err, &me) {
				t.Fatalf("err = %v, want a *MessageError", err)
			}
		})
	}
}

// A redrive that lands while a relay's cycle is reading ahead: the
// redriven message still goes out before the later messages of its key.
// The redrive happens inside the cycle's first publish, after the cycle
// judged the key held and while its later messages still lie ahead.
func TestRedriveMidCycle(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ob := newOutbox(t, d)
		poison := msg("k", 0)
		enqueue(t, d, ob, poison)
		refuse := newRecorder(nil)
		refuse.fail = func(outbox.Message, int) error { return errors.New("refused") }
		stop := startStoppable(t, d, outbox.RelayConfig{Publisher: refuse, MaxAttempts: 1})
		waitFor(t, "dead letter", func() bool { s, err := ob.Stats(ctx); return err == nil && s.Dead == 1 })
		stop()

		// 60 messages of other keys, then the dead key's later ones: a
		// relay reading 10 at a time meets them after several read-aheads.
		var batch []outbox.Message
		for i := range 60 {
			batch = append(batch, msg(fmt.Sprintf("o%d", i%6), i))
		}
		var later []string
		for i := 1; i <= 5; i++ {
			m := msg("k", i)
			later = append(later, m.ID)
			batch = append(batch, m)
		}
		enqueue(t, d, ob, batch...)

		var once sync.Once
		rec := newRecorder(nil)
		rec.fail = func(outbox.Message, int) error {
			once.Do(func() {
				if err := ob.Redrive(ctx, poison.ID); err != nil {
					t.Errorf("redrive: %v", err)
				}
			})
			return nil
		}
		r := runRelay(t, d, outbox.RelayConfig{Publisher: rec, BatchSize: 10})
		r.Notify()
		waitDrained(t, d)

		_, order, overlap := rec.snapshot()
		var got []string
		for _, id := range order {
			if id == poison.ID || slices.Contains(later, id) {
				got = append(got, id)
			}
		}
		want := append([]string{poison.ID}, later...)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("key k went out as %v, want %v", got, want)
		}
		if overlap {
			t.Fatal("two messages of one key in flight at once")
		}
	})
}

// A transaction that took its ids first commits while a relay's cycle is
// publishing the rows enqueued after it: the cycle's next reads continue
// after their last row, and still find the late row behind them (its
// transaction had not ended when the cycle began), so it goes out within
// the cycle, once, and before the later messages of its key.
func TestLateCommitMidCycle(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "postgres")
	ctx := context.Background()
	ob := newOutbox(t, d)

	late := msg("late", 0) // the oldest id of all
	txA, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	if err := ob.Enqueue(ctx, txA, late); err != nil {
		t.Fatal(err)
	}
	var batch []outbox.Message
	for i := range 100 {
		batch = append(batch, msg(fmt.Sprintf("o%d", i%6), i))
	}
	var after []string // the late key's later messages, enqueued last
	for i := 1; i <= 3; i++ {
		m := msg("late", i)
		after = append(after, m.ID)
		batch = append(batch, m)
	}
	enqueue(t, d, ob, batch...)

	var once sync.Once
	rec := newRecorder(nil)
	rec.fail = func(outbox.Message, int) error {
		once.Do(func() {
			if err := txA.Commit(ctx); err != nil {
				t.Errorf("commit: %v", err)
			}
		})
		return nil
	}
	r := runRelay(t, d, outbox.RelayConfig{Publisher: rec, BatchSize: 10})
	r.Notify()
	waitFor(t, "all sent", func() bool { s, err := ob.Stats(ctx); return err == nil && s.Unsent == 0 && s.Dead == 0 })

	calls, order, overlap := rec.snapshot()
	if len(calls) != 104 {
		t.Fatalf("%d messages handed to the broker, want 104", len(calls))
	}
	for id, c := range calls {
		if c != 1 {
			t.Fatalf("id %s handed to the broker %d times", id, c)
		}
	}
	at := map[string]int{}
	for i, id := range order {
		at[id] = i
	}
	if at[late.ID] >= 50 {
		t.Fatalf("the late row went out %dth of 104: the cycle passed it over", at[late.ID]+1)
	}
	for _, id := range after {
		if at[id] < at[late.ID] {
			t.Fatalf("a later message of the late key went out before it: %v", order)
		}
	}
	if overlap {
		t.Fatal("two messages of one key in flight at once")
	}
}
