package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/ledger"
)

// Accounts, a transfer, a partial reversal and a refusal, all in the
// caller's transactions.
func ExampleLedger_Post() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	l, _ := ledger.New(d, ledger.Config{})

	// in runs fn in one transaction and commits it.
	in := func(fn func(tx driver.Tx) error) {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := fn(tx); err != nil {
			fmt.Println("refused:", err)
			return
		}
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err)
		}
	}
	in(func(tx driver.Tx) error {
		for _, a := range []ledger.NewAccount{
			{ID: "alice", Currency: "EUR", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}},
			{ID: "bank", Currency: "EUR"},
		} {
			if _, err := l.CreateAccount(ctx, tx, "acme", a); err != nil {
				return err
			}
		}
		_, err := l.Post(ctx, tx, "acme", ledger.NewTransfer{ID: "top-up", DebitAccountID: "bank", CreditAccountID: "alice", Amount: 5000, Currency: "EUR"})
		return err
	})
	in(func(tx driver.Tx) error {
		// A correction is a new, linked transfer: nothing is updated.
		_, err := l.Reverse(ctx, tx, "acme", ledger.NewReversal{TransferID: "top-up", ID: "fix", Amount: 1000, Reason: "typo"})
		return err
	})
	in(func(tx driver.Tx) error {
		_, err := l.Post(ctx, tx, "acme", ledger.NewTransfer{ID: "big", DebitAccountID: "alice", CreditAccountID: "bank", Amount: 9000, Currency: "EUR"})
		if errors.Is(err, ledger.ErrInsufficientFunds) {
			fmt.Println("insufficient funds: stored nothing")
			return nil
		}
		return err
	})
	in(func(tx driver.Tx) error {
		a, err := l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: "acme", ID: "alice"})
		fmt.Println("alice:", a.CreditsPosted, a.DebitsPosted, a.Balance)
		return err
	})
	// Output:
	// insufficient funds: stored nothing
	// alice: 5000 1000 4000
}

// One call, each operation on its own: the account is created and funded,
// the overdraft is refused and the transfer after it still goes through.
func ExampleLedger_Apply() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	l, _ := ledger.New(d, ledger.Config{})
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	res, err := l.Apply(ctx, tx, []ledger.Op{
		{Tenant: "acme", Account: &ledger.NewAccount{ID: "bank", Currency: "EUR"}},
		{Tenant: "acme", Account: &ledger.NewAccount{ID: "bob", Currency: "EUR", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}}},
		{Tenant: "acme", Transfer: &ledger.NewTransfer{ID: "pay-1", DebitAccountID: "bank", CreditAccountID: "bob", Amount: 300, Currency: "EUR"}},
		{Tenant: "acme", Transfer: &ledger.NewTransfer{ID: "pay-2", DebitAccountID: "bob", CreditAccountID: "bank", Amount: 500, Currency: "EUR"}},
		{Tenant: "acme", Transfer: &ledger.NewTransfer{ID: "pay-3", DebitAccountID: "bob", CreditAccountID: "bank", Amount: 200, Currency: "EUR"}},
	})
	if err != nil {
		log.Fatal(err) // a database failure: roll back and retry
	}
	for _, r := range res {
		switch {
		case r.Err != nil:
			fmt.Println("refused:", r.Err.Code)
		case r.Account != nil:
			fmt.Println("account", r.Account.ID)
		default:
			fmt.Println("transfer", r.Transfer.ID, r.Transfer.Amount)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// account bank
	// account bob
	// transfer pay-1 300
	// refused: insufficient_funds
	// transfer pay-3 200
}
