package driver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
)

// Every public method that takes the caller's transaction refuses a nil one
// and one of the other database with the same sentinels (driver.CheckTx),
// before running anything, on both drivers.
func TestCheckTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbs := map[string]driver.Driver{}
	for _, dialect := range drivertest.Dialects {
		dbs[dialect] = drivertest.Open(t, dialect)
	}
	other := map[string]string{"postgres": "sqlite", "sqlite": "postgres"}

	for dialect, d := range dbs {
		k, err := idem.New(d, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := ledger.New(d, ledger.Config{})
		if err != nil {
			t.Fatal(err)
		}
		o, err := outbox.New(d, outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		in, err := inbox.New(d, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		entries := map[string]func(tx driver.Tx) error{
			"idem.Keeper.DoTx": func(tx driver.Tx) error {
				_, err := k.DoTx(ctx, tx, idem.Request{Key: idem.Key{Scope: "s", Operation: "op", Key: "k"}, Body: []byte(`{}`)},
					func(context.Context, driver.Tx) (idem.Outcome, error) {
						ran = true
						return idem.Outcome{Status: 200}, nil
					})
				return err
			},
			"ledger.CreateAccount": func(tx driver.Tx) error {
				_, err := l.CreateAccount(ctx, tx, "t", ledger.NewAccount{ID: "a", Currency: "EUR"})
				return err
			},
			"ledger.GetAccount": func(tx driver.Tx) error {
				_, err := l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: "t", ID: "a"})
				return err
			},
			"ledger.Post": func(tx driver.Tx) error {
				_, err := l.Post(ctx, tx, "t", ledger.NewTransfer{DebitAccountID: "a", CreditAccountID: "b", Amount: 1, Currency: "EUR"})
				return err
			},
			"ledger.Reverse": func(tx driver.Tx) error {
				_, err := l.Reverse(ctx, tx, "t", ledger.NewReversal{TransferID: "x"})
				return err
			},
			"ledger.GetTransfer": func(tx driver.Tx) error {
				_, err := l.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: "t", ID: "x"})
				return err
			},
			"ledger.Balance": func(tx driver.Tx) error {
				_, err := l.Balance(ctx, tx, ledger.BalanceQuery{Tenant: "t", AccountID: "a"})
				return err
			},
			"ledger.Entries": func(tx driver.Tx) error {
				_, _, err := l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: "t", AccountID: "a"})
				return err
			},
			"ledger.Verify": func(tx driver.Tx) error { return ledger.Verify(ctx, d, tx) },
			"outbox.Enqueue": func(tx driver.Tx) error {
				return o.Enqueue(ctx, tx, outbox.Message{Type: "t.created", Payload: []byte(`{}`)})
			},
			"outbox.List": func(tx driver.Tx) error { _, _, err := o.List(ctx, tx, outbox.ListQuery{Tenant: "t"}); return err },
			"inbox.Process": func(tx driver.Tx) error {
				_, err := in.Process(ctx, tx, inbox.Delivery{Consumer: "c", MessageID: "m"}, func(context.Context, driver.Tx) error { ran = true; return nil })
				return err
			},
		}
		for name, call := range entries {
			for _, c := range []struct {
				tx   driver.Tx
				want error
			}{
				{nil, driver.ErrNoTx},
				{dbs[other[dialect]].Reader(), driver.ErrWrongDialect},
			} {
				if err := call(c.tx); !errors.Is(err, c.want) {
					t.Errorf("%s on %s given %v: %v, want %v", name, dialect, c.tx, err, c.want)
				}
			}
		}
		if ran {
			t.Errorf("on %s, a refused transaction ran the caller's work", dialect)
		}
	}
	// The outbox's older sentinel still matches.
	//lint:ignore SA1019 its compatibility is what is checked
	if !errors.Is(driver.CheckTx(dbs["postgres"], dbs["sqlite"].Reader()), outbox.ErrDialect) {
		t.Error("outbox.ErrDialect no longer matches driver.ErrWrongDialect")
	}
}
