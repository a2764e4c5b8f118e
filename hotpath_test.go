package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
)

// shortClaims is a driver whose KeyClaimBatch answers one claim fewer
// than it was asked: a driver bug the batcher must catch, not answer.
type shortClaims struct{ driver.Driver }

func (d shortClaims) KeyClaimBatch(ctx context.Context, tx driver.Tx, p *driver.KeyClaimBatchParams) ([]driver.KeyClaimResult, error) {
	res, err := driver.ClaimBatch(ctx, d.Driver, tx, p)
	if err != nil || len(res) == 0 {
		return res, err
	}
	return res[:len(res)-1], nil
}

func (d shortClaims) KeyRecordBatch(ctx context.Context, tx driver.Tx, p *driver.KeyRecordBatchParams) error {
	return driver.RecordBatch(ctx, d.Driver, tx, p)
}

// A driver that answers fewer claims than the batch holds fails the
// batch: no request is answered as if it had committed, nothing is stored.
func TestBatcherChecksClaimCount(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, shortClaims{d}, idem.Config{})
		r := &rig{t: t, d: d, k: k, runs: map[string]int{}, queued: make(chan idem.Key, 100), joined: make(chan idem.Key, 100), holds: map[string]holding{}}
		r.b = r.newBatcher(k, idem.BatchConfig{Concurrency: 1})
		res, err := r.b.Do(context.Background(), req("a", `{}`), thing{key: "a", body: `{"a":1}`})
		if err == nil || !strings.Contains(err.Error(), "claims of") {
			t.Fatalf("short claims: %v %+v, want an error", err, res)
		}
		if r.stored("a") != "" || countRows(t, d, "biz") != 0 {
			t.Fatalf("stored %q, %d biz rows", r.stored("a"), countRows(t, d, "biz"))
		}
	})
}

// A batch fails whole, without splitting, on an error no request can
// cause (the database unavailable): each request gets it from the one
// transaction, instead of 2n-1 transactions that all fail alike.
func TestBatcherSplitsOnlyOnItemErrors(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1})
		release := r.hold("hold")
		wait := r.do(thing{key: "a"}, thing{key: "b"}, thing{key: "down", down: true}, thing{key: "c"})
		release()
		_, errs := wait()
		for i, err := range errs {
			if !errors.Is(err, driver.ErrUnavailable) {
				t.Fatalf("request %d: %v, want ErrUnavailable", i, err)
			}
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"a", "b", "down", "c"})
		if got := countRows(t, d, "idem_keys"); got != 1 {
			t.Fatalf("idem_keys rows %d, want the held request's only", got)
		}
	})
}

// A panic in DoFunc's makeItem (idemhttp's Batched decodes there) is
// recovered as the work's is: a *PanicError, nothing stored, and the key
// free for the next request.
func TestBatcherMakeItemPanics(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{Logger: slog.New(slog.DiscardHandler)}, idem.BatchConfig{})
		ctx := context.Background()
		var err error
		func() {
			defer func() {
				if v := recover(); v != nil {
					t.Fatalf("DoFunc let makeItem's panic through: %v", v)
				}
			}()
			_, err = r.b.DoFunc(ctx, req("p", `{}`), func(context.Context) (thing, error) { panic("decode bug") })
		}()
		var pe *idem.PanicError
		if !errors.As(err, &pe) || pe.Value != "decode bug" || pe.Key.Key != "p" {
			t.Fatalf("makeItem panicked: %v, want a *PanicError", err)
		}
		res, err := r.b.Do(ctx, req("p", `{}`), thing{key: "p", body: `{"p":1}`})
		if err != nil || res.Replayed || r.stored("p") != `{"p":1}` {
			t.Fatalf("the retry: %v %+v", err, res)
		}
	})
}

// Close(ctx) returns ctx's error when a batch outlives ctx, and nil once
// every batch answered; after it, Do gets ErrBusy.
func TestBatcherCloseContext(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1})
		release := r.hold("hold")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := r.b.Close(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Close with a batch running and ctx done: %v, want context.Canceled", err)
		}
		release()
		if err := r.b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := r.b.Do(context.Background(), req("late", `{}`), thing{key: "late"}); !errors.Is(err, idem.ErrBusy) {
			t.Fatalf("after Close: %v, want ErrBusy", err)
		}
		if r.stored("hold") == "" {
			t.Fatal("the held batch did not commit")
		}
	})
}

// A caller that gives up once its batch was taken still gets the batch's
// answer while a neighbour keeps the batch going: its request committed,
// and Do never says "nothing stored" of it.
func TestBatcherCallerCancelledAfterTaken(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1})
		release := r.hold("hold")
		h := r.holdWork("a")
		ctx, cancel := context.WithCancel(context.Background())
		results, errs := make([]idem.Result, 2), make([]error, 2)
		var wg sync.WaitGroup
		for i, c := range []context.Context{ctx, context.Background()} {
			key := []string{"a", "b"}[i]
			wg.Go(func() {
				results[i], errs[i] = r.b.Do(c, req(key, `{}`), thing{key: key, body: `{"` + key + `":1}`})
			})
			r.waitQueued(1)
		}
		release()
		<-h.entered
		cancel()
		close(h.release)
		wg.Wait()
		for i, key := range []string{"a", "b"} {
			want := `{"` + key + `":1}`
			if errs[i] != nil || string(results[i].Body) != want || r.stored(key) != want {
				t.Fatalf("%s: %v %+v, stored %q", key, errs[i], results[i], r.stored(key))
			}
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"a", "b"})
	})
}

// When every caller of a batch gives up, the batch's context ends: it
// rolls back once, without splitting, nothing is stored, and each caller
// gets its context's error.
func TestBatcherEveryCallerCancelled(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1})
		release := r.hold("hold")
		h := r.holdWork("a")
		ctx, cancel := context.WithCancel(context.Background())
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, key := range []string{"a", "b"} {
			wg.Go(func() { _, errs[i] = r.b.Do(ctx, req(key, `{}`), thing{key: key, body: `{}`}) })
			r.waitQueued(1)
		}
		release()
		bctx := <-h.entered
		cancel()
		<-bctx.Done() // the callers' leaving reaches the batch on goroutines of its own
		close(h.release)
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("caller %d: %v, want context.Canceled", i, err)
			}
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"a", "b"})
		if r.stored("a") != "" || r.stored("b") != "" {
			t.Fatal("a batch whose callers all gave up stored outcomes")
		}
	})
}

// A batch whose oldest request's caller has gone, before its goroutine
// could withdraw it from the queue, still carries the others: the batch's
// context ends only once every caller in it has gone, and each request is
// answered.
func TestBatcherTakesGoneCallerWithOthers(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		r := newRig(t, d, idem.Config{}, idem.BatchConfig{Concurrency: 1})
		aQueued, stall := make(chan struct{}), make(chan struct{})
		idem.SetQueuedHook(r.b, func(k idem.Key) {
			if k.Key == "a" { // a's goroutine stops here, its request in the queue
				close(aQueued)
				<-stall
			}
			r.queued <- k
		})
		release := r.hold("hold")
		ctx, cancel := context.WithCancel(context.Background())
		aDone := make(chan error, 1)
		go func() {
			_, err := r.b.Do(ctx, req("a", `{}`), thing{key: "a", body: `{"a":1}`})
			aDone <- err
		}()
		<-aQueued
		bDone := make(chan error, 1)
		go func() {
			_, err := r.b.Do(context.Background(), req("b", `{}`), thing{key: "b", body: `{"b":1}`})
			bDone <- err
		}()
		r.waitQueued(1)
		cancel()
		release() // the next batch takes a, whose caller has gone, and b
		close(stall)
		select {
		case err := <-bDone:
			if err != nil || r.stored("b") != `{"b":1}` {
				t.Fatalf("b beside a gone caller: %v, stored %q", err, r.stored("b"))
			}
		case <-time.After(time.Minute):
			t.Fatal("b was never answered: taken from the queue, but left out of its batch")
		}
		if err := <-aDone; err != nil || r.stored("a") != `{"a":1}` {
			t.Fatalf("a, taken into a batch that committed: %v, stored %q", err, r.stored("a"))
		}
		wantAttempts(t, r.attemptsSoFar(), []string{"hold"}, []string{"a", "b"})
	})
}

// The janitor skips an expired record another transaction holds (a claim
// replacing it, as a batch's claims do in key order) instead of waiting on
// it: it deletes the rest and never deadlocks against the claims.
// Postgres only: SQLite's one writer never lets two transactions hold rows.
func TestJanitorSkipsLockedRecords(t *testing.T) {
	d := drivertest.Open(t, "postgres")
	setup(t, d)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	k := newKeeper(t, d, idem.Config{Retention: time.Hour, Memory: time.Hour, Clock: clock})
	ctx := context.Background()
	var runs atomic.Int64
	for _, key := range []string{"held", "free"} {
		if _, err := k.Do(ctx, req(key, `{}`), insertWork(&runs, 201, `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	now.Add(int64(2 * time.Hour))
	tx := userTx(t, d)
	defer tx.Rollback(ctx)
	if res, err := k.DoTx(ctx, tx, req("held", `{"new":1}`), insertWork(&runs, 201, `{}`)); err != nil || res.Replayed {
		t.Fatalf("claim of the expired key: %v %+v", err, res)
	}
	n, err := k.DeleteExpired(ctx)
	if err != nil || n != 1 {
		t.Fatalf("janitor beside a held record: deleted %d, %v; want 1, no wait", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, d, "idem_keys"); got != 1 {
		t.Fatalf("idem_keys rows %d, want the renewed key only", got)
	}
}

// A batch's work runs the user's SQL as written: the planner settings idem
// uses for its own statements do not reach the work's. Postgres only:
// SQLite has no plan cache mode.
func TestBatchWorkRunsUnderSessionPlans(t *testing.T) {
	d := drivertest.Open(t, "postgres")
	setup(t, d)
	k := newKeeper(t, d, idem.Config{})
	var modes []string
	var mu sync.Mutex
	b, err := idem.NewBatcher(k, func(ctx context.Context, tx driver.Tx, items []string) ([]idem.ItemResult, error) {
		var mode string
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil {
			return nil, err
		}
		mu.Lock()
		modes = append(modes, mode)
		mu.Unlock()
		out := make([]idem.ItemResult, len(items))
		for i := range out {
			out[i].Outcome = idem.Outcome{Status: 201}
		}
		return out, nil
	}, idem.BatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background()) //nolint:errcheck // no deadline: it waits
	if _, err := b.Do(context.Background(), req("a", `{}`), "a"); err != nil {
		t.Fatal(err)
	}
	if len(modes) != 1 || modes[0] != "auto" {
		t.Fatalf("the work's plan_cache_mode %q, want the session's auto", modes)
	}
}
