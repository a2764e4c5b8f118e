package ledger_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/ledger"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }

// leakChecked fails a passing run that left goroutines behind (a pool or a
// rows cursor not closed).
const tenant = "acme"

// stepClock returns a clock that advances 1ms per reading, so recorded
// times on SQLite (which takes the Go clock) are distinct and ordered.
func stepClock() func() time.Time {
	base := time.Now().Add(-time.Hour)
	var n atomic.Int64
	return func() time.Time { return base.Add(time.Duration(n.Add(1)) * time.Millisecond) }
}

func newLedger(t testing.TB, d driver.Driver) *ledger.Ledger {
	t.Helper()
	l, err := ledger.New(d, ledger.Config{Clock: stepClock()})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// inTx runs fn in a transaction of its own, committed when fn returns nil.
func inTx(t testing.TB, d driver.Driver, fn func(tx driver.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// must runs fn in a committed transaction and fails the test on error.
func must(t testing.TB, d driver.Driver, fn func(tx driver.Tx) error) {
	t.Helper()
	if err := inTx(t, d, fn); err != nil {
		t.Fatal(err)
	}
}

func createAccount(t testing.TB, d driver.Driver, l *ledger.Ledger, tenant string, a ledger.NewAccount) ledger.Account {
	t.Helper()
	var got ledger.Account
	must(t, d, func(tx driver.Tx) (err error) {
		got, err = l.CreateAccount(context.Background(), tx, tenant, a)
		return err
	})
	return got
}

func post(t testing.TB, d driver.Driver, l *ledger.Ledger, tenant string, ts ...ledger.NewTransfer) []ledger.Transfer {
	t.Helper()
	var got []ledger.Transfer
	must(t, d, func(tx driver.Tx) (err error) {
		got, err = l.Post(context.Background(), tx, tenant, ts...)
		return err
	})
	return got
}

// balance reads the account's balance as of *asOf (nil: now) in a write
// transaction of its own.
func balance(t testing.TB, d driver.Driver, l *ledger.Ledger, tenant, id string, asOf *time.Time) ledger.Balance {
	t.Helper()
	var b ledger.Balance
	must(t, d, func(tx driver.Tx) (err error) {
		b, err = l.Balance(context.Background(), tx, ledger.BalanceQuery{Tenant: tenant, AccountID: id, AsOf: asOf})
		return err
	})
	return b
}

// rowCounts is what the ledger has written: asserting it unchanged proves a
// refusal wrote nothing.
type rowCounts struct{ Accounts, Transfers, Entries, ReversedTotals int }

func counts(t testing.TB, d driver.Driver) rowCounts {
	t.Helper()
	ctx := context.Background()
	var c rowCounts
	for _, q := range []struct {
		sql string
		n   *int
	}{
		{"SELECT count(*) FROM ledger_accounts", &c.Accounts},
		{"SELECT count(*) FROM ledger_transfers", &c.Transfers},
		{"SELECT count(*) FROM ledger_entries", &c.Entries},
		{"SELECT count(*) FROM ledger_reversed_totals", &c.ReversedTotals},
	} {
		if err := d.Reader().QueryRow(ctx, q.sql).Scan(q.n); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	return c
}

// verify runs ledger.Verify in a transaction of its own: every scenario
// ends with it.
func verify(t testing.TB, d driver.Driver) {
	t.Helper()
	if err := inTx(t, d, func(tx driver.Tx) error { return ledger.Verify(context.Background(), d, tx) }); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

// wantCode fails unless err is a *ledger.Error with the code.
func wantCode(t testing.TB, err error, code string) *ledger.Error {
	t.Helper()
	var le *ledger.Error
	if !errors.As(err, &le) {
		t.Fatalf("err = %v, want *ledger.Error %s", err, code)
	}
	if le.Code != code {
		t.Fatalf("code = %s (%v), want %s", le.Code, le, code)
	}
	return le
}

// at is an as-of moment.
func at(t time.Time) *time.Time { return &t }

func usd(id string) ledger.NewAccount { return ledger.NewAccount{ID: id, Currency: "USD"} }
