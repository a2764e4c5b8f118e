package ledger_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// fullHot runs TestHotAccounts at full size: 32 goroutines × 500 transfers
// on both drivers. The default size keeps the suite quick under -race
// (where modernc's SQLite runs some 25 times slower); the concurrency, which
// is what the test is about, is the same.
var fullHot = flag.Bool("ledger.full", false, "TestHotAccounts: 32×500 transfers on both drivers")

// hotTransfers is how many transfers each of 32 goroutines posts on 4
// shared accounts: 100 on Postgres and 20 on SQLite (one writer: the same
// concurrency, a shorter queue) by default, 500 with -ledger.full, a tenth
// with -short.
func hotTransfers(dialect string) int {
	n := 100
	if dialect == "sqlite" {
		n = 20
	}
	if *fullHot {
		n = 500
	}
	if testing.Short() {
		n = max(n/10, 1)
	}
	return n
}

func TestHotAccounts(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		ids := []string{"h0", "h1", "h2", "h3"}
		for _, id := range ids {
			createAccount(t, d, l, tenant, usd(id))
		}
		const workers = 32
		per := hotTransfers(d.Dialect())
		var want [4]atomic.Int64 // expected balances
		var retries atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for i := range per {
					from := rng.IntN(4)
					to := (from + 1 + rng.IntN(3)) % 4
					amount := int64(1 + rng.IntN(1000))
					tr := ledger.NewTransfer{DebitAccountID: ids[from], CreditAccountID: ids[to], Amount: amount, Currency: "USD"}
					if i%2 == 0 {
						// Half carry a chosen id, which takes the id lock too.
						tr.ID = fmt.Sprintf("w%d-%d", w, i)
					}
					for attempt := 0; ; attempt++ {
						err := inTx(t, d, func(tx driver.Tx) error { _, err := l.Post(ctx, tx, tenant, tr); return err })
						if err == nil {
							break
						}
						// A deadlock or lost update would show here as a
						// serialization error: only a lock wait that ran
						// out (busy machine) may be retried.
						if errors.Is(err, driver.ErrLockTimeout) && attempt < 3 {
							retries.Add(1)
							continue
						}
						errs <- fmt.Errorf("worker %d transfer %d: %w", w, i, err)
						return
					}
					want[from].Add(-amount)
					want[to].Add(amount)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		total := workers * per
		if c := counts(t, d); c.Transfers != total || c.Entries != 2*total {
			t.Fatalf("rows = %+v, want %d transfers", c, total)
		}
		for i, id := range ids {
			if b := balance(t, d, l, tenant, id, nil); b.Balance != want[i].Load() {
				t.Errorf("%s balance = %d, want %d", id, b.Balance, want[i].Load())
			}
		}
		if n := retries.Load(); n > 0 {
			t.Logf("%d lock-timeout retries", n)
		}
		verify(t, d)
	})
}

// Two reversals of one transfer whose sum exceeds it race: exactly one may
// win, whichever it is.
func TestConcurrentPartialReversals(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		const rounds = 10
		for round := range rounds {
			id := fmt.Sprintf("orig-%d", round)
			post(t, d, l, tenant, ledger.NewTransfer{ID: id, DebitAccountID: "a", CreditAccountID: "b", Amount: 100, Currency: "USD"})
			start := make(chan struct{})
			results := make(chan error, 2)
			for _, amount := range []int64{60, 70} {
				go func() {
					<-start
					results <- inTx(t, d, func(tx driver.Tx) error {
						_, err := l.Reverse(ctx, tx, tenant, ledger.NewReversal{TransferID: id, Amount: amount})
						return err
					})
				}()
			}
			close(start)
			var ok, refused int
			for range 2 {
				err := <-results
				switch {
				case err == nil:
					ok++
				case errors.Is(err, ledger.ErrReversalExceedsRemaining):
					refused++
				default:
					t.Fatalf("round %d: %v", round, err)
				}
			}
			if ok != 1 || refused != 1 {
				t.Fatalf("round %d: %d succeeded, %d refused; want 1 and 1", round, ok, refused)
			}
			var got ledger.Transfer
			must(t, d, func(tx driver.Tx) (err error) {
				got, err = l.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: id})
				return err
			})
			if len(got.Reversals) != 1 || got.Amount != 100 {
				t.Fatalf("round %d: %+v", round, got)
			}
		}
		if c := counts(t, d); c.Transfers != 2*rounds || c.ReversedTotals != rounds {
			t.Fatalf("rows = %+v", c)
		}
		verify(t, d)
	})
}

// Two posts of one new id with different accounts race: one stores it, the
// other is refused with a named field (not a unique violation that would
// abort its transaction), or finds it identical.
func TestConcurrentSameID(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		for _, id := range []string{"a", "b", "c", "e"} {
			createAccount(t, d, l, tenant, usd(id))
		}
		for round := range 10 {
			id := fmt.Sprintf("same-%d", round)
			start := make(chan struct{})
			results := make(chan error, 2)
			for _, credit := range []string{"b", "c"} {
				go func() {
					<-start
					results <- inTx(t, d, func(tx driver.Tx) error {
						_, err := l.Post(ctx, tx, tenant, ledger.NewTransfer{ID: id, DebitAccountID: "a", CreditAccountID: credit, Amount: 1, Currency: "USD"})
						var le *ledger.Error
						if errors.As(err, &le) {
							// The transaction is still usable.
							_, err2 := l.Post(ctx, tx, tenant, ledger.NewTransfer{DebitAccountID: "a", CreditAccountID: "e", Amount: 1, Currency: "USD"})
							if err2 != nil {
								return err2
							}
						}
						return err
					})
				}()
			}
			close(start)
			var ok, refused int
			for range 2 {
				err := <-results
				switch {
				case err == nil:
					ok++
				case errors.Is(err, ledger.ErrTransferExists):
					refused++
				default:
					t.Fatalf("round %d: %v", round, err)
				}
			}
			if ok != 1 || refused != 1 {
				t.Fatalf("round %d: %d ok, %d refused", round, ok, refused)
			}
		}
		verify(t, d)
	})
}
