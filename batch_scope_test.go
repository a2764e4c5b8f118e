package idem_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
)

// reqIn is req in another scope: the service's tenant.
func reqIn(scope, key, body string) idem.Request {
	r := req(key, body)
	r.Key.Scope = scope
	return r
}

// gates replaces a rig's batch hook: it records each transaction's keys
// as the rig's does, sends them on started, and holds a transaction whose
// first key is gated, before it begins, until the test opens that gate:
// the batch keeps its place without touching the database.
type gates struct {
	t       *testing.T
	started chan []string
	shut    map[string]chan struct{} // not changed after gate returns

	mu     sync.Mutex
	opened map[string]bool
}

func (r *rig) gate(keys ...string) *gates {
	g := &gates{t: r.t, started: make(chan []string, 100), shut: map[string]chan struct{}{}, opened: map[string]bool{}}
	for _, k := range keys {
		g.shut[k] = make(chan struct{})
	}
	idem.SetBatchHook(r.b, func(keys []idem.Key) {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = k.Key
		}
		r.mu.Lock()
		r.attempts = append(r.attempts, names)
		r.mu.Unlock()
		g.started <- names
		if c, ok := g.shut[names[0]]; ok {
			<-c
		}
	})
	// Before the batcher's Close (an earlier cleanup, so a later one).
	r.t.Cleanup(func() {
		for k := range g.shut {
			g.open(k)
		}
	})
	return g
}

func (g *gates) open(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened[key] {
		g.opened[key] = true
		close(g.shut[key])
	}
}

// next returns the keys of the next transaction a batch begins, and fails
// the test when none begins within a minute.
func (g *gates) next() []string {
	g.t.Helper()
	select {
	case keys := <-g.started:
		return keys
	case <-time.After(time.Minute):
		g.t.Fatal("no batch began within a minute")
		return nil
	}
}

// send sends a request of scope for th in a goroutine and returns a
// function that waits for its answer.
func (r *rig) send(scope string, th thing) (wait func() (idem.Result, error)) {
	return r.sendCtx(context.Background(), scope, th)
}

// sendCtx is send with the caller's context ctx.
func (r *rig) sendCtx(ctx context.Context, scope string, th thing) (wait func() (idem.Result, error)) {
	var (
		res idem.Result
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = r.b.Do(ctx, reqIn(scope, th.key, `{"k":"`+th.key+`"}`), th)
	}()
	return func() (idem.Result, error) { <-done; return res, err }
}

// runsAtOnce sends a request of scope for key and returns once its batch
// began; it fails the test when the request waits in the queue instead.
func (r *rig) runsAtOnce(g *gates, scope, key string) (wait func() (idem.Result, error)) {
	r.t.Helper()
	wait = r.send(scope, thing{key: key, body: `{"` + key + `":1}`})
	select {
	case keys := <-g.started:
		if !slices.Equal(keys, []string{key}) {
			r.t.Fatalf("%s/%s: a batch of %q began, want %s's alone", scope, key, keys, key)
		}
	case k := <-r.queued:
		r.t.Fatalf("%s/%s waited in the queue (%s), want it run at once", scope, key, k.Key)
	case <-time.After(time.Minute):
		r.t.Fatalf("%s/%s: neither run nor queued within a minute", scope, key)
	}
	return wait
}

// queues sends a request of scope for key and returns once it waits in
// the queue.
func (r *rig) queues(scope, key string) (wait func() (idem.Result, error)) {
	r.t.Helper()
	wait = r.send(scope, thing{key: key, body: `{"` + key + `":1}`})
	r.waitQueued(1)
	return wait
}

func wantAnswer(t *testing.T, key string, wait func() (idem.Result, error)) {
	t.Helper()
	res, err := wait()
	if err != nil || res.Replayed || string(res.Body) != `{"`+key+`":1}` {
		t.Fatalf("%s: %v %+v", key, err, res)
	}
}

// Tenant A's batches take every place and sit on what another
// transaction of A holds: on PostgreSQL the row of a key that transaction
// claimed, on SQLite the one writer. Tenant B's request is taken at once
// into a batch of its own beside them, never into A's, and never gets
// ErrBusy: on PostgreSQL it is answered while A's batches still wait; on
// SQLite (where every writer waits for that transaction) once it ends.
// A's requests then find the other transaction's records and replay them.
func TestBatcherScopeNotHeldByAnothersLocks(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{Wait: time.Minute}, idem.BatchConfig{MaxWait: 200 * time.Millisecond})
		g := r.gate()
		ctx := context.Background()
		tx := userTx(t, d)
		defer tx.Rollback(ctx)
		var runs atomic.Int64
		places := r.b.Config().Concurrency
		held := make([]func() (idem.Result, error), places)
		for i := range places {
			key := string(rune('p' + i))
			if _, err := r.k.DoTx(ctx, tx, req(key, `{"k":"`+key+`"}`), insertWork(&runs, 201, `{"mine":1}`)); err != nil {
				t.Fatal(err)
			}
			held[i] = r.send("tenant-a", thing{key: key, body: `{"theirs":1}`})
			if got := g.next(); !slices.Equal(got, []string{key}) {
				t.Fatalf("A's batch %d: %q, want [%s]", i, got, key)
			}
		}

		b := r.send("tenant-b", thing{key: "b", body: `{"b":1}`})
		select {
		case got := <-g.started:
			if !slices.Equal(got, []string{"b"}) {
				t.Fatalf("B's batch: %q, want [b]", got)
			}
		case k := <-r.queued:
			t.Fatalf("B's request waited in the queue (%s) behind A's batches", k.Key)
		}
		if d.Dialect() == "postgres" {
			wantAnswer(t, "b", b) // A's batches still wait on their rows
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if d.Dialect() != "postgres" {
			wantAnswer(t, "b", b)
		}
		for i, wait := range held {
			res, err := wait()
			if err != nil || !res.Replayed || string(res.Body) != `{"mine":1}` {
				t.Fatalf("A's held request %d: %v %+v", i, err, res)
			}
		}
		if got := r.stored("b"); got != "" {
			t.Fatalf("b stored in tenant-a's scope: %q", got)
		}
		rec, err := r.k.Lookup(ctx, reqIn("tenant-b", "b", `{}`).Key)
		if err != nil || string(rec.Outcome.Body) != `{"b":1}` {
			t.Fatalf("b's record: %v %+v", err, rec)
		}
		want := []string{"b"}
		for range places {
			want = append(want, "x") // the other transaction's
		}
		if got := r.bizRows(); !slices.Equal(got, want) {
			t.Fatalf("biz rows %q, want %q", got, want)
		}
	})
}

// atGate sends a request of scope for key and returns once its batch
// waits for a slot of the batcher's gate.
func (r *rig) atGate(ctx context.Context, scope, key string) (wait func() (idem.Result, error)) {
	r.t.Helper()
	before := idem.GateWaiting(r.b, scope)
	wait = r.sendCtx(ctx, scope, thing{key: key, body: `{"` + key + `":1}`})
	for deadline := time.Now().Add(time.Minute); idem.GateWaiting(r.b, scope) == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s/%s: its batch did not wait at the gate within a minute", scope, key)
		}
	}
	return wait
}

// The gate decides which scope's batch goes next: a slot that frees goes
// to another scope's batch waiting for one, before the next batch of the
// scope that freed it. Tenants A and B hold their shares (two of four
// slots each); C's batch waits at the gate, and A's third request in
// A's queue (A runs Concurrency batches). A's first batch ends: C's
// batch takes its slot, and A's next batch waits at the gate for B's.
func TestBatcherGateServesOtherScopesFirst(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 2, Share: 0.5, MaxBatch: 1, MaxWait: time.Minute})
		g := r.gate("a1", "a2", "b1", "b2", "c1")
		waits := map[string]func() (idem.Result, error){}
		for _, key := range []string{"a1", "a2", "b1", "b2"} {
			waits[key] = r.runsAtOnce(g, "tenant-"+key[:1], key)
		}
		waits["a3"] = r.queues("tenant-a", "a3")
		waits["c1"] = r.atGate(context.Background(), "tenant-c", "c1")
		g.open("a1")
		if got := g.next(); !slices.Equal(got, []string{"c1"}) {
			t.Fatalf("the slot A's batch freed went to %q, want [c1]", got)
		}
		for deadline := time.Now().Add(time.Minute); idem.GateWaiting(r.b, "tenant-a") != 1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("A's next batch did not wait at the gate")
			}
		}
		g.open("b1")
		if got := g.next(); !slices.Equal(got, []string{"a3"}) {
			t.Fatalf("the slot B's batch freed went to %q, want [a3]", got)
		}
		for _, key := range []string{"a2", "b2", "c1"} {
			g.open(key)
		}
		for key, wait := range waits {
			wantAnswer(t, key, wait)
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"a1"}, []string{"a2"}, []string{"b1"}, []string{"b2"}, []string{"c1"}, []string{"a3"})
		if got := r.bizRows(); !slices.Equal(got, []string{"a1", "a2", "a3", "b1", "b2", "c1"}) {
			t.Fatalf("biz rows %q", got)
		}
	})
}

// Scopes take turns at the gate, the one that used its slots least first:
// once tenant A's long batch ends, B's and D's batches, waiting at the
// gate, run before A's next, though A's requests came first; A's waiting
// requests then go in batches of MaxBatch, oldest first. Tenant C holds
// the other slot throughout. A's second request, sent while A's first
// batch had not begun, rode in it.
func TestBatcherScopesTakeTurns(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1, MaxBatch: 2, MaxWait: time.Minute})
		g := r.gate("a0", "c0")
		a0 := r.runsAtOnce(g, "tenant-a", "a0")
		c0 := r.runsAtOnce(g, "tenant-c", "c0")
		a0b := r.send("tenant-a", thing{key: "a0b", body: `{"a0b":1}`})
		r.waitJoined(1)
		var waits []func() (idem.Result, error)
		keys := []string{"a1", "a2", "a3", "a4", "b1", "d1"}
		for _, key := range keys[:4] {
			waits = append(waits, r.queues("tenant-a", key))
		}
		for _, key := range keys[4:] {
			waits = append(waits, r.atGate(context.Background(), "tenant-"+key[:1], key))
		}
		g.open("a0")
		wantAnswer(t, "a0", a0)
		wantAnswer(t, "a0b", a0b)
		for i, want := range [][]string{{"b1"}, {"d1"}, {"a1", "a2"}, {"a3", "a4"}} {
			if got := g.next(); !slices.Equal(got, want) {
				t.Fatalf("batch %d after A's: %q, want %q", i, got, want)
			}
		}
		for i, key := range keys {
			wantAnswer(t, key, waits[i])
		}
		g.open("c0")
		wantAnswer(t, "c0", c0)
		if got := r.bizRows(); !slices.Equal(got, []string{"a0", "a0b", "a1", "a2", "a3", "a4", "b1", "c0", "d1"}) {
			t.Fatalf("biz rows %q", got)
		}
	})
}

// A caller that gives up while its batch waits at the gate is never run:
// tenant C's request is withdrawn, its batch leaves the gate, and the
// slot that frees goes to tenant A's next batch.
func TestBatcherScopeGivenUpLeavesGate(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1, Share: 0.5, MaxBatch: 1, MaxWait: time.Minute})
		g := r.gate("a1", "b1")
		a1 := r.runsAtOnce(g, "tenant-a", "a1")
		b1 := r.runsAtOnce(g, "tenant-b", "b1")
		a2 := r.queues("tenant-a", "a2")
		ctx, cancel := context.WithCancel(context.Background())
		c1 := r.atGate(ctx, "tenant-c", "c1")
		cancel()
		if _, err := c1(); !errors.Is(err, context.Canceled) {
			t.Fatalf("withdrawn c1: %v, want context.Canceled", err)
		}
		if n := idem.GateWaiting(r.b, "tenant-c"); n != 0 {
			t.Fatalf("C's withdrawn batch still waits at the gate (%d)", n)
		}
		g.open("a1")
		wantAnswer(t, "a1", a1)
		if got := g.next(); !slices.Equal(got, []string{"a2"}) {
			t.Fatalf("the slot A's batch freed went to %q, want [a2]", got)
		}
		wantAnswer(t, "a2", a2)
		g.open("b1")
		wantAnswer(t, "b1", b1)
		if got := r.bizRows(); !slices.Equal(got, []string{"a1", "a2", "b1"}) || r.runsOf("c1") != 0 {
			t.Fatalf("biz rows %q, c1 ran %d times", got, r.runsOf("c1"))
		}
	})
}

// A request that finds its scope's batch full while it waits to begin
// queues for the next, and its MaxWait does not run until that batch has
// begun: it waits for the database, not for a place. Then it is taken.
func TestBatcherQueueWaitsForItsBatchToBegin(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		const maxWait = time.Second
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1, MaxBatch: 2, MaxWait: maxWait})
		g := r.gate("a0")
		a0 := r.runsAtOnce(g, "tenant-a", "a0")
		a1 := r.send("tenant-a", thing{key: "a1", body: `{"a1":1}`})
		r.waitJoined(1)
		a2 := r.queues("tenant-a", "a2")
		time.Sleep(maxWait * 3 / 2) // past a2's MaxWait
		g.open("a0")
		for key, wait := range map[string]func() (idem.Result, error){"a0": a0, "a1": a1, "a2": a2} {
			wantAnswer(t, key, wait)
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"a0"}, []string{"a2"})
		if got := r.bizRows(); !slices.Equal(got, []string{"a0", "a1", "a2"}) {
			t.Fatalf("biz rows %q", got)
		}
	})
}

// MaxWait is a wait for a place. Tenants A and B hold both places a
// batcher of Concurrency 1 gives (B's beside A's): A's batch runs, held in
// its work, B's is held before it begins. A's next request waits behind
// A's own running batch, for the database: well past MaxWait it still
// waits, and is answered once that batch ends. C's request, whose scope has nothing under way, waits
// for a place the others hold: it gets ErrBusy at MaxWait, nothing run or
// stored.
func TestBatcherMaxWaitIsForAPlace(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		const maxWait = 50 * time.Millisecond
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1, MaxBatch: 1, MaxWait: maxWait})
		h := r.holdWork("a0")
		a0 := r.send("tenant-a", thing{key: "a0", body: `{"a0":1}`})
		<-h.entered
		g := r.gate("b0")
		b0 := r.runsAtOnce(g, "tenant-b", "b0")
		a1 := r.queues("tenant-a", "a1")
		start := time.Now()
		_, err := r.b.Do(context.Background(), reqIn("tenant-c", "c1", `{"k":"c1"}`), thing{key: "c1", body: `{"c1":1}`})
		if !errors.Is(err, idem.ErrBusy) || !strings.Contains(err.Error(), "MaxWait") {
			t.Fatalf("C's request with every place held: %v, want ErrBusy (MaxWait)", err)
		}
		if took := time.Since(start); took < maxWait {
			t.Fatalf("C's request answered ErrBusy after %v, before MaxWait %v", took, maxWait)
		}
		time.Sleep(3 * maxWait) // a1 waited past its MaxWait
		close(h.release)
		g.open("b0")
		for key, wait := range map[string]func() (idem.Result, error){"a0": a0, "b0": b0, "a1": a1} {
			wantAnswer(t, key, wait)
		}
		if r.runsOf("c1") != 0 {
			t.Fatalf("C's refused request ran %d times", r.runsOf("c1"))
		}
		if got := r.bizRows(); !slices.Equal(got, []string{"a0", "a1", "b0"}) {
			t.Fatalf("biz rows %q", got)
		}
		if got := countRows(t, d, "idem_keys"); got != 3 {
			t.Fatalf("idem_keys rows %d, want 3 (none for c1)", got)
		}
	})
}

// Requests that arrive while their scope's batch waits to begin (for a
// connection, the write gate, SQLite's one writer: here the test's hold)
// ride in it, however long it waits: none waits for the next batch, none
// gets ErrBusy after MaxWait, and one transaction carries them all. Once
// every caller of a waiting batch has gone, nobody joins it: a request
// then is never answered with the others' cancellation.
func TestBatcherJoinsBatchWaitingToBegin(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		const maxWait = 20 * time.Millisecond
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1, MaxWait: maxWait})
		g := r.gate("a0")
		a0 := r.runsAtOnce(g, "tenant-a", "a0")
		keys := []string{"a1", "a2", "a3"}
		var waits []func() (idem.Result, error)
		for _, key := range keys {
			waits = append(waits, r.send("tenant-a", thing{key: key, body: `{"` + key + `":1}`}))
		}
		r.waitJoined(len(keys))
		time.Sleep(5 * maxWait) // past every joiner's MaxWait
		g.open("a0")
		wantAnswer(t, "a0", a0)
		for i, key := range keys {
			wantAnswer(t, key, waits[i])
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"a0"})
		if n := len(r.queued); n != 0 {
			t.Fatalf("%d requests waited in the queue", n)
		}

		g = r.gate("b0")
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan error, 1)
		go func() {
			_, err := r.b.Do(ctx, reqIn("tenant-a", "b0", `{"k":"b0"}`), thing{key: "b0", body: `{"b0":1}`})
			gone <- err
		}()
		if got := g.next(); !slices.Equal(got, []string{"b0"}) {
			t.Fatalf("batch %q, want [b0]", got)
		}
		cancel()
		// Its batch's context ends once its one caller has gone (at once,
		// on another goroutine); b1 comes after, and either finds it
		// closed or keeps it alive by joining: either way b1 is done.
		time.Sleep(10 * time.Millisecond)
		b1 := r.send("tenant-a", thing{key: "b1", body: `{"b1":1}`})
		g.open("b0")
		if err := <-gone; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("b0, its caller gone: %v", err)
		}
		wantAnswer(t, "b1", b1)
		if got := r.bizRows(); !slices.Contains(got, "b1") || len(got) < 5 {
			t.Fatalf("biz rows %q", got)
		}
	})
}
