package idem_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	code := testpg.Main(m)
	code = leakcheck.After(code)
	os.Exit(code)
}

// The business table the tests' work writes to: one row per side effect.
const sqlBizTable = `CREATE TABLE biz (k TEXT NOT NULL, note TEXT NOT NULL)`

func setup(t *testing.T, d driver.Driver) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sqlBizTable); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// insertWork is work with one side effect: a row in biz. It counts its runs.
func insertWork(runs *atomic.Int64, status int, body string) idem.Work {
	return func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		runs.Add(1)
		if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ($1, $2)`, "x", body); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{
			Status: status,
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(body),
		}, nil
	}
}

func countRows(t *testing.T, d driver.Driver, table string) int {
	t.Helper()
	var n int
	// The table name is a constant of the test, never input.
	if err := d.Reader().QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func newKeeper(t *testing.T, d driver.Driver, cfg idem.Config) *idem.Keeper {
	t.Helper()
	k, err := idem.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func req(key, body string) idem.Request {
	return idem.Request{Key: idem.Key{Scope: "tenant-a", Operation: "POST /v1/things", Key: key}, Body: []byte(body)}
}

// Test 1: the same request twice: one business row; the second outcome is
// byte-identical and marked replayed.
func TestSameRequestTwice(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, d, idem.Config{})
		ctx := context.Background()
		var runs atomic.Int64
		body := `{"amount":100,"currency":"EUR"}`

		first, err := k.Do(ctx, req("k1", body), insertWork(&runs, 201, `{"id":"t1"}`))
		if err != nil {
			t.Fatal(err)
		}
		second, err := k.Do(ctx, req("k1", body), insertWork(&runs, 201, `{"id":"t2"}`))
		if err != nil {
			t.Fatal(err)
		}
		if first.Replayed || !second.Replayed {
			t.Fatalf("replayed flags: first %v, second %v", first.Replayed, second.Replayed)
		}
		if second.Status != 201 || string(second.Body) != string(first.Body) ||
			second.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("replay differs: %d %q %v, first %q", second.Status, second.Body, second.Header, first.Body)
		}
		// Canonically equal JSON (other key order, white space) is the same request.
		third, err := k.Do(ctx, req("k1", `{ "currency":"EUR", "amount":100 }`), insertWork(&runs, 201, `{}`))
		if err != nil || !third.Replayed {
			t.Fatalf("canonical twin: %v replayed=%v", err, third.Replayed)
		}
		if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 1 {
			t.Fatalf("biz rows %d, runs %d; want 1, 1", got, runs.Load())
		}
	})
}

// Test 2: 50 goroutines with the same key at once: one business row, 50
// identical outcomes, no errors with the default wait.
func TestConcurrentSameKey(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, d, idem.Config{})
		var runs atomic.Int64
		results := make([]idem.Result, 50)
		errs := make([]error, 50)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = k.Do(context.Background(), req("storm", `{"n":1}`), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
					time.Sleep(20 * time.Millisecond) // keep the twins waiting
					return insertWork(&runs, 201, `{"id":"only"}`)(ctx, tx)
				})
			}()
		}
		close(start)
		wg.Wait()
		replayed := 0
		for i := range results {
			if errs[i] != nil {
				t.Fatalf("copy %d: %v", i, errs[i])
			}
			if results[i].Status != 201 || string(results[i].Body) != `{"id":"only"}` {
				t.Fatalf("copy %d: %d %q", i, results[i].Status, results[i].Body)
			}
			if results[i].Replayed {
				replayed++
			}
		}
		if replayed != 49 {
			t.Fatalf("replayed %d of 50, want 49", replayed)
		}
		if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 1 {
			t.Fatalf("biz rows %d, runs %d; want 1, 1", got, runs.Load())
		}
	})
}

// The same storm across two keepers with separate pools (two processes'
// worth): here the database, not the in-process flight, makes the twins wait.
func TestConcurrentSameKeyTwoKeepers(t *testing.T) {
	ctx := context.Background()
	url := drivertest.PostgresURL(t)
	open := func() driver.Driver {
		d, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	d1, d2 := open(), open()
	if err := d1.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	setup(t, d1)
	keepers := []*idem.Keeper{newKeeper(t, d1, idem.Config{}), newKeeper(t, d2, idem.Config{})}
	var runs atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	bodies := make(chan string, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := keepers[i%2].Do(ctx, req("two", `{}`), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
				time.Sleep(50 * time.Millisecond)
				return insertWork(&runs, 200, `{"ok":true}`)(ctx, tx)
			})
			errs <- err
			bodies <- string(res.Body)
		}()
	}
	wg.Wait()
	close(errs)
	close(bodies)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for b := range bodies {
		if b != `{"ok":true}` {
			t.Fatalf("body %q", b)
		}
	}
	if got := countRows(t, d1, "biz"); got != 1 || runs.Load() != 1 {
		t.Fatalf("biz rows %d, runs %d; want 1, 1", got, runs.Load())
	}
}

// A twin held past the wait gets ErrInFlight, and the key then replays.
func TestInFlightPastWait(t *testing.T) {
	ctx := context.Background()
	url := drivertest.PostgresURL(t)
	d1, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := d1.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	setup(t, d1)
	slow := newKeeper(t, d1, idem.Config{})
	impatient := newKeeper(t, d2, idem.Config{Wait: 100 * time.Millisecond})

	var runs atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := slow.Do(ctx, req("held", `{}`), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			close(entered)
			<-release
			return insertWork(&runs, 201, `{"done":1}`)(ctx, tx)
		})
		done <- err
	}()
	<-entered
	_, err = impatient.Do(ctx, req("held", `{}`), insertWork(&runs, 201, `{}`))
	if !errors.Is(err, idem.ErrInFlight) || !idem.IsRetryable(err) {
		t.Fatalf("twin during flight: %v, want ErrInFlight", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	res, err := impatient.Do(ctx, req("held", `{}`), insertWork(&runs, 201, `{}`))
	if err != nil || !res.Replayed || string(res.Body) != `{"done":1}` {
		t.Fatalf("after flight: %v %+v", err, res)
	}
	if got := countRows(t, d1, "biz"); got != 1 {
		t.Fatalf("biz rows %d, want 1", got)
	}
}

// Test 3: same key, different payload: ErrKeyReused carrying the stored
// outcome; nothing written.
func TestKeyReused(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, d, idem.Config{})
		ctx := context.Background()
		var runs atomic.Int64
		if _, err := k.Do(ctx, req("r", `{"amount":1}`), insertWork(&runs, 201, `{"id":"a"}`)); err != nil {
			t.Fatal(err)
		}
		_, err := k.Do(ctx, req("r", `{"amount":2}`), insertWork(&runs, 201, `{"id":"b"}`))
		var reused *idem.ReusedError
		if !errors.Is(err, idem.ErrKeyReused) || !errors.As(err, &reused) {
			t.Fatalf("err %v, want ErrKeyReused", err)
		}
		if string(reused.Stored.Body) != `{"id":"a"}` || reused.Stored.Status != 201 {
			t.Fatalf("stored outcome %+v", reused.Stored)
		}
		if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 1 {
			t.Fatalf("biz rows %d, runs %d; want 1, 1", got, runs.Load())
		}
		// Another operation or another tenant with the same client key is
		// another key entirely.
		other := req("r", `{"amount":2}`)
		other.Key.Scope = "tenant-b"
		if res, err := k.Do(ctx, other, insertWork(&runs, 201, `{"id":"c"}`)); err != nil || res.Replayed {
			t.Fatalf("other tenant: %v %+v", err, res)
		}
		if got := countRows(t, d, "biz"); got != 2 {
			t.Fatalf("biz rows %d, want 2", got)
		}
	})
}

// Test 4: a business failure is stored and replayed; a transient failure
// stores nothing and a retry does the work once.
func TestBusinessAndTransientFailures(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, d, idem.Config{})
		ctx := context.Background()

		business := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			return idem.Outcome{Status: 422, Body: []byte(`{"code":"insufficient_funds"}`)}, nil
		}
		if _, err := k.Do(ctx, req("biz-fail", `{}`), business); err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int64
		res, err := k.Do(ctx, req("biz-fail", `{}`), insertWork(&runs, 201, `{}`))
		if err != nil || !res.Replayed || res.Status != 422 || string(res.Body) != `{"code":"insufficient_funds"}` {
			t.Fatalf("business failure replay: %v %+v", err, res)
		}
		if runs.Load() != 0 {
			t.Fatalf("a stored business failure ran the work again")
		}

		errBoom := errors.New("payment gateway timed out")
		transient := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ('x', 'half')`); err != nil {
				return idem.Outcome{}, err
			}
			return idem.Outcome{}, errBoom
		}
		if _, err := k.Do(ctx, req("flaky", `{}`), transient); !errors.Is(err, errBoom) {
			t.Fatalf("transient: %v", err)
		}
		if got := countRows(t, d, "biz"); got != 0 {
			t.Fatalf("transient failure left %d rows", got)
		}
		if got := countRows(t, d, "idem_keys"); got != 1 {
			t.Fatalf("idem_keys rows %d, want only the business failure's", got)
		}
		for range 2 {
			if _, err := k.Do(ctx, req("flaky", `{}`), insertWork(&runs, 201, `{"ok":1}`)); err != nil {
				t.Fatal(err)
			}
		}
		if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 1 {
			t.Fatalf("after retry: biz rows %d, runs %d; want 1, 1", got, runs.Load())
		}
	})
}

// A panicking work is a bug, not an outcome: Do recovers it, rolls back
// the claim and the work's rows, logs it with the key, returns a
// *PanicError, and releases the key at once, so the retry in the same
// process runs the work (instead of waiting out Wait for ErrInFlight, which
// with Wait at its one-minute bound would fail this test). DoTx recovers
// the same way; a panic with http.ErrAbortHandler is returned, not logged.
func TestWorkPanicsThenRetrySucceeds(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		var logs syncBuffer
		k := newKeeper(t, d, idem.Config{Wait: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		ctx := context.Background()
		var runs atomic.Int64
		panicky := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			if _, err := insertWork(&runs, 201, `{"half":1}`)(ctx, tx); err != nil {
				return idem.Outcome{}, err
			}
			panic("handler bug")
		}

		// The checks of the panic's answer go on after a failure, so that a
		// keeper which lets the panic escape also shows the key it holds.
		_, err := doRecovering(k, req("boom", `{}`), panicky)
		var pe *idem.PanicError
		switch {
		case !errors.Is(err, idem.ErrPanicked) || !errors.As(err, &pe):
			t.Errorf("panicking work: %v, want a *PanicError", err)
		case pe.Value != "handler bug" || pe.Key != req("boom", `{}`).Key || !strings.Contains(string(pe.Stack), "keeper_test.go"):
			t.Errorf("PanicError %+v, stack:\n%s", pe, pe.Stack)
		case idem.IsRetryable(err):
			t.Error("a panic is a bug, not a transient fault")
		}
		if got := logs.String(); !strings.Contains(got, "key=boom") || !strings.Contains(got, `panic="handler bug"`) || !strings.Contains(got, "stack=") {
			t.Errorf("panic not logged with its key and stack: %q", got)
		}
		if b, k := countRows(t, d, "biz"), countRows(t, d, "idem_keys"); b != 0 || k != 0 {
			t.Errorf("a panic left %d biz rows and %d keys", b, k)
		}

		res, err := k.Do(ctx, req("boom", `{}`), insertWork(&runs, 201, `{"ok":1}`))
		if err != nil || res.Replayed || res.Status != 201 {
			t.Fatalf("retry after a panic: %v %+v", err, res)
		}
		res, err = k.Do(ctx, req("boom", `{}`), insertWork(&runs, 201, `{"ok":2}`))
		if err != nil || !res.Replayed || string(res.Body) != `{"ok":1}` {
			t.Fatalf("copy after the retry: %v %+v", err, res)
		}
		if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 2 {
			t.Fatalf("biz rows %d, runs %d; want 1 (the retry's), 2", got, runs.Load())
		}

		tx := userTx(t, d)
		_, err = k.DoTx(ctx, tx, req("boom-tx", `{}`), panicky)
		if !errors.As(err, &pe) || pe.Key.Key != "boom-tx" {
			t.Fatalf("DoTx with panicking work: %v", err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}

		logged := logs.String()
		abort := func(context.Context, driver.Tx) (idem.Outcome, error) { panic(http.ErrAbortHandler) }
		if _, err := k.Do(ctx, req("abort", `{}`), abort); !errors.Is(err, idem.ErrPanicked) || !errors.Is(err, http.ErrAbortHandler) {
			t.Fatalf("abort: %v", err)
		}
		if logs.String() != logged {
			t.Fatalf("http.ErrAbortHandler was logged: %s", strings.TrimPrefix(logs.String(), logged))
		}
		if got := countRows(t, d, "biz"); got != 1 || countRows(t, d, "idem_keys") != 1 {
			t.Fatalf("biz rows %d, keys %d; want 1, 1", got, countRows(t, d, "idem_keys"))
		}
	})
}

// A copy waiting in this process for a twin whose work panics is woken by
// the panic, not by Wait's end: it runs the work itself, once.
func TestWorkPanicReleasesWaiter(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, d, idem.Config{Wait: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		joined := make(chan struct{}, 1)
		idem.SetJoinedHook(k, func(idem.Key) { joined <- struct{}{} })
		var runs atomic.Int64
		entered, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := doRecovering(k, req("shared", `{}`), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
				close(entered)
				<-release
				if _, err := insertWork(&runs, 201, `{"half":1}`)(ctx, tx); err != nil {
					return idem.Outcome{}, err
				}
				panic("handler bug")
			})
			first <- err
		}()
		<-entered
		second := make(chan error, 1)
		var res idem.Result
		go func() {
			var err error
			res, err = k.Do(context.Background(), req("shared", `{}`), insertWork(&runs, 201, `{"ok":1}`))
			second <- err
		}()
		<-joined
		close(release)
		if err := <-second; err != nil || res.Replayed || string(res.Body) != `{"ok":1}` {
			t.Fatalf("waiting copy: %v %+v, want it to run the work", err, res)
		}
		if err := <-first; !errors.Is(err, idem.ErrPanicked) {
			t.Fatalf("first copy: %v, want ErrPanicked", err)
		}
		if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 2 {
			t.Fatalf("biz rows %d, runs %d; want 1, 2", got, runs.Load())
		}
	})
}

// doRecovering is k.Do that turns a panic escaping Do into an error, so
// that a keeper which lets it escape fails the test instead of the binary.
func doRecovering(k *idem.Keeper, r idem.Request, work idem.Work) (res idem.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the panic escaped Do: %v", v)
		}
	}()
	return k.Do(context.Background(), r, work)
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// DoTx claims in the caller's own transaction; the caller's rollback takes
// the claim with it.
func TestDoTxCallerTransaction(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, d, idem.Config{})
		ctx := context.Background()
		var runs atomic.Int64
		attempt := func(commit bool) idem.Result {
			tx := userTx(t, d)
			res, err := k.DoTx(ctx, tx, req("mine", `{}`), insertWork(&runs, 201, `{"v":1}`))
			if err != nil {
				t.Fatal(err)
			}
			if commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		attempt(false)
		if got := countRows(t, d, "idem_keys"); got != 0 {
			t.Fatalf("rolled back claim left %d keys", got)
		}
		if res := attempt(true); res.Replayed {
			t.Fatal("first committed attempt was a replay")
		}
		if res := attempt(true); !res.Replayed {
			t.Fatal("second committed attempt was not a replay")
		}
		if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 2 {
			t.Fatalf("biz rows %d (want 1), runs %d (want 2: one rolled back)", got, runs.Load())
		}
	})
}

// userTx begins a transaction the way a user would, on the driver's own
// pool, and adapts it.
func userTx(t *testing.T, d driver.Driver) driver.TxCloser {
	t.Helper()
	ctx := context.Background()
	switch d := d.(type) {
	case *postgres.Driver:
		tx, err := d.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return closer{Tx: postgres.TxFromPgx(tx), commit: tx.Commit, rollback: tx.Rollback}
	case *sqlite.Driver:
		tx, err := d.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return closer{Tx: sqlite.TxFromStdSQL(tx),
			commit:   func(context.Context) error { return tx.Commit() },
			rollback: func(context.Context) error { return tx.Rollback() }}
	}
	t.Fatalf("unknown driver %T", d)
	return nil
}

type closer struct {
	driver.Tx
	commit, rollback func(context.Context) error
}

func (c closer) Commit(ctx context.Context) error   { return c.commit(ctx) }
func (c closer) Rollback(ctx context.Context) error { return c.rollback(ctx) }

// Test 6: after retention, with no memory beyond it, the key is free again;
// the janitor deletes in batches.
func TestExpiryAndJanitor(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		var mu sync.Mutex
		now := time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		k := newKeeper(t, d, idem.Config{Retention: time.Hour, Memory: time.Hour, JanitorBatch: 10, Clock: clock})
		ctx := context.Background()
		var runs atomic.Int64

		for i := range 25 {
			if _, err := k.Do(ctx, req(fmt.Sprintf("k%d", i), `{}`), insertWork(&runs, 201, `{}`)); err != nil {
				t.Fatal(err)
			}
		}
		advance(59 * time.Minute)
		if res, err := k.Do(ctx, req("k0", `{}`), insertWork(&runs, 201, `{}`)); err != nil || !res.Replayed {
			t.Fatalf("inside retention: %v %+v", err, res)
		}
		if n, err := k.DeleteExpired(ctx); err != nil || n != 0 {
			t.Fatalf("janitor inside retention deleted %d: %v", n, err)
		}
		advance(time.Minute)
		// An expired key behaves as new, even before the janitor runs.
		if res, err := k.Do(ctx, req("k0", `{"changed":true}`), insertWork(&runs, 201, `{}`)); err != nil || res.Replayed {
			t.Fatalf("expired key: %v %+v", err, res)
		}
		if got := countRows(t, d, "biz"); got != 26 {
			t.Fatalf("biz rows %d, want 26", got)
		}
		var batches []int
		for {
			n, err := k.DeleteExpired(ctx)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, n)
			if n < 10 {
				break
			}
		}
		if fmt.Sprint(batches) != "[10 10 4]" {
			t.Fatalf("janitor batches %v, want [10 10 4] (k0 was renewed)", batches)
		}
		if got := countRows(t, d, "idem_keys"); got != 1 {
			t.Fatalf("idem_keys rows %d, want the renewed k0 only", got)
		}
	})
}

// RunJanitor deletes on its own, batch after batch.
func TestRunJanitor(t *testing.T) {
	d := drivertest.Open(t, "sqlite")
	setup(t, d)
	var clockNow atomic.Int64
	clockNow.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, clockNow.Load()) }
	k := newKeeper(t, d, idem.Config{Retention: time.Second, JanitorInterval: time.Second, JanitorBatch: 2, Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int64
	for i := range 5 {
		if _, err := k.Do(ctx, req(fmt.Sprint(i), `{}`), insertWork(&runs, 200, `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	clockNow.Add(int64(time.Hour))
	done := make(chan struct{})
	go func() { k.RunJanitor(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for countRows(t, d, "idem_keys") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("janitor did not delete expired keys")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
}

// Test 7: bad input: each a typed validation error, nothing run.
func TestBadKeys(t *testing.T) {
	d := drivertest.Open(t, "sqlite")
	k := newKeeper(t, d, idem.Config{})
	work := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		t.Error("work ran for a bad key")
		return idem.Outcome{}, nil
	}
	cases := map[string]error{
		"":                       idem.ErrKeyMissing,
		strings.Repeat("a", 256): idem.ErrKeyInvalid,
		"has space":              idem.ErrKeyInvalid,
		"tab\there":              idem.ErrKeyInvalid,
		"nl\n":                   idem.ErrKeyInvalid,
		"del\x7f":                idem.ErrKeyInvalid,
		"ünïcode":                idem.ErrKeyInvalid,
	}
	for key, want := range cases {
		_, err := k.Do(context.Background(), req(key, `{}`), work)
		if !errors.Is(err, want) {
			t.Errorf("key %q: %v, want %v", key, err, want)
		}
	}
	if _, err := k.Do(context.Background(), req("ok", `{"unterminated"`), work); !errors.Is(err, idem.ErrInvalidBody) {
		t.Errorf("bad JSON body: %v", err)
	}
	if got := countRows(t, d, "idem_keys"); got != 0 {
		t.Fatalf("bad input stored %d keys", got)
	}
}

func TestConfigBounds(t *testing.T) {
	d := drivertest.Open(t, "sqlite")
	for _, cfg := range []idem.Config{
		{Retention: time.Millisecond},
		{Wait: time.Hour},
		{MaxWaiters: -1},
		{JanitorBatch: 1 << 20},
		{JanitorInterval: time.Millisecond},
	} {
		if _, err := idem.New(d, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if _, err := idem.New(nil, idem.Config{}); err == nil {
		t.Error("nil driver accepted")
	}
}

// Test 5: a real child process is SIGKILLed after the work's writes but
// before commit: nothing is stored; a retry does the work once.
func TestKilledBeforeCommit(t *testing.T) {
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			var dbURL string
			var d driver.Driver
			ctx := context.Background()
			if dialect == "postgres" {
				dbURL = drivertest.PostgresURL(t)
				pd, err := postgres.Open(ctx, postgres.Config{URL: dbURL})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pd.Close() })
				d = pd
			} else {
				path := filepath.Join(t.TempDir(), "idem.db")
				dbURL = "sqlite:" + path
				sd, err := sqlite.Open(ctx, sqlite.Config{Path: path})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { sd.Close() })
				d = sd
			}
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			setup(t, d)

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+dbURL, "IDEM_FAILPOINT=keeper.before_commit")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			reached := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					if sc.Text() == "failpoint: keeper.before_commit" {
						reached <- true
						io := sc
						for io.Scan() { // drain
						}
						return
					}
				}
				reached <- false
			}()
			select {
			case ok := <-reached:
				if !ok {
					t.Fatal("child exited before the failpoint")
				}
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("child did not reach the failpoint")
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die of SIGKILL: %v", err)
			}

			if got := countRows(t, d, "biz"); got != 0 {
				t.Fatalf("killed before commit, yet %d biz rows", got)
			}
			if got := countRows(t, d, "idem_keys"); got != 0 {
				t.Fatalf("killed before commit, yet %d keys stored", got)
			}
			k := newKeeper(t, d, idem.Config{})
			var runs atomic.Int64
			for range 2 {
				if _, err := k.Do(ctx, req("crash", `{"amount":5}`), insertWork(&runs, 201, `{"id":"x"}`)); err != nil {
					t.Fatal(err)
				}
			}
			if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 1 {
				t.Fatalf("after retry: biz rows %d, runs %d; want 1, 1", got, runs.Load())
			}
		})
	}
}

// childEnv carries the database URL to the crash test's child process.
const childEnv = "IDEM_TEST_KEEPER_CHILD"

// runChild is the crash test's child: it does the work of one request and
// stops at the keeper.before_commit failpoint, where the parent kills it.
func runChild() {
	ctx := context.Background()
	dbURL := os.Getenv(childEnv)
	var d driver.Driver
	var err error
	if path, ok := strings.CutPrefix(dbURL, "sqlite:"); ok {
		d, err = sqlite.Open(ctx, sqlite.Config{Path: path})
	} else {
		d, err = postgres.Open(ctx, postgres.Config{URL: dbURL})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	k, err := idem.New(d, idem.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	var runs atomic.Int64
	_, err = k.Do(ctx, req("crash", `{"amount":5}`), insertWork(&runs, 201, `{"id":"x"}`))
	fmt.Fprintln(os.Stderr, "child: Do returned without being killed:", err)
	os.Exit(4)
}
