package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
)

// errBrokenRead is the read failure gatedReads makes for its broken key.
var errBrokenRead = errors.New("test: this key's read fails")

// gatedReads is a driver whose fast-path reads a test holds and breaks:
// a lone read of a key in held waits until that key's channel is closed,
// each batch of reads waits until the test takes it from batches (when
// set), and the read of broken fails, alone or in a batch (as a pipeline
// stops at its first failing statement). Everything else is the real
// database's.
type gatedReads struct {
	driver.Driver
	broken string

	mu      sync.Mutex
	held    map[string]chan struct{}
	entered chan string     // each held read, once it holds
	batches chan gatedBatch // when set, each batch waits here for the test
	gets    []string        // the keys of KeyGet's calls
	ctxErrs []error         // each batch's context's error when it read
}

type gatedBatch struct {
	keys []string
	go_  chan struct{} // closed by the test to let the batch read
}

func newGatedReads(d driver.Driver, broken string) *gatedReads {
	return &gatedReads{Driver: d, broken: broken, held: map[string]chan struct{}{}, entered: make(chan string, 1)}
}

// hold makes the next lone read of key wait until the returned func runs.
func (g *gatedReads) hold(key string) (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.held[key] = ch
	g.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

// gatedReads is a driver.KeyReadBatcher on both drivers, so that the
// keeper's coalescing is tested on both (on SQLite, which is none, its
// batches read key by key).
func (g *gatedReads) KeyGet(ctx context.Context, tx driver.Tx, p *driver.KeyGetParams) (*driver.KeyRecord, error) {
	g.mu.Lock()
	ch := g.held[p.ID.Key]
	delete(g.held, p.ID.Key)
	g.gets = append(g.gets, p.ID.Key)
	g.mu.Unlock()
	if ch != nil {
		g.entered <- p.ID.Key
		<-ch
	}
	if p.ID.Key == g.broken {
		return nil, errBrokenRead
	}
	return g.Driver.KeyGet(ctx, tx, p)
}

func (g *gatedReads) KeyGetBatch(ctx context.Context, tx driver.Tx, p *driver.KeyGetBatchParams) ([]*driver.KeyRecord, error) {
	keys := make([]string, len(p.IDs))
	for i, id := range p.IDs {
		keys[i] = id.Key
	}
	g.mu.Lock()
	batches := g.batches
	g.mu.Unlock()
	if batches != nil {
		b := gatedBatch{keys: keys, go_: make(chan struct{})}
		batches <- b
		<-b.go_
	}
	g.mu.Lock()
	g.ctxErrs = append(g.ctxErrs, ctx.Err())
	g.mu.Unlock()
	if slices.Contains(keys, g.broken) {
		return nil, errBrokenRead
	}
	if rb, ok := g.Driver.(driver.KeyReadBatcher); ok {
		return rb.KeyGetBatch(ctx, tx, p)
	}
	return driver.KeyGetEach(ctx, g.Driver, tx, p)
}

// tripLog records the keys of each round trip of reads a keeper sends
// (idem.SetReadHooks' sent).
type tripLog struct {
	mu    sync.Mutex
	trips [][]string
}

func (l *tripLog) sent(keys []idem.Key) {
	names := make([]string, len(keys))
	for i, key := range keys {
		names[i] = key.Key
	}
	l.mu.Lock()
	l.trips = append(l.trips, names)
	l.mu.Unlock()
}

// take returns the round trips recorded so far and forgets them.
func (l *tripLog) take() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	trips := l.trips
	l.trips = nil
	return trips
}

// outcome is what one Do answered.
type outcome struct {
	res idem.Result
	err error
}

// Concurrent fast-path reads share one round trip, and each request gets
// its own answer from it: replays their own records, misses go on to
// their claims, a request whose caller gave up — while it waited, or while
// its batch was in flight — gets its context's error alone, and the
// others' reads go on under a context the hang-up did not end. A batch
// that fails answers each of its reads with its error at once: nobody
// reads again key by key while the others wait.
func TestReadsCoalesce(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		g := newGatedReads(d, "broken")
		k := newKeeper(t, g, idem.Config{})
		queued := make(chan string, 16)
		var trips tripLog
		idem.SetReadHooks(k, func(key idem.Key) { queued <- key.Key }, trips.sent)
		var runs atomic.Int64
		for _, key := range []string{"r1", "r2", "r3"} {
			if _, err := k.Do(context.Background(), req(key, `{"n":1}`), insertWork(&runs, 201, `{"id":"`+key+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
		trips.take()
		g.mu.Lock()
		g.gets = nil
		g.mu.Unlock()

		// do runs key's request in a goroutine and returns where its
		// answer will be.
		do := func(ctx context.Context, key string) <-chan outcome {
			ch := make(chan outcome, 1)
			go func() {
				res, err := k.Do(ctx, req(key, `{"n":1}`), insertWork(&runs, 201, `{"id":"`+key+`"}`))
				ch <- outcome{res, err}
			}()
			return ch
		}
		// queue starts key's request and returns once its read waits.
		queue := func(ctx context.Context, key string) <-chan outcome {
			ch := do(ctx, key)
			if got := <-queued; got != key {
				t.Fatalf("queued %s, want %s", got, key)
			}
			return ch
		}
		wantReplay := func(key string, o outcome) {
			t.Helper()
			if o.err != nil || !o.res.Replayed || string(o.res.Body) != `{"id":"`+key+`"}` {
				t.Fatalf("%s: %+v, want its own record replayed", key, o)
			}
		}
		wantFirst := func(key string, o outcome) {
			t.Helper()
			if o.err != nil || o.res.Replayed || string(o.res.Body) != `{"id":"`+key+`"}` {
				t.Fatalf("%s: %+v, want a first arrival", key, o)
			}
		}

		// holdTwo holds two lone reads in flight, as many round trips as
		// may be, so that the reads after them wait.
		holdTwo := func(a, b string) (release func(), holds [2]<-chan outcome) {
			releaseA, releaseB := g.hold(a), g.hold(b)
			holds[0] = do(context.Background(), a)
			<-g.entered
			holds[1] = do(context.Background(), b)
			<-g.entered
			return func() { releaseA(); releaseB() }, holds
		}

		// Round 1: two reads held in flight; six queue behind them.
		g.mu.Lock()
		g.batches = make(chan gatedBatch)
		g.mu.Unlock()
		release, holds := holdTwo("hold1", "hold1b")
		defer release()
		gone, leave := context.WithCancel(context.Background())
		defer leave()
		inBatch, hangUp := context.WithCancel(context.Background())
		defer hangUp()
		r1 := queue(context.Background(), "r1")
		m1 := queue(context.Background(), "m1")
		c0 := queue(gone, "c0")
		r2 := queue(context.Background(), "r2")
		c1 := queue(inBatch, "c1")
		m2 := queue(context.Background(), "m2")
		leave()
		if o := <-c0; !errors.Is(o.err, context.Canceled) {
			t.Fatalf("c0, given up while it waited: %+v, want context.Canceled", o)
		}
		release()
		b := <-g.batches
		if want := []string{"r1", "m1", "r2", "c1", "m2"}; !slices.Equal(b.keys, want) {
			t.Fatalf("batch %v, want %v", b.keys, want)
		}
		hangUp()
		if o := <-c1; !errors.Is(o.err, context.Canceled) {
			t.Fatalf("c1, given up while its batch was in flight: %+v, want context.Canceled", o)
		}
		close(b.go_)
		wantFirst("hold1", <-holds[0])
		wantFirst("hold1b", <-holds[1])
		wantReplay("r1", <-r1)
		wantReplay("r2", <-r2)
		wantFirst("m1", <-m1)
		wantFirst("m2", <-m2)
		g.mu.Lock()
		g.batches = nil
		g.mu.Unlock()

		// Round 2: the batch fails for one of its keys.
		release, holds = holdTwo("hold2", "hold2b")
		defer release()
		r3 := queue(context.Background(), "r3")
		broken := queue(context.Background(), "broken")
		m3 := queue(context.Background(), "m3")
		release()
		wantFirst("hold2", <-holds[0])
		wantFirst("hold2b", <-holds[1])
		for key, ch := range map[string]<-chan outcome{"r3": r3, "broken": broken, "m3": m3} {
			if o := <-ch; !errors.Is(o.err, errBrokenRead) {
				t.Fatalf("%s: %+v, want the batch's error", key, o)
			}
		}

		sent := trips.take()
		want := [][]string{{"hold1"}, {"hold1b"}, {"r1", "m1", "r2", "c1", "m2"}, {"hold2"}, {"hold2b"}, {"r3", "broken", "m3"}}
		if !slices.EqualFunc(sent, want, slices.Equal) {
			t.Fatalf("round trips %v, want %v", sent, want)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		// Round 1's batch answered its reads itself, under a live context
		// though c1 had hung up; round 2's failed, and nothing was read again.
		if want := []string{"hold1", "hold1b", "hold2", "hold2b"}; !slices.Equal(g.gets, want) {
			t.Fatalf("reads alone %v, want %v", g.gets, want)
		}
		if len(g.ctxErrs) != 2 || g.ctxErrs[0] != nil || g.ctxErrs[1] != nil {
			t.Fatalf("the batches' contexts when they read: %v, want 2 live", g.ctxErrs)
		}
		// The seeds, the holds and round 1's misses stored their outcomes;
		// the requests that gave up and round 2's failed reads stored nothing.
		if keys, rows := countRows(t, d, "idem_keys"), countRows(t, d, "biz"); keys != 9 || rows != 9 || runs.Load() != 9 {
			t.Fatalf("%d keys, %d business rows, %d runs; want 9 each", keys, rows, runs.Load())
		}
	})
}

// Round trips of reads are admitted as the Batcher's batches are
// (admit.go): a read that finds fewer than ReadMaxTrips round trips in
// flight, and as many waiting with it as one of them carries on average,
// goes at once with those waiting; a round trip carries at most
// ReadMaxBatch; and a round trip that ends takes what waits when the
// rule lets it.
func TestReadsRoundTripBounds(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		g := newGatedReads(d, "")
		g.batches = make(chan gatedBatch)
		k := newKeeper(t, g, idem.Config{})
		queued := make(chan string, 1)
		var sentMu sync.Mutex
		var sizes []int
		idem.SetReadHooks(k, func(key idem.Key) { queued <- key.Key }, func(keys []idem.Key) {
			sentMu.Lock()
			sizes = append(sizes, len(keys))
			sentMu.Unlock()
		})
		var runs atomic.Int64
		results := make(chan outcome, 128)
		n := 0
		// start runs a first arrival; wait returns once its read waits.
		start := func(key string) <-chan outcome {
			n++
			ch := make(chan outcome, 1)
			go func() {
				res, err := k.Do(context.Background(), req(key, `{}`), insertWork(&runs, 201, `{}`))
				ch <- outcome{res, err}
				results <- outcome{res, err}
			}()
			return ch
		}
		wait := func() {
			start(fmt.Sprintf("f%d", n))
			<-queued
		}
		// Two lone reads, each a round trip, held in flight: the second
		// goes beside the first, which carries one.
		release, release2 := g.hold("hold"), g.hold("hold2")
		defer release()
		defer release2()
		start("hold")
		<-g.entered
		hold2 := start("hold2")
		<-g.entered
		// Then reads wait, more than a round trip carries.
		for range idem.ReadMaxBatch + 4 {
			wait()
		}
		release()
		full := <-g.batches // the first round trip's end sends ReadMaxBatch
		release2()
		<-hold2
		// The second's end sends none: 4 wait, and the round trip in flight
		// carries ReadMaxBatch.
		select {
		case b := <-g.batches:
			t.Fatalf("a round trip of %d went beside one of %d", len(b.keys), len(full.keys))
		default:
		}
		// As many waiting as it carries go beside it, at once.
		for range idem.ReadMaxBatch - 5 {
			wait()
		}
		start(fmt.Sprintf("f%d", n))
		beside := <-g.batches
		close(full.go_)
		close(beside.go_)
		for range n {
			if o := <-results; o.err != nil || o.res.Replayed {
				t.Fatalf("%+v, want a first arrival", o)
			}
		}
		sentMu.Lock()
		defer sentMu.Unlock()
		if want := []int{1, 1, idem.ReadMaxBatch, idem.ReadMaxBatch}; !slices.Equal(sizes, want) {
			t.Fatalf("round trips of %v reads, want %v", sizes, want)
		}
		if keys := countRows(t, d, "idem_keys"); keys != n {
			t.Fatalf("%d keys, want %d", keys, n)
		}
	})
}

// A read handed a round trip to lead as its caller gives up still sends
// it: the other reads in it get their answers, and the reads come to rest.
func TestReadsLeaderGivesUp(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		g := newGatedReads(d, "")
		k := newKeeper(t, g, idem.Config{})
		var runs atomic.Int64
		for _, key := range []string{"r1", "r2"} {
			if _, err := k.Do(context.Background(), req(key, `{}`), insertWork(&runs, 201, key)); err != nil {
				t.Fatal(err)
			}
		}
		queued := make(chan string, 2)
		var trips tripLog
		idem.SetReadHooks(k, func(key idem.Key) { queued <- key.Key }, trips.sent)
		do := func(ctx context.Context, key string) <-chan outcome {
			ch := make(chan outcome, 1)
			go func() {
				res, err := k.Do(ctx, req(key, `{}`), insertWork(&runs, 201, key))
				ch <- outcome{res, err}
			}()
			return ch
		}
		// Two round trips held in flight, so that r1 and r2 wait.
		releaseA, releaseB := g.hold("holdA"), g.hold("holdB")
		defer releaseA()
		defer releaseB()
		holdA := do(context.Background(), "holdA")
		<-g.entered
		holdB := do(context.Background(), "holdB")
		<-g.entered
		// As r1's caller gives up, the first round trip ends and hands the
		// waiting reads, r1 first, to r1's goroutine to send.
		idem.SetReadGaveUpHook(k, func(idem.Key) {
			releaseA()
			if o := <-holdA; o.err != nil {
				t.Errorf("holdA: %v", o.err)
			}
		})
		gone, giveUp := context.WithCancel(context.Background())
		defer giveUp()
		r1 := do(gone, "r1")
		<-queued
		r2 := do(context.Background(), "r2")
		<-queued
		giveUp()
		if o := <-r1; o.err != nil && !errors.Is(o.err, context.Canceled) {
			t.Fatalf("r1, given up as it was handed its round trip: %+v", o)
		}
		select {
		case o := <-r2:
			if o.err != nil || !o.res.Replayed || string(o.res.Body) != "r2" {
				t.Fatalf("r2: %+v, want its own record replayed", o)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("r2 has no answer: the round trip r1 was handed was never sent")
		}
		releaseB()
		if o := <-holdB; o.err != nil {
			t.Fatalf("holdB: %v", o.err)
		}
		if sent, want := trips.take(), [][]string{{"holdA"}, {"holdB"}, {"r1", "r2"}}; !slices.EqualFunc(sent, want, slices.Equal) {
			t.Fatalf("round trips %v, want %v", sent, want)
		}
		if !idem.ReadsAtRest(k) {
			t.Fatal("the reads are not at rest once every caller returned")
		}
	})
}

// A storm of reads whose callers give up at any moment — while they wait,
// while their round trip is in flight, or as they are handed a round trip
// to lead — leaves every other caller its own answer and the reads at
// rest: every round trip ended and counted, nothing waiting. Each key is
// stored once, by its one side effect.
func TestReadsCallersGiveUp(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, newGatedReads(d, ""), idem.Config{})
		var runs atomic.Int64
		const stored, callers = 20, 200
		for i := range stored {
			key := fmt.Sprintf("r%d", i)
			if _, err := k.Do(context.Background(), req(key, `{}`), insertWork(&runs, 201, key)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var firsts atomic.Int64 // first arrivals answered
		errs := make(chan error, callers)
		for i := range callers {
			key := fmt.Sprintf("r%d", i%stored) // a replay
			if i%2 == 1 {
				key = fmt.Sprintf("m%d", i) // a first arrival
			}
			ctx, cancel := context.WithCancel(context.Background())
			gives := i%3 == 0
			if gives {
				time.AfterFunc(time.Duration(i%7)*300*time.Microsecond, cancel)
			}
			wg.Go(func() {
				defer cancel()
				res, err := k.Do(ctx, req(key, `{}`), insertWork(&runs, 201, key))
				switch {
				case gives && errors.Is(err, context.Canceled):
				case err != nil:
					errs <- fmt.Errorf("%s: %w", key, err)
				case string(res.Body) != key || res.Replayed != (key[0] == 'r'):
					errs <- fmt.Errorf("%s: %+v, want its own answer", key, res)
				case !res.Replayed:
					firsts.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if !idem.ReadsAtRest(k) {
			t.Fatal("the reads are not at rest once every caller returned")
		}
		// A first arrival that gave up during its work ran it and rolled
		// it back: each stored key has its one row, and every answered
		// first arrival stored its key.
		keys, rows := countRows(t, d, "idem_keys"), countRows(t, d, "biz")
		if keys != rows || int64(rows) < stored+firsts.Load() {
			t.Fatalf("%d keys, %d business rows, %d first arrivals answered: want a row a key, and every answered one stored",
				keys, rows, firsts.Load())
		}
	})
}

// KeyGetBatch answers each key with its own record, or nil where there is
// none, in the order asked and repeats included: on the reader, in a
// transaction the driver began and in one the user began. On PostgreSQL a
// statement that fails fails the batch, and the pool serves the next one.
// SQLite is no driver.KeyReadBatcher: there the keeper's fallback,
// driver.KeyGetEach, is checked the same way.
func TestKeyGetBatch(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		rb, ok := d.(driver.KeyReadBatcher)
		if !ok {
			rb = keyGetEach{d}
		}
		k := newKeeper(t, d, idem.Config{})
		ctx := context.Background()
		var runs atomic.Int64
		for _, key := range []string{"a", "b"} {
			if _, err := k.Do(ctx, req(key, `{}`), insertWork(&runs, 201, `{"id":"`+key+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
		id := func(key string) driver.KeyID {
			return driver.KeyID{Scope: "tenant-a", Operation: "POST /v1/things", Key: key}
		}
		ids := []driver.KeyID{id("b"), id("none"), id("a"), id("b")}
		check := func(name string, recs []*driver.KeyRecord, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want := []string{`{"id":"b"}`, "", `{"id":"a"}`, `{"id":"b"}`}
			if len(recs) != len(want) {
				t.Fatalf("%s: %d records, want %d", name, len(recs), len(want))
			}
			for i, rec := range recs {
				switch {
				case want[i] == "" && rec != nil:
					t.Fatalf("%s: record %d: %+v, want none", name, i, rec)
				case want[i] == "":
				case rec == nil || rec.ID != ids[i] || string(rec.Body) != want[i] || rec.Status != 201 ||
					len(rec.Fingerprint) == 0 || !rec.ExpiresAt.After(rec.CreatedAt):
					t.Fatalf("%s: record %d: %+v, want %s's", name, i, rec, ids[i].Key)
				}
			}
		}
		recs, err := rb.KeyGetBatch(ctx, d.Reader(), &driver.KeyGetBatchParams{IDs: ids})
		check("reader", recs, err)
		began, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer began.Rollback(ctx) //nolint:errcheck // read only
		recs, err = rb.KeyGetBatch(ctx, began, &driver.KeyGetBatchParams{IDs: ids})
		check("the driver's transaction", recs, err)
		user := userTx(t, d)
		defer user.Rollback(ctx) //nolint:errcheck // read only
		recs, err = rb.KeyGetBatch(ctx, user, &driver.KeyGetBatchParams{IDs: ids})
		check("the user's transaction", recs, err)

		if d.Dialect() != "postgres" {
			return
		}
		// Not UTF-8: PostgreSQL refuses the statement's parameter.
		bad := slices.Insert(slices.Clone(ids), 2, driver.KeyID{Scope: "\xff", Operation: "POST /v1/things", Key: "a"})
		if recs, err := rb.KeyGetBatch(ctx, d.Reader(), &driver.KeyGetBatchParams{IDs: bad}); err == nil {
			t.Fatalf("a batch with a failing statement: %v, want an error", recs)
		}
		recs, err = rb.KeyGetBatch(ctx, d.Reader(), &driver.KeyGetBatchParams{IDs: ids})
		check("reader after a failed batch", recs, err)
	})
}

// Requests read their key before the claim only while enough of them find
// a record: after a window of first arrivals the next window claims
// without reading; replays in it are still answered by their claims, with
// their stored outcomes and no second run of their work; a window in which
// one request in ReadWorth found a record brings the reads back, and one
// with fewer stops them again. Each request is sequential, so each read is
// a lone KeyGet, which gatedReads counts (and it batches reads on both
// drivers, as PostgreSQL does).
func TestReadsOnlyWhileTheyFind(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		g := newGatedReads(d, "")
		k := newKeeper(t, g, idem.Config{})
		ctx := context.Background()
		var runs atomic.Int64
		reads := func() int {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.gets)
		}
		first := func(key string) {
			t.Helper()
			res, err := k.Do(ctx, req(key, `{}`), insertWork(&runs, 201, `{"id":"`+key+`"}`))
			if err != nil || res.Replayed {
				t.Fatalf("first arrival %s: %+v, %v", key, res, err)
			}
		}
		replay := func(key string) {
			t.Helper()
			res, err := k.Do(ctx, req(key, `{}`), insertWork(&runs, 201, `{"again":true}`))
			if err != nil || !res.Replayed || res.Status != 201 || string(res.Body) != `{"id":"`+key+`"}` {
				t.Fatalf("replay %s: %+v, %v", key, res, err)
			}
		}
		// window runs a window of requests, the first replays of them
		// replays of a's keys and the rest first arrivals, and checks how
		// many of them read first.
		window := func(name string, replays int, wantReads int) {
			t.Helper()
			before, ran := reads(), runs.Load()
			for i := range idem.ReadWindow {
				if i < replays {
					replay(fmt.Sprintf("a-%d", i))
				} else {
					first(fmt.Sprintf("%s-%d", name, i))
				}
			}
			if got := reads() - before; got != wantReads {
				t.Fatalf("window %s: %d reads, want %d", name, got, wantReads)
			}
			if got, want := runs.Load()-ran, int64(idem.ReadWindow-replays); got != want {
				t.Fatalf("window %s: the work ran %d times, want %d", name, got, want)
			}
		}
		w, share := idem.ReadWindow, idem.ReadWindow/idem.ReadWorth
		window("a", 0, w)       // a new keeper reads first; nothing found
		window("b", 0, 0)       // so the next window does not read
		window("c", share, 0)   // its replays are found by their claims
		window("d", share-1, w) // one in ReadWorth found: reads are back
		window("e", 0, 0)       // one fewer: they stop again
		if got, want := countRows(t, d, "biz"), 5*w-2*share+1; got != want {
			t.Fatalf("biz rows %d, want %d", got, want)
		}
		if got, want := countRows(t, d, "idem_keys"), 5*w-2*share+1; got != want {
			t.Fatalf("idem_keys rows %d, want %d", got, want)
		}
	})
}

// The reads waiting for a round trip are bounded: past the bound a request
// does not read, and its claim answers it (a replay here), without waiting
// for the round trips in flight.
func TestReadsQueueBound(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		g := newGatedReads(d, "")
		k := newKeeper(t, g, idem.Config{})
		idem.SetReadQueueBound(k, 2)
		queued := make(chan string, 16)
		idem.SetReadHooks(k, func(key idem.Key) { queued <- key.Key }, nil)
		var runs atomic.Int64
		for _, key := range []string{"a", "b", "c"} {
			if _, err := k.Do(context.Background(), req(key, `{}`), insertWork(&runs, 201, `{"id":"`+key+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
		release, release2 := g.hold("hold"), g.hold("hold2")
		defer release()
		defer release2()
		do := func(key string) <-chan outcome {
			ch := make(chan outcome, 1)
			go func() {
				res, err := k.Do(context.Background(), req(key, `{}`), insertWork(&runs, 201, `{"id":"`+key+`"}`))
				ch <- outcome{res, err}
			}()
			return ch
		}
		// Two lone reads held in flight, as many round trips as may be.
		hold := do("hold")
		<-g.entered
		hold2 := do("hold2")
		<-g.entered
		wa, wb := do("a"), do("b")
		<-queued
		<-queued
		c := do("c")
		select {
		case o := <-c:
			if o.err != nil || !o.res.Replayed || string(o.res.Body) != `{"id":"c"}` {
				t.Fatalf("c past the bound: %+v, want its replay from the claim", o)
			}
		case key := <-queued:
			t.Fatalf("%s queued past the bound of 2", key)
		}
		release()
		release2()
		for key, ch := range map[string]<-chan outcome{"hold": hold, "hold2": hold2, "a": wa, "b": wb} {
			if o := <-ch; o.err != nil {
				t.Fatalf("%s: %v", key, o.err)
			}
		}
	})
}

// keyGetEach is a driver.KeyReadBatcher through the keeper's fallback.
type keyGetEach struct{ d driver.Driver }

func (e keyGetEach) KeyGetBatch(ctx context.Context, tx driver.Tx, p *driver.KeyGetBatchParams) ([]*driver.KeyRecord, error) {
	return driver.KeyGetEach(ctx, e.d, tx, p)
}
