package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/ledger"
)

// asOfAnswer is what one read as of a moment answered: the balance and the
// entries (sequence and running balance, newest first).
type asOfAnswer struct {
	Balance ledger.Balance
	Entries []string
}

// readAsOf reads an account's balance and entries as of asOf the way the
// service does: a read-only transaction first, a read-write one when the
// ledger asks for it (inspect.ReadAsOf).
func readAsOf(ctx context.Context, d driver.Driver, l *ledger.Ledger, id string, asOf time.Time) (asOfAnswer, error) {
	var a asOfAnswer
	err := inspect.ReadAsOf(ctx, d, l, &asOf, func(ctx context.Context) (driver.TxCloser, error) {
		return d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	}, func(tx driver.Tx) error {
		b, err := l.Balance(ctx, tx, ledger.BalanceQuery{Tenant: tenant, AccountID: id, AsOf: &asOf})
		if err != nil {
			return err
		}
		es, next, err := l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: id, AsOf: &asOf, Limit: 1000})
		if err != nil {
			return err
		}
		if next != "" {
			return errors.New("more than one page of entries")
		}
		a = asOfAnswer{Balance: b, Entries: make([]string, len(es))}
		for i, e := range es {
			a.Entries[i] = fmt.Sprintf("%d:%s:%d", e.Sequence, e.TransferID, e.Balance)
		}
		return nil
	})
	return a, err
}

// TestAsOfAnswersAreFinal is the outside tester's scenario: writers post
// transfers on a few shared accounts, each holding its transaction open a
// little after Post (as a request does while it writes its outbox row and
// its stored answer), while readers ask for balances and entries as of the
// moment they ask. Every answer, asked again once the writers have
// stopped, must be the same: a reader must never miss an entry stamped
// before its moment by a writer that had not committed yet.
func TestAsOfAnswersAreFinal(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		checkAsOfFinal(t, d, 1, func(ctx context.Context, tx driver.Tx, l *ledger.Ledger, ts []ledger.NewTransfer) error {
			_, err := l.Post(ctx, tx, tenant, ts...)
			return err
		})
	})
}

// TestAsOfAnswersAreFinalBatched is the same scenario with writers posting
// batches through PostEach and Apply, whose transfers share one recorded
// time.
func TestAsOfAnswersAreFinalBatched(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		calls := 0
		var mu sync.Mutex
		checkAsOfFinal(t, d, 6, func(ctx context.Context, tx driver.Tx, l *ledger.Ledger, ts []ledger.NewTransfer) error {
			mu.Lock()
			calls++
			each := calls%2 == 0
			mu.Unlock()
			if each {
				res, err := l.PostEach(ctx, tx, tenant, ts...)
				if err != nil {
					return err
				}
				for _, r := range res {
					if r.Err != nil {
						return r.Err
					}
				}
				return nil
			}
			ops := make([]ledger.Op, len(ts))
			for i := range ts {
				ops[i] = ledger.Op{Tenant: tenant, Transfer: &ts[i]}
			}
			res, err := l.Apply(ctx, tx, ops)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
			}
			return nil
		})
	})
}

// checkAsOfFinal runs the scenario of TestAsOfAnswersAreFinal with post
// writing each writer's transfers, in batches of 1..maxBatch.
func checkAsOfFinal(t *testing.T, d driver.Driver, maxBatch int, post func(ctx context.Context, tx driver.Tx, l *ledger.Ledger, ts []ledger.NewTransfer) error) {
	t.Helper()
	// The real clock: readers ask as of the moment they ask, on the
	// clock writers stamp with.
	l, err := ledger.New(d, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := []string{"f0", "f1", "f2", "f3"}
	for _, id := range ids {
		createAccount(t, d, l, tenant, usd(id))
	}
	const writers, readers, maxReads = 4, 4, 150
	per := 30 // writes per writer
	if d.Dialect() == "sqlite" {
		per = 12 // one writer at a time, and slow under -race
	}

	var wg sync.WaitGroup
	errs := make(chan error, writers+readers)
	done := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := range per {
				ts := make([]ledger.NewTransfer, 1+rng.IntN(maxBatch))
				for j := range ts {
					from := rng.IntN(len(ids))
					to := (from + 1 + rng.IntN(len(ids)-1)) % len(ids)
					ts[j] = ledger.NewTransfer{ID: fmt.Sprintf("w%d-%d-%d", w, i, j), DebitAccountID: ids[from],
						CreditAccountID: ids[to], Amount: int64(1 + rng.IntN(100)), Currency: "USD"}
				}
				hold := time.Duration(rng.IntN(3000)) * time.Microsecond
				if err := writeHolding(ctx, d, l, ts, hold, post); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()

	type read struct {
		id   string
		asOf time.Time
		got  asOfAnswer
	}
	var mu sync.Mutex
	var reads []read
	var rwg sync.WaitGroup
	for r := range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 13))
			for range maxReads {
				select {
				case <-done:
					return
				default:
				}
				id := ids[rng.IntN(len(ids))]
				asOf := time.Now()
				got, err := readAsOf(ctx, d, l, id, asOf)
				if err != nil {
					errs <- fmt.Errorf("reader %d: %s as of %s: %w", r, id, asOf.Format(time.RFC3339Nano), err)
					return
				}
				mu.Lock()
				reads = append(reads, read{id, asOf, got})
				mu.Unlock()
			}
		}()
	}
	rwg.Wait()
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(reads) == 0 {
		t.Fatal("no read was made")
	}

	changed := 0
	for _, r := range reads {
		again, err := readAsOf(ctx, d, l, r.id, r.asOf)
		if err != nil {
			t.Fatalf("%s as of %s again: %v", r.id, r.asOf.Format(time.RFC3339Nano), err)
		}
		if again.Balance != r.got.Balance || !slices.Equal(again.Entries, r.got.Entries) {
			changed++
			if changed <= 3 {
				t.Errorf("%s as of %s: first answered %+v %v, later %+v %v", r.id, r.asOf.Format(time.RFC3339Nano),
					r.got.Balance, r.got.Entries, again.Balance, again.Entries)
			}
		}
	}
	if changed > 0 {
		t.Errorf("%d of %d as-of answers changed afterwards", changed, len(reads))
	}
	verify(t, d)
}

// writeHolding posts transfers and keeps its transaction open for hold
// before committing, as a request does while it writes the rest of its work.
func writeHolding(ctx context.Context, d driver.Driver, l *ledger.Ledger, ts []ledger.NewTransfer, hold time.Duration,
	post func(ctx context.Context, tx driver.Tx, l *ledger.Ledger, ts []ledger.NewTransfer) error) error {
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if err := post(ctx, tx, l, ts); err != nil {
		return err
	}
	time.Sleep(hold) // the rest of the request's work, not synchronisation
	return tx.Commit(ctx)
}

// TestAsOfZeroTime: the zero time is a moment (before every entry), never
// "now".
func TestAsOfZeroTime(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		createAccount(t, d, l, tenant, usd("empty"))
		post(t, d, l, tenant, ledger.NewTransfer{DebitAccountID: "a", CreditAccountID: "b", Amount: 70, Currency: "USD"})
		var zero time.Time
		for _, id := range []string{"b", "empty"} {
			got, err := readAsOf(ctx, d, l, id, zero)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			want := ledger.Balance{AccountID: id, AsOf: zero}
			if got.Balance != want || len(got.Entries) != 0 {
				t.Errorf("%s as of the zero time: %+v %v, want %+v and no entries", id, got.Balance, got.Entries, want)
			}
		}
		if b := balance(t, d, l, tenant, "b", nil); b.Balance != 70 {
			t.Errorf("b now: %+v", b)
		}
	})
}

// TestAsOfReadOnlyTx is what a library user reading in a read-only
// transaction meets: history before the newest entry is answered there; a
// later moment answers ErrNeedsWriteTx and leaves the transaction usable;
// a read-write transaction answers it.
func TestAsOfReadOnlyTx(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		first := post(t, d, l, tenant, ledger.NewTransfer{DebitAccountID: "a", CreditAccountID: "b", Amount: 10, Currency: "USD"})[0]
		last := post(t, d, l, tenant, ledger.NewTransfer{DebitAccountID: "a", CreditAccountID: "b", Amount: 5, Currency: "USD"})[0]

		tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if b, err := l.Balance(ctx, tx, ledger.BalanceQuery{Tenant: tenant, AccountID: "b", AsOf: &first.CreatedAt}); err != nil || b.Balance != 10 {
			t.Fatalf("history in a read-only transaction: %+v %v", b, err)
		}
		_, err = l.Balance(ctx, tx, ledger.BalanceQuery{Tenant: tenant, AccountID: "b", AsOf: &last.CreatedAt})
		if !errors.Is(err, ledger.ErrNeedsWriteTx) {
			t.Fatalf("as of the newest entry in a read-only transaction: %v, want ErrNeedsWriteTx", err)
		}
		_, _, err = l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: "b", AsOf: &last.CreatedAt})
		if !errors.Is(err, ledger.ErrNeedsWriteTx) {
			t.Fatalf("entries as of the newest entry in a read-only transaction: %v, want ErrNeedsWriteTx", err)
		}
		if es, _, err := l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: "b", AsOf: &first.CreatedAt}); err != nil || len(es) != 1 {
			t.Fatalf("the transaction is still usable: %+v %v", es, err)
		}
		if b := balance(t, d, l, tenant, "b", &last.CreatedAt); b.Balance != 15 {
			t.Fatalf("as of the newest entry in a read-write transaction: %+v", b)
		}
	})
}

// TestAsOfFuture: a moment the clock has not reached is waited for when at
// most MaxAsOfWait ahead (the answer is given once the clock has passed
// it, and holds afterwards) and refused when further ahead.
func TestAsOfFuture(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l, err := ledger.New(d, ledger.Config{}) // the real clock, which the wait is for
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		post(t, d, l, tenant, ledger.NewTransfer{DebitAccountID: "a", CreditAccountID: "b", Amount: 3, Currency: "USD"})

		soon := time.Now().Add(ledger.MaxAsOfWait / 4)
		got, err := readAsOf(ctx, d, l, "b", soon)
		if err != nil {
			t.Fatalf("as of %s ahead: %v", ledger.MaxAsOfWait/4, err)
		}
		if !time.Now().After(soon) {
			t.Fatal("answered before the moment passed")
		}
		if got.Balance.Balance != 3 || len(got.Entries) != 1 {
			t.Fatalf("as of a moment just ahead: %+v %v", got.Balance, got.Entries)
		}
		post(t, d, l, tenant, ledger.NewTransfer{DebitAccountID: "a", CreditAccountID: "b", Amount: 4, Currency: "USD"})
		if again, err := readAsOf(ctx, d, l, "b", soon); err != nil || again.Balance != got.Balance || !slices.Equal(again.Entries, got.Entries) {
			t.Fatalf("asked again: %+v %v (%v), first %+v %v", again.Balance, again.Entries, err, got.Balance, got.Entries)
		}

		// Inside a transaction nothing waits for time: a moment not yet
		// passed is refused there, however near.
		near := time.Now().Add(ledger.MaxAsOfWait / 4)
		err = inTx(t, d, func(tx driver.Tx) error {
			_, err := l.Balance(ctx, tx, ledger.BalanceQuery{Tenant: tenant, AccountID: "b", AsOf: &near})
			return err
		})
		if le := wantCode(t, err, "invalid_request"); le.Field != "as_of" {
			t.Fatalf("in a transaction, as of a moment just ahead: field = %q, want as_of", le.Field)
		}

		far := time.Now().Add(2 * ledger.MaxAsOfWait)
		_, err = readAsOf(ctx, d, l, "b", far)
		if le := wantCode(t, err, "invalid_request"); le.Field != "as_of" {
			t.Fatalf("field = %q, want as_of", le.Field)
		}
		err = inTx(t, d, func(tx driver.Tx) error {
			_, _, err := l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: "b", AsOf: &far})
			return err
		})
		if le := wantCode(t, err, "invalid_request"); le.Field != "as_of" {
			t.Fatalf("entries: field = %q, want as_of", le.Field)
		}
	})
}
