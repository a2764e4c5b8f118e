package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/testpg"
)

// thing is the item of the batch tests' work: its key and what the work
// does for it.
type thing struct {
	key    string
	body   string // the outcome's body
	refuse bool   // answered with ItemResult.Err
	fail   bool   // the work fails for any batch that holds it
	panic  bool   // the work panics for any batch that holds it
	down   bool   // the work fails for any batch that holds it, the database unavailable
	slow   bool   // the work's statement for it outlasts the database's statement_timeout
}

var (
	errThing   = errors.New("thing: the gateway timed out")
	errRefused = errors.New("thing: refused")
)

// rig is a Batcher on a real database with everything the tests watch:
// each transaction's keys, the work's runs per key, the requests queued.
type rig struct {
	t *testing.T
	d driver.Driver
	k *idem.Keeper
	b *idem.Batcher[thing]

	mu       sync.Mutex
	attempts [][]string     // the keys of each transaction, in order
	runs     map[string]int // the work's runs per key, rolled back or not

	queued chan idem.Key
	joined chan idem.Key
	holds  map[string]holding // keys whose work waits (hold)
}

// holding is a key whose work waits: entered receives the batch's
// context once it waits, until release is closed.
type holding struct {
	entered chan context.Context
	release chan struct{}
}

func newRig(t *testing.T, d driver.Driver, kcfg idem.Config, bcfg idem.BatchConfig) *rig {
	t.Helper()
	setup(t, d)
	r := &rig{t: t, d: d, k: newKeeper(t, d, kcfg), runs: map[string]int{},
		queued: make(chan idem.Key, 10000), joined: make(chan idem.Key, 10000), holds: map[string]holding{}}
	r.b = r.newBatcher(r.k, bcfg)
	return r
}

func (r *rig) newBatcher(k *idem.Keeper, cfg idem.BatchConfig) *idem.Batcher[thing] {
	r.t.Helper()
	b, err := idem.NewBatcher(k, r.work, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	idem.SetBatchHook(b, func(keys []idem.Key) {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = k.Key
		}
		r.mu.Lock()
		r.attempts = append(r.attempts, names)
		r.mu.Unlock()
	})
	idem.SetQueuedHook(b, func(k idem.Key) { r.queued <- k })
	idem.SetBatchJoinedHook(b, func(k idem.Key) { r.joined <- k })
	r.t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// work inserts a biz row per item, then fails or panics when an item asks.
func (r *rig) work(ctx context.Context, tx driver.Tx, items []thing) ([]idem.ItemResult, error) {
	out := make([]idem.ItemResult, len(items))
	for i, it := range items {
		r.mu.Lock()
		r.runs[it.key]++
		h, held := r.holds[it.key]
		r.mu.Unlock()
		if held {
			h.entered <- ctx
			<-h.release
		}
		if it.refuse {
			out[i].Err = errRefused
			continue
		}
		if it.slow {
			if _, err := tx.Exec(ctx, `SELECT pg_sleep(5)`); err != nil {
				return nil, err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ($1, $2)`, it.key, it.body); err != nil {
			return nil, err
		}
		out[i].Outcome = idem.Outcome{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(it.body)}
	}
	for _, it := range items {
		if it.fail {
			return nil, errThing
		}
		if it.panic {
			panic("thing: bug in " + it.key)
		}
		if it.down {
			return nil, fmt.Errorf("thing: %w", driver.ErrUnavailable)
		}
	}
	return out, nil
}

// hold sends a request under key whose work waits, and returns once its
// batch runs: with Concurrency 1, the requests sent meanwhile queue and
// form the next batch together once release is called. release returns
// when the held request is answered.
func (r *rig) hold(key string) (release func()) {
	h := r.holdWork(key)
	done := make(chan error, 1)
	go func() {
		_, err := r.b.Do(context.Background(), req(key, `{}`), thing{key: key, body: `{"held":1}`})
		done <- err
	}()
	<-h.entered
	return func() {
		close(h.release)
		if err := <-done; err != nil {
			r.t.Errorf("held request: %v", err)
		}
	}
}

// holdWork makes the work wait when it reaches key, until the returned
// holding's release is closed; entered receives its context once it waits.
func (r *rig) holdWork(key string) holding {
	h := holding{entered: make(chan context.Context, 1), release: make(chan struct{})}
	r.mu.Lock()
	r.holds[key] = h
	r.mu.Unlock()
	// A test that failed before releasing it must not leave Close (an
	// earlier cleanup, so a later one) waiting for the held batch.
	r.t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	return h
}

// waitQueued returns once n more requests wait in the queue, and fails
// the test when they do not within a minute (a request that ran at once
// instead, say).
func (r *rig) waitQueued(n int) {
	r.t.Helper()
	r.waitFor(r.queued, n, "waited in the queue")
}

// waitJoined returns once n more requests joined a batch that had not
// begun, and fails the test when they do not within a minute.
func (r *rig) waitJoined(n int) {
	r.t.Helper()
	r.waitFor(r.joined, n, "joined a batch")
}

// waitFor receives n keys from hook, a test hook's channel, and fails the
// test when they do not come within a minute.
func (r *rig) waitFor(hook <-chan idem.Key, n int, what string) {
	r.t.Helper()
	deadline := time.After(time.Minute)
	for i := range n {
		select {
		case <-hook:
		case <-deadline:
			r.t.Fatalf("%d of %d requests %s within a minute", i, n, what)
		}
	}
}

// do sends each thing at once, in order, each once the previous one waits
// in the queue, and returns a function that waits for their answers.
func (r *rig) do(things ...thing) (wait func() ([]idem.Result, []error)) {
	results, errs := make([]idem.Result, len(things)), make([]error, len(things))
	var wg sync.WaitGroup
	for i, th := range things {
		wg.Go(func() {
			results[i], errs[i] = r.b.Do(context.Background(), req(th.key, `{"k":"`+th.key+`"}`), th)
		})
		r.waitQueued(1)
	}
	return func() ([]idem.Result, []error) { wg.Wait(); return results, errs }
}

func (r *rig) attemptsSoFar() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.attempts)
}

func (r *rig) runsOf(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key]
}

// stored returns the key's committed record's body, or "" when it has none.
func (r *rig) stored(key string) string {
	r.t.Helper()
	rec, err := r.k.Lookup(context.Background(), req(key, `{}`).Key)
	if errors.Is(err, driver.ErrNotFound) {
		return ""
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return string(rec.Outcome.Body)
}

// bizRows returns the biz rows' keys, sorted.
func (r *rig) bizRows() []string {
	r.t.Helper()
	rows, err := r.d.Reader().Query(context.Background(), `SELECT k FROM biz ORDER BY k`)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			r.t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return keys
}

func wantAttempts(t *testing.T, got [][]string, want ...[]string) {
	t.Helper()
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("transactions %q, want %q", got, want)
	}
}

// Many first arrivals at once: the requests that queued while the worker
// was busy share transactions of up to MaxBatch; each key is claimed and
// stored once, its work ran once, and each request gets its own answer.
// Their copies replay from storage without a transaction.
func TestBatcherGroupsFirstArrivals(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1, MaxBatch: 64, MaxWait: time.Minute})
		release := r.hold("hold")
		const n = 150
		key := func(i int) string { return fmt.Sprintf("k%03d", i) }
		results, errs := make([]idem.Result, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i], errs[i] = r.b.Do(context.Background(), req(key(i), fmt.Sprintf(`{"n":%d}`, i)),
					thing{key: key(i), body: fmt.Sprintf(`{"id":%d}`, i)})
			})
		}
		r.waitQueued(n)
		release()
		wg.Wait()

		now := time.Now()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("%s: %v", key(i), errs[i])
			}
			if res := results[i]; res.Replayed || string(res.Body) != fmt.Sprintf(`{"id":%d}`, i) ||
				res.Status != 201 || res.Header.Get("Content-Type") != "application/json" || !res.ExpiresAt.After(now) {
				t.Fatalf("%s: %+v", key(i), res)
			}
			if got := r.stored(key(i)); got != fmt.Sprintf(`{"id":%d}`, i) {
				t.Fatalf("%s stored %q", key(i), got)
			}
			if runs := r.runsOf(key(i)); runs != 1 {
				t.Fatalf("%s: the work ran %d times", key(i), runs)
			}
		}
		sizes := []int{}
		for _, a := range r.attemptsSoFar() {
			sizes = append(sizes, len(a))
		}
		if !slices.Equal(sizes, []int{1, 64, 64, 22}) {
			t.Fatalf("transactions of %v requests, want 1 (the held one), 64, 64, 22", sizes)
		}
		if got := countRows(t, d, "biz"); got != n+1 {
			t.Fatalf("biz rows %d, want %d", got, n+1)
		}
		if got := countRows(t, d, "idem_keys"); got != n+1 {
			t.Fatalf("idem_keys rows %d, want %d", got, n+1)
		}

		// A copy is answered by the fast path's one read: no transaction.
		before := len(r.attemptsSoFar())
		for _, i := range []int{0, 77, n - 1} {
			res, err := r.b.Do(context.Background(), req(key(i), fmt.Sprintf(`{"n":%d}`, i)), thing{key: key(i), body: `{"again":1}`})
			if err != nil || !res.Replayed || string(res.Body) != fmt.Sprintf(`{"id":%d}`, i) || res.ExpiresAt.IsZero() {
				t.Fatalf("copy of %s: %v %+v", key(i), err, res)
			}
		}
		if got := len(r.attemptsSoFar()); got != before {
			t.Fatalf("copies began %d transactions", got-before)
		}
		if got := countRows(t, d, "biz"); got != n+1 {
			t.Fatalf("biz rows %d after the copies, want %d", got, n+1)
		}
	})
}

// A lone request is not delayed: finding no batch running, it runs its
// own at once, in its own goroutine, without ever waiting in the queue
// (the queued hook never fires). Nothing else arrives, so a batcher that
// waited for company would not answer before the test timed out.
func TestBatcherLoneRequest(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1, MaxBatch: 1000, MaxWait: time.Minute})
		res, err := r.b.Do(context.Background(), req("lone", `{}`), thing{key: "lone", body: `{"lone":1}`})
		if err != nil || res.Replayed || string(res.Body) != `{"lone":1}` {
			t.Fatalf("lone: %v %+v", err, res)
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"lone"})
		if n := len(r.queued); n != 0 {
			t.Fatalf("the lone request waited in the queue (%d queued)", n)
		}
		if r.stored("lone") != `{"lone":1}` || countRows(t, d, "biz") != 1 {
			t.Fatalf("lone stored %q, %d biz rows", r.stored("lone"), countRows(t, d, "biz"))
		}
	})
}

// Copies of one key at once, through one batcher and through two (two
// keepers: two processes' worth, whose batches meet in the database): the
// work runs once per key, every copy gets the same answer, one of them
// first; a different body afterwards is refused as reuse.
func TestBatcherDuplicateKeys(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{Wait: 30 * time.Second}, idem.BatchConfig{Concurrency: 2})
		other := r.newBatcher(newKeeper(t, d, idem.Config{Wait: 30 * time.Second}), idem.BatchConfig{Concurrency: 2})
		const keys, copies = 10, 3
		type answer struct {
			res idem.Result
			err error
		}
		answers := make([][]answer, keys)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range keys {
			answers[i] = make([]answer, 2*copies)
			for c := range 2 * copies {
				b := r.b
				if c%2 == 1 {
					b = other
				}
				wg.Go(func() {
					<-start
					key := fmt.Sprintf("dup%d", i)
					res, err := b.Do(context.Background(), req(key, `{"same":true}`), thing{key: key, body: fmt.Sprintf(`{"copy":%d}`, c)})
					answers[i][c] = answer{res, err}
				})
			}
		}
		close(start)
		wg.Wait()
		for i := range keys {
			key := fmt.Sprintf("dup%d", i)
			first := 0
			for c, a := range answers[i] {
				if a.err != nil {
					t.Fatalf("%s copy %d: %v", key, c, a.err)
				}
				if !a.res.Replayed {
					first++
				}
				if string(a.res.Body) != r.stored(key) {
					t.Fatalf("%s copy %d answered %q, stored %q", key, c, a.res.Body, r.stored(key))
				}
			}
			if first != 1 || r.runsOf(key) != 1 {
				t.Fatalf("%s: %d first answers, %d runs; want 1, 1", key, first, r.runsOf(key))
			}
		}
		if got := countRows(t, d, "biz"); got != keys {
			t.Fatalf("biz rows %d, want %d", got, keys)
		}
		for _, b := range []*idem.Batcher[thing]{r.b, other} {
			_, err := b.Do(context.Background(), req("dup0", `{"same":false}`), thing{key: "dup0"})
			var reused *idem.ReusedError
			if !errors.As(err, &reused) || string(reused.Stored.Body) != r.stored("dup0") {
				t.Fatalf("another body: %v", err)
			}
		}
		if got := countRows(t, d, "biz"); got != keys || r.runsOf("dup0") != 1 {
			t.Fatalf("after reuse: biz rows %d, dup0 runs %d", got, r.runsOf("dup0"))
		}
	})
}

// A copy of a request still waiting in the queue joins it, as in Do, and
// takes no place in a batch; a copy past MaxWaiters gets ErrInFlight and
// one with another body ErrKeyReused.
func TestBatcherCopyJoinsQueuedRequest(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{MaxWaiters: 2}, idem.BatchConfig{Concurrency: 1})
		joined := make(chan struct{}, 10)
		idem.SetJoinedHook(r.k, func(idem.Key) { joined <- struct{}{} })
		release := r.hold("hold")
		wait := r.do(thing{key: "x", body: `{"x":1}`})
		type answer struct {
			res idem.Result
			err error
		}
		copies := make(chan answer, 2)
		for _, body := range []string{`{"k":"x"}`, `{"k":"other"}`} {
			go func() {
				res, err := r.b.Do(context.Background(), req("x", body), thing{key: "x", body: `{"copy":1}`})
				copies <- answer{res, err}
			}()
			<-joined
		}
		if _, err := r.b.Do(context.Background(), req("x", `{"k":"x"}`), thing{key: "x"}); !errors.Is(err, idem.ErrInFlight) {
			t.Fatalf("copy past MaxWaiters: %v, want ErrInFlight", err)
		}
		release()
		results, errs := wait()
		if errs[0] != nil || results[0].Replayed || string(results[0].Body) != `{"x":1}` {
			t.Fatalf("first: %v %+v", errs[0], results[0])
		}
		var replayed, reused int
		for range 2 {
			a := <-copies
			switch {
			case a.err == nil && a.res.Replayed && string(a.res.Body) == `{"x":1}`:
				replayed++
			case errors.Is(a.err, idem.ErrKeyReused):
				reused++
			default:
				t.Fatalf("copy: %v %+v", a.err, a.res)
			}
		}
		if replayed != 1 || reused != 1 {
			t.Fatalf("%d replayed, %d reused; want 1, 1", replayed, reused)
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"x"})
		if r.runsOf("x") != 1 || countRows(t, d, "biz") != 2 {
			t.Fatalf("x ran %d times, %d biz rows", r.runsOf("x"), countRows(t, d, "biz"))
		}
	})
}

// An item the work refuses (ItemResult.Err) stores nothing and leaves its
// key free; its neighbours in the same transaction commit.
func TestBatcherItemRefused(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1})
		release := r.hold("hold")
		wait := r.do(thing{key: "a", body: `{"a":1}`}, thing{key: "b", refuse: true}, thing{key: "c", body: `{"c":1}`})
		release()
		results, errs := wait()
		if errs[0] != nil || errs[2] != nil || string(results[0].Body) != `{"a":1}` || string(results[2].Body) != `{"c":1}` {
			t.Fatalf("neighbours: %v %v %+v %+v", errs[0], errs[2], results[0], results[2])
		}
		if !errors.Is(errs[1], errRefused) {
			t.Fatalf("refused item: %v, want its Err", errs[1])
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"a", "b", "c"})
		if got := r.bizRows(); !slices.Equal(got, []string{"a", "c", "hold"}) {
			t.Fatalf("biz rows %q", got)
		}
		if r.stored("b") != "" || countRows(t, d, "idem_keys") != 3 {
			t.Fatalf("refused key stored %q; %d keys", r.stored("b"), countRows(t, d, "idem_keys"))
		}

		// The key is free: the retry runs the work and stores its outcome.
		res, err := r.b.Do(context.Background(), req("b", `{"k":"b"}`), thing{key: "b", body: `{"b":2}`})
		if err != nil || res.Replayed || string(res.Body) != `{"b":2}` || r.stored("b") != `{"b":2}` || r.runsOf("b") != 2 {
			t.Fatalf("retry: %v %+v, stored %q, runs %d", err, res, r.stored("b"), r.runsOf("b"))
		}
	})
}

// A batch whose work fails or panics rolls back and is tried in halves:
// the good requests commit, and only the failing one gets the error (a
// panic: a *PanicError, logged once, with its key).
func TestBatcherSplitsFailingBatch(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var logs syncBuffer
		r := newRig(t, d, idem.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, idem.BatchConfig{Concurrency: 1})
		release := r.hold("hold")
		wait := r.do(thing{key: "a", body: `{"a":1}`}, thing{key: "b", body: `{"b":1}`},
			thing{key: "bad", fail: true}, thing{key: "c", body: `{"c":1}`})
		release()
		results, errs := wait()
		for i, key := range []string{"a", "b", "bad", "c"} {
			if key == "bad" {
				if !errors.Is(errs[i], errThing) {
					t.Fatalf("bad: %v, want the work's error", errs[i])
				}
				continue
			}
			if errs[i] != nil || results[i].Replayed || string(results[i].Body) != `{"`+key+`":1}` {
				t.Fatalf("%s: %v %+v", key, errs[i], results[i])
			}
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"a", "b", "bad", "c"},
			[]string{"a", "b"}, []string{"bad", "c"}, []string{"bad"}, []string{"c"})
		if got := r.bizRows(); !slices.Equal(got, []string{"a", "b", "c", "hold"}) {
			t.Fatalf("biz rows %q", got)
		}
		if r.stored("bad") != "" || countRows(t, d, "idem_keys") != 4 {
			t.Fatalf("bad stored %q; %d keys", r.stored("bad"), countRows(t, d, "idem_keys"))
		}

		// The same with a panic, in a second round of the same worker.
		r.mu.Lock()
		r.attempts = nil
		r.mu.Unlock()
		release = r.hold("hold2")
		wait = r.do(thing{key: "p1", body: `{"p1":1}`}, thing{key: "boom", panic: true},
			thing{key: "p2", body: `{"p2":1}`}, thing{key: "p3", body: `{"p3":1}`})
		release()
		_, errs = wait()
		var pe *idem.PanicError
		if !errors.As(errs[1], &pe) || pe.Key.Key != "boom" || pe.Value != "thing: bug in boom" {
			t.Fatalf("boom: %v, want a *PanicError", errs[1])
		}
		if errs[0] != nil || errs[2] != nil || errs[3] != nil {
			t.Fatalf("neighbours of the panic: %v", errs)
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold2"}, []string{"p1", "boom", "p2", "p3"},
			[]string{"p1", "boom"}, []string{"p1"}, []string{"boom"}, []string{"p2", "p3"})
		if n := strings.Count(logs.String(), "key=boom"); n != 1 {
			t.Fatalf("the panic was logged %d times, want once:\n%s", n, logs.String())
		}
		if got := r.bizRows(); !slices.Equal(got, []string{"a", "b", "c", "hold", "hold2", "p1", "p2", "p3"}) {
			t.Fatalf("biz rows %q", got)
		}
		if r.stored("boom") != "" {
			t.Fatalf("a panicked request stored %q", r.stored("boom"))
		}
	})
}

// Bounds: past MaxQueued a request gets ErrBusy at once, and after Close
// (MaxWait: TestBatcherMaxWaitIsForAPlace); a caller that gives up while
// queued gets its context's error. None of them stores anything or runs
// the work.
func TestBatcherBounds(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1, MaxQueued: 2, MaxWait: time.Minute})
		ctx := context.Background()
		release := r.hold("hold")
		waitA := r.do(thing{key: "a", body: `{"a":1}`})
		gone, cancel := context.WithCancel(ctx)
		goneErr := make(chan error, 1)
		go func() {
			_, err := r.b.Do(gone, req("gone", `{}`), thing{key: "gone"})
			goneErr <- err
		}()
		r.waitQueued(1)
		cancel()
		if err := <-goneErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("caller gone while queued: %v", err)
		}
		waitG := r.do(thing{key: "g", body: `{"g":1}`})
		_, err := r.b.Do(ctx, req("full", `{}`), thing{key: "full"})
		if !errors.Is(err, idem.ErrBusy) || !idem.IsRetryable(err) || !strings.Contains(err.Error(), "MaxQueued") {
			t.Fatalf("past MaxQueued: %v, want ErrBusy", err)
		}
		release()
		if _, errs := waitA(); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if _, errs := waitG(); errs[0] != nil {
			t.Fatal(errs[0])
		}

		_ = r.b.Close(ctx)
		if _, err := r.b.Do(ctx, req("closed", `{}`), thing{key: "closed"}); !errors.Is(err, idem.ErrBusy) {
			t.Fatalf("after Close: %v, want ErrBusy", err)
		}

		for _, key := range []string{"gone", "full", "closed"} {
			if r.runsOf(key) != 0 || r.stored(key) != "" {
				t.Fatalf("%s: ran %d times, stored %q", key, r.runsOf(key), r.stored(key))
			}
		}
		if got := r.bizRows(); !slices.Equal(got, []string{"a", "g", "hold"}) {
			t.Fatalf("biz rows %q", got)
		}
		if got := countRows(t, d, "idem_keys"); got != 3 {
			t.Fatalf("idem_keys rows %d, want 3", got)
		}
	})
}

// A commit that fails after it happened (the connection lost on the way
// back) is retried in halves, whose claims find the records committed:
// each request gets its own stored answer, as a replay, and no work runs
// twice.
func TestBatcherAmbiguousCommit(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1})
		var commits int
		idem.SetCommitHook(r.b, func(ctx context.Context, commit func(context.Context) error) error {
			if err := commit(ctx); err != nil {
				return err
			}
			if commits++; commits == 2 {
				return fmt.Errorf("%w: connection lost before COMMIT's answer", driver.ErrCommitUnknown)
			}
			return nil
		})
		release := r.hold("hold")
		wait := r.do(thing{key: "a", body: `{"a":1}`}, thing{key: "b", body: `{"b":1}`}, thing{key: "c", body: `{"c":1}`})
		release()
		results, errs := wait()
		for i, key := range []string{"a", "b", "c"} {
			if errs[i] != nil || !results[i].Replayed || string(results[i].Body) != `{"`+key+`":1}` || r.runsOf(key) != 1 {
				t.Fatalf("%s: %v %+v, runs %d", key, errs[i], results[i], r.runsOf(key))
			}
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"a", "b", "c"}, []string{"a"}, []string{"b", "c"})
		if got := r.bizRows(); !slices.Equal(got, []string{"a", "b", "c", "hold"}) {
			t.Fatalf("biz rows %q", got)
		}
	})
}

// A key held by a transaction in another process (here the caller's own,
// through DoTx) makes the batch wait on its row and time out: the batch
// splits, the neighbours commit, and the held key's request gets
// ErrInFlight within Config.Wait, as from Do. After the holder commits,
// the key replays its outcome. Postgres only: SQLite has one writer, so a
// batch never waits on a row there (its Begin waits for the writer).
func TestBatcherLockTimeoutSplits(t *testing.T) {
	d := drivertest.Open(t, "postgres")
	r := newRig(t, d, idem.Config{Wait: 300 * time.Millisecond}, idem.BatchConfig{Concurrency: 1})
	ctx := context.Background()
	tx := userTx(t, d)
	defer tx.Rollback(ctx)
	var runs atomicInt
	if _, err := r.k.DoTx(ctx, tx, req("held", `{"k":"held"}`), insertWork(&runs.Int64, 201, `{"mine":1}`)); err != nil {
		t.Fatal(err)
	}
	release := r.hold("hold")
	wait := r.do(thing{key: "a", body: `{"a":1}`}, thing{key: "held", body: `{"theirs":1}`},
		thing{key: "b", body: `{"b":1}`}, thing{key: "c", body: `{"c":1}`})
	release()
	results, errs := wait()
	if !errors.Is(errs[1], idem.ErrInFlight) || !errors.Is(errs[1], driver.ErrLockTimeout) {
		t.Fatalf("held key: %v, want ErrInFlight", errs[1])
	}
	for _, i := range []int{0, 2, 3} {
		if errs[i] != nil || results[i].Replayed {
			t.Fatalf("neighbour %d: %v %+v", i, errs[i], results[i])
		}
	}
	wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"a", "held", "b", "c"},
		[]string{"a", "held"}, []string{"a"}, []string{"held"}, []string{"b", "c"})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := r.b.Do(ctx, req("held", `{"k":"held"}`), thing{key: "held", body: `{"theirs":2}`})
	if err != nil || !res.Replayed || string(res.Body) != `{"mine":1}` {
		t.Fatalf("held key after its holder committed: %v %+v", err, res)
	}
	if got := r.bizRows(); !slices.Equal(got, []string{"a", "b", "c", "hold", "x"}) {
		t.Fatalf("biz rows %q", got)
	}
}

type atomicInt struct{ atomic.Int64 }

// The driver's batch statements: a new key and an expired one are claimed
// (the expired record replaced), a live one is returned as it is committed;
// outcomes are stored and claims released in one call; a key twice in a
// batch and a record without its claim are refused. The same through the
// keeper's fallback, for a driver that is no driver.KeyBatcher.
func TestKeyClaimBatch(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		t.Run("batched", func(t *testing.T) { testKeyClaimBatch(t, d) })
		t.Run("fallback", func(t *testing.T) { testKeyClaimBatch(t, struct{ driver.Driver }{d}) })
	})
}

func testKeyClaimBatch(t *testing.T, d driver.Driver) {
	{
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Microsecond)
		scope := fmt.Sprintf("s-%T", d)
		id := func(k string) driver.KeyID { return driver.KeyID{Scope: scope, Operation: "op", Key: k} }
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// "old" is past the memory (made before ForgetBefore), "live" not.
		for _, r := range []struct {
			key              string
			created, expires time.Time
		}{{"live", now.Add(-30 * time.Minute), now.Add(time.Hour)}, {"old", now.Add(-2 * time.Hour), now.Add(-time.Hour)}} {
			if _, err := d.KeyClaim(ctx, tx, &driver.KeyClaimParams{ID: id(r.key), Fingerprint: []byte(r.key), Now: r.created, ExpiresAt: r.expires}); err != nil {
				t.Fatal(err)
			}
			if err := d.KeyRecord(ctx, tx, &driver.KeyRecordParams{ID: id(r.key), Status: 200, Body: []byte(r.key + " body")}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}

		tx, err = d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		got, err := driver.ClaimBatch(ctx, d, tx, &driver.KeyClaimBatchParams{
			Claims: []driver.KeyClaimItem{{ID: id("new"), Fingerprint: []byte("n")}, {ID: id("live"), Fingerprint: []byte("x")},
				{ID: id("old"), Fingerprint: []byte("o2")}, {ID: id("gone"), Fingerprint: []byte("g")}},
			Now: now, ExpiresAt: now.Add(time.Hour), ForgetBefore: now.Add(-time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 || !got[0].Claimed || got[1].Claimed || !got[2].Claimed || !got[3].Claimed {
			t.Fatalf("claims %+v, want new, old and gone claimed, live not", got)
		}
		if e := got[1].Existing; e == nil || string(e.Fingerprint) != "live" || string(e.Body) != "live body" || e.ID != id("live") || !e.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("live record %+v", got[1].Existing)
		}
		if err := driver.RecordBatch(ctx, d, tx, &driver.KeyRecordBatchParams{
			Records: []driver.KeyRecordParams{{ID: id("new"), Status: 201, Header: []byte(`{"Location":["/n"]}`), Body: []byte("n body")},
				{ID: id("old"), Status: 422}},
			Release: []driver.KeyID{id("gone")}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{"new": "201 n body {\"Location\":[\"/n\"]} n", "old": "422   o2", "live": "200 live body  live"} {
			rec, err := d.KeyGet(ctx, d.Reader(), &driver.KeyGetParams{ID: id(key)})
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if got := fmt.Sprintf("%d %s %s %s", rec.Status, rec.Body, rec.Header, rec.Fingerprint); got != want {
				t.Fatalf("%s stored %q, want %q", key, got, want)
			}
		}
		if _, err := d.KeyGet(ctx, d.Reader(), &driver.KeyGetParams{ID: id("gone")}); !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("released claim: %v, want ErrNotFound", err)
		}

		tx, err = d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := driver.ClaimBatch(ctx, d, tx, &driver.KeyClaimBatchParams{
			Claims: []driver.KeyClaimItem{{ID: id("twice")}, {ID: id("twice")}}, Now: now, ExpiresAt: now.Add(time.Hour)}); err == nil {
			t.Fatal("a key twice in one batch was claimed")
		}
		// The statement that finds no claim returns the error itself.
		if err := driver.RecordBatch(ctx, d, tx, &driver.KeyRecordBatchParams{
			Records: []driver.KeyRecordParams{{ID: id("unclaimed"), Status: 200}}}); err == nil {
			t.Fatal("an outcome without its claim was stored")
		}
	}
}

// Every bound of BatchConfig is checked, and the defaults fit the
// database: one batch at a time on SQLite's one writer.
func TestBatchConfig(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		k := newKeeper(t, d, idem.Config{})
		work := func(context.Context, driver.Tx, []thing) ([]idem.ItemResult, error) { return nil, nil }
		for _, c := range []struct {
			cfg  idem.BatchConfig
			want string
		}{
			{idem.BatchConfig{MaxBatch: 1001}, "MaxBatch"},
			{idem.BatchConfig{MaxBatch: -1}, "MaxBatch"},
			{idem.BatchConfig{Concurrency: 65}, "Concurrency"},
			{idem.BatchConfig{MaxQueued: 100001}, "MaxQueued"},
			{idem.BatchConfig{MaxWait: time.Microsecond}, "MaxWait"},
			{idem.BatchConfig{MaxWait: time.Hour}, "MaxWait"},
			{idem.BatchConfig{Share: -0.5}, "Share"},
			{idem.BatchConfig{Share: 1.5}, "Share"},
			{idem.BatchConfig{Share: math.NaN()}, "Share"},
		} {
			if _, err := idem.NewBatcher(k, work, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
			}
		}
		if _, err := idem.NewBatcher[thing](k, nil, idem.BatchConfig{}); err == nil {
			t.Error("nil work accepted")
		}
		if _, err := idem.NewBatcher(nil, work, idem.BatchConfig{}); err == nil {
			t.Error("nil keeper accepted")
		}
		b, err := idem.NewBatcher(k, work, idem.BatchConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background()) //nolint:errcheck // no deadline: it waits
		want := idem.BatchConfig{MaxBatch: 128, Concurrency: 2, MaxQueued: 1000, MaxWait: time.Second, Share: 0.5}
		if d.Dialect() == "sqlite" {
			want.Concurrency = 1
		}
		if got := b.Config(); got != want {
			t.Fatalf("defaults %+v, want %+v", got, want)
		}
	})
}

// Work that answers for fewer items than it was given is a bug, reported
// as an error to the request; nothing is stored.
func TestBatcherWorkMiscounts(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, d, idem.Config{})
		b, err := idem.NewBatcher(k, func(ctx context.Context, tx driver.Tx, items []thing) ([]idem.ItemResult, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ('x', 'lost')`); err != nil {
				return nil, err
			}
			return nil, nil
		}, idem.BatchConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background()) //nolint:errcheck // no deadline: it waits
		_, err = b.Do(context.Background(), req("short", `{}`), thing{key: "short"})
		if err == nil || !strings.Contains(err.Error(), "0 results for 1 items") {
			t.Fatalf("miscounting work: %v", err)
		}
		if countRows(t, d, "biz") != 0 || countRows(t, d, "idem_keys") != 0 {
			t.Fatalf("miscounting work left %d biz rows, %d keys", countRows(t, d, "biz"), countRows(t, d, "idem_keys"))
		}
	})
}

// The batch's spans: each request's idem.Do, idem.queue while it waited,
// and one idem.batch per batch, a trace of its own linked to the idem.Do
// of each request in it, with its size and the idem.claim of its keys; a
// failing batch records its split.
func TestBatcherSpans(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		r := newRig(t, d, idem.Config{TracerProvider: tp}, idem.BatchConfig{Concurrency: 1})
		release := r.hold("hold")
		wait := r.do(thing{key: "a", body: `{"a":1}`}, thing{key: "bad", fail: true})
		release()
		if _, errs := wait(); errs[0] != nil || !errors.Is(errs[1], errThing) {
			t.Fatalf("answers: %v", errs)
		}
		byName := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range spans.GetSpans().Snapshots() {
			byName[s.Name()] = append(byName[s.Name()], s)
		}
		if n := len(byName["idem.Do"]); n != 3 {
			t.Fatalf("%d idem.Do spans, want 3", n)
		}
		if n := len(byName["idem.queue"]); n != 2 {
			t.Fatalf("%d idem.queue spans, want 2 (the held request never queued)", n)
		}
		batches := byName["idem.batch"]
		if len(batches) != 2 {
			t.Fatalf("%d idem.batch spans, want 2", len(batches))
		}
		shared := batches[1]
		if len(shared.Links()) != 2 || shared.Parent().IsValid() {
			t.Fatalf("the shared batch has %d links, parent %v; want 2 links, no parent", len(shared.Links()), shared.Parent())
		}
		dos := map[trace.SpanID]bool{}
		for _, s := range byName["idem.Do"] {
			dos[s.SpanContext().SpanID()] = true
		}
		for _, l := range shared.Links() {
			if !dos[l.SpanContext.SpanID()] {
				t.Fatalf("link %v is to no idem.Do span", l.SpanContext)
			}
		}
		var size int64
		for _, a := range shared.Attributes() {
			if a.Key == "idem.batch.size" {
				size = a.Value.AsInt64()
			}
		}
		splits := 0
		for _, e := range shared.Events() {
			if e.Name == "idem.batch.split" {
				splits++
			}
		}
		if size != 2 || splits != 1 {
			t.Fatalf("shared batch size %d, %d splits; want 2, 1", size, splits)
		}
		claims := 0
		for _, s := range byName["idem.claim"] {
			if s.Parent().SpanID() == shared.SpanContext().SpanID() {
				claims++
			}
		}
		if claims != 3 {
			t.Fatalf("%d claims in the shared batch, want 3 (both, then each alone)", claims)
		}
	})
}

// A record committed after a request's fast-path read, by another process,
// is found by the batch's claim: the same request is answered as a replay
// of it, another one as reuse; the work does not run for either.
func TestBatcherClaimFindsRecord(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{})
		other := newKeeper(t, d, idem.Config{}) // another process's keeper: flights of its own
		ctx := context.Background()
		var runs atomic.Int64
		meanwhile := func(key, body string) func(context.Context) (thing, error) {
			return func(context.Context) (thing, error) {
				if _, err := other.Do(ctx, req(key, body), insertWork(&runs, 201, `{"theirs":"`+key+`"}`)); err != nil {
					return thing{}, err
				}
				return thing{key: key, body: `{"mine":1}`}, nil
			}
		}
		res, err := r.b.DoFunc(ctx, req("same", `{"n":1}`), meanwhile("same", `{"n":1}`))
		if err != nil || !res.Replayed || string(res.Body) != `{"theirs":"same"}` || res.ExpiresAt.IsZero() {
			t.Fatalf("same request: %v %+v", err, res)
		}
		_, err = r.b.DoFunc(ctx, req("other", `{"n":1}`), meanwhile("other", `{"n":2}`))
		var reused *idem.ReusedError
		if !errors.As(err, &reused) || string(reused.Stored.Body) != `{"theirs":"other"}` {
			t.Fatalf("another request: %v, want a *ReusedError", err)
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"same"}, []string{"other"})
		if r.runsOf("same") != 0 || r.runsOf("other") != 0 || countRows(t, d, "biz") != 2 {
			t.Fatalf("runs %d %d, biz rows %d; want 0, 0, 2 (the other keeper's)", r.runsOf("same"), r.runsOf("other"), countRows(t, d, "biz"))
		}
	})
}

// One request whose work outlasts PostgreSQL's statement_timeout fails
// alone: the timeout is a fault one request may cause, so its batch
// splits, the neighbours commit, and only the slow request gets
// ErrStatementTimeout (retryable, nothing stored for it). Postgres only:
// SQLite has no statement timeout.
func TestBatcherStatementTimeoutSplits(t *testing.T) {
	ctx := context.Background()
	d, err := postgres.Open(ctx, postgres.Config{URL: testpg.URL(t), SearchPath: testpg.Schema(t), StatementTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1})
	release := r.hold("hold")
	wait := r.do(thing{key: "a", body: `{"a":1}`}, thing{key: "slow", body: `{"slow":1}`, slow: true},
		thing{key: "b", body: `{"b":1}`}, thing{key: "c", body: `{"c":1}`})
	release()
	results, errs := wait()
	for i, key := range []string{"a", "slow", "b", "c"} {
		if key == "slow" {
			if !errors.Is(errs[i], driver.ErrStatementTimeout) || !idem.IsRetryable(errs[i]) || errors.Is(errs[i], idem.ErrUnavailable) {
				t.Fatalf("slow: %v; want ErrStatementTimeout", errs[i])
			}
			continue
		}
		if errs[i] != nil || results[i].Replayed || string(results[i].Body) != `{"`+key+`":1}` {
			t.Fatalf("%s beside the slow one: %v %+v", key, errs[i], results[i])
		}
	}
	if got := r.bizRows(); !slices.Equal(got, []string{"a", "b", "c", "hold"}) {
		t.Fatalf("biz rows %q, want every request's but the slow one's", got)
	}
	if got := r.stored("slow"); got != "" {
		t.Fatalf("the slow request stored %q", got)
	}
}
