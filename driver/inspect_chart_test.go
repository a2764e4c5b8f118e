package driver_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// chartLedger is a ledger whose clock steps 1 ms per reading, so that on
// SQLite (which records the Go clock) every entry has a time of its own.
func chartLedger(t *testing.T, d driver.Driver) *ledger.Ledger {
	t.Helper()
	base := time.Now().Add(-time.Hour)
	var n atomic.Int64
	l, err := ledger.New(d, ledger.Config{Clock: func() time.Time { return base.Add(time.Duration(n.Add(1)) * time.Millisecond) }})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func commit(t *testing.T, d driver.Driver, fn func(tx driver.Tx) error) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit: a no-op
	if err := fn(tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// walk posts n transfers of random amounts in random directions between
// the tenant's accounts "wallet" and "bank", so the wallet's balance goes
// up and down, and returns the transfers.
func walk(t *testing.T, d driver.Driver, l *ledger.Ledger, tenant string, n int, seed uint64) []ledger.Transfer {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []ledger.Transfer
	commit(t, d, func(tx driver.Tx) error {
		for _, id := range []string{"wallet", "bank"} {
			if _, err := l.CreateAccount(ctx, tx, tenant, ledger.NewAccount{ID: id, Currency: "EUR"}); err != nil {
				return err
			}
		}
		for range n {
			from, to := "bank", "wallet"
			if rng.IntN(2) == 0 {
				from, to = to, from
			}
			ts, err := l.Post(ctx, tx, tenant, ledger.NewTransfer{DebitAccountID: from, CreditAccountID: to,
				Amount: 1 + rng.Int64N(1000), Currency: "EUR"})
			if err != nil {
				return err
			}
			out = append(out, ts[0])
		}
		return nil
	})
	return out
}

// history reads every entry of the account, oldest first.
func history(t *testing.T, d driver.Driver, tenant, account string, n int) []driver.LedgerEntry {
	t.Helper()
	es, err := d.LedgerEntries(context.Background(), d.Reader(), &driver.LedgerEntriesParams{Tenant: tenant, AccountID: account,
		MaxSequence: int64(n), Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != n {
		t.Fatalf("%d entries, want %d", len(es), n)
	}
	for i, j := 0, len(es)-1; i < j; i, j = i+1, j-1 {
		es[i], es[j] = es[j], es[i]
	}
	return es
}

// TestLedgerBalanceBuckets checks the chart's downsampling against every
// entry read one by one: each bucket holds the run of entries its bounds
// say, its first and last balances are those entries', and, with
// Extremes, its lowest and highest balances are the run's — whatever the
// width, the range and where it starts.
func TestLedgerBalanceBuckets(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		const n = 157
		l := chartLedger(t, d)
		walk(t, d, l, "acme", n, 7)
		walk(t, d, l, "other", 40, 8) // another tenant's wallet is never read
		all := history(t, d, "acme", "wallet", n)
		bal := func(seq int64) int64 { e := all[seq-1]; return e.CreditsPosted - e.DebitsPosted }

		for _, c := range []struct{ first, last, width int64 }{
			{1, n, 1}, {1, n, 10}, {1, n, 7}, {23, 140, 9}, {1, n, n}, {1, n, 1000}, {80, 80, 1}, {150, n, 4},
		} {
			for _, extremes := range []bool{false, true} {
				name := strconv.FormatInt(c.first, 10) + ".." + strconv.FormatInt(c.last, 10) + "/" + strconv.FormatInt(c.width, 10)
				got, err := d.LedgerBalanceBuckets(ctx, d.Reader(), &driver.LedgerBalanceBucketsParams{Tenant: "acme", AccountID: "wallet",
					First: c.first, Last: c.last, Width: c.width, Extremes: extremes})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				want := (c.last-c.first)/c.width + 1
				if int64(len(got)) != want {
					t.Fatalf("%s: %d buckets, want %d", name, len(got), want)
				}
				for i, b := range got {
					first := c.first + int64(i)*c.width
					last := min(first+c.width-1, c.last)
					if b.FirstSequence != first || b.LastSequence != last {
						t.Fatalf("%s bucket %d spans %d..%d, want %d..%d", name, i, b.FirstSequence, b.LastSequence, first, last)
					}
					if b.First != bal(first) || b.Last != bal(last) ||
						!b.FirstAt.Equal(all[first-1].CreatedAt) || !b.LastAt.Equal(all[last-1].CreatedAt) {
						t.Errorf("%s bucket %d: ends %d@%v, %d@%v; want %d@%v, %d@%v", name, i, b.First, b.FirstAt, b.Last, b.LastAt,
							bal(first), all[first-1].CreatedAt, bal(last), all[last-1].CreatedAt)
					}
					lo, hi := min(bal(first), bal(last)), max(bal(first), bal(last))
					if extremes {
						for s := first; s <= last; s++ {
							lo, hi = min(lo, bal(s)), max(hi, bal(s))
						}
					}
					if b.Min != lo || b.Max != hi {
						t.Errorf("%s bucket %d (extremes %v): min %d max %d, want %d %d", name, i, extremes, b.Min, b.Max, lo, hi)
					}
				}
			}
		}

		// Buckets past the account's newest entry are left out.
		got, err := d.LedgerBalanceBuckets(ctx, d.Reader(), &driver.LedgerBalanceBucketsParams{Tenant: "acme", AccountID: "wallet",
			First: 101, Last: 300, Width: 50, Extremes: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].FirstSequence != 101 || got[0].LastSequence != 150 {
			t.Errorf("buckets reaching past the history: %+v, want only 101..150", got)
		}

		// Out of bounds: refused, saying which.
		for _, p := range []driver.LedgerBalanceBucketsParams{
			{First: 0, Last: 10, Width: 1}, {First: 5, Last: 4, Width: 1}, {First: 1, Last: 10, Width: 0},
			{First: 1, Last: driver.MaxBalanceBuckets + 1, Width: 1},
		} {
			p.Tenant, p.AccountID = "acme", "wallet"
			if _, err := d.LedgerBalanceBuckets(ctx, d.Reader(), &p); err == nil {
				t.Errorf("%+v: no error", p)
			}
		}
	})
}

// TestLedgerAccountReversals: an account's reversal entries, newest first,
// with the transfers they reverse; not the reversals of other accounts or
// tenants; bounded by MaxSequence and Limit.
func TestLedgerAccountReversals(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		l := chartLedger(t, d)
		ts := walk(t, d, l, "acme", 30, 9)
		others := walk(t, d, l, "other", 5, 10)
		var revs []ledger.Transfer
		commit(t, d, func(tx driver.Tx) error {
			if _, err := l.CreateAccount(ctx, tx, "acme", ledger.NewAccount{ID: "shop", Currency: "EUR"}); err != nil {
				return err
			}
			// A reversal between bank and shop is not the wallet's.
			sale, err := l.Post(ctx, tx, "acme", ledger.NewTransfer{DebitAccountID: "bank", CreditAccountID: "shop", Amount: 5, Currency: "EUR"})
			if err != nil {
				return err
			}
			if _, err := l.Reverse(ctx, tx, "acme", ledger.NewReversal{TransferID: sale[0].ID}); err != nil {
				return err
			}
			if _, err := l.Reverse(ctx, tx, "other", ledger.NewReversal{TransferID: others[0].ID}); err != nil {
				return err
			}
			for _, i := range []int{3, 11, 12} {
				r, err := l.Reverse(ctx, tx, "acme", ledger.NewReversal{TransferID: ts[i].ID, Amount: 1, Reason: "test"})
				if err != nil {
					return err
				}
				revs = append(revs, r)
			}
			return nil
		})
		all := history(t, d, "acme", "wallet", 33)
		got, err := d.LedgerAccountReversals(ctx, d.Reader(), &driver.LedgerAccountReversalsParams{Tenant: "acme", AccountID: "wallet",
			MaxSequence: 33, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("%d reversal entries, want 3: %+v", len(got), got)
		}
		for i, g := range got {
			want := revs[2-i] // newest first
			e := all[g.Sequence-1]
			if g.TransferID != want.ID || g.ReversesID != want.ReversesID || e.TransferID != want.ID ||
				g.Balance != e.CreditsPosted-e.DebitsPosted || !g.CreatedAt.Equal(e.CreatedAt) || g.Sequence != int64(33-i) {
				t.Errorf("reversal entry %d: %+v; want transfer %s reversing %s at entry %d (%+v)", i, g, want.ID, want.ReversesID, 33-i, e)
			}
		}
		got, err = d.LedgerAccountReversals(ctx, d.Reader(), &driver.LedgerAccountReversalsParams{Tenant: "acme", AccountID: "wallet",
			MaxSequence: 32, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Sequence != 32 {
			t.Errorf("up to entry 32, one: %+v", got)
		}
		got, err = d.LedgerAccountReversals(ctx, d.Reader(), &driver.LedgerAccountReversalsParams{Tenant: "acme", AccountID: "bank",
			MaxSequence: 100, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 {
			t.Errorf("the bank has the sale's reversal and the wallet's three: %+v", got)
		}
	})
}
