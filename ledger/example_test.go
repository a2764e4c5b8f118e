package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

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

// A currency exchange: alice sells 100.00 USD for 92.00 EUR. Two
// transfers through the exchange's liquidity accounts, one per currency,
// posted with one Post: both or neither. The EUR liquidity may not go
// negative, so a second exchange it cannot cover is refused whole, and
// its USD leg is not written either.
func ExampleLedger_Post_currencyExchange() {
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
	in := func(fn func(tx driver.Tx) error) error {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	mustDo := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	mustDo(in(func(tx driver.Tx) error {
		for _, a := range []ledger.NewAccount{
			{ID: "alice-usd", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}},
			{ID: "alice-eur", Currency: "EUR"},
			{ID: "fx-usd", Currency: "USD"},
			{ID: "fx-eur", Currency: "EUR", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}},
			{ID: "bank-usd", Currency: "USD"},
			{ID: "bank-eur", Currency: "EUR"},
		} {
			if _, err := l.CreateAccount(ctx, tx, "acme", a); err != nil {
				return err
			}
		}
		_, err := l.Post(ctx, tx, "acme",
			ledger.NewTransfer{ID: "fund-alice", DebitAccountID: "bank-usd", CreditAccountID: "alice-usd", Amount: 50000, Currency: "USD"},
			ledger.NewTransfer{ID: "fund-fx", DebitAccountID: "bank-eur", CreditAccountID: "fx-eur", Amount: 15000, Currency: "EUR"})
		return err
	}))
	exchange := func(id string, usd, eur int64) error {
		return in(func(tx driver.Tx) error {
			_, err := l.Post(ctx, tx, "acme",
				ledger.NewTransfer{ID: id + "-usd", DebitAccountID: "alice-usd", CreditAccountID: "fx-usd", Amount: usd, Currency: "USD"},
				ledger.NewTransfer{ID: id + "-eur", DebitAccountID: "fx-eur", CreditAccountID: "alice-eur", Amount: eur, Currency: "EUR"})
			return err
		})
	}
	mustDo(exchange("fx-1", 10000, 9200))
	if err := exchange("fx-2", 10000, 9200); errors.Is(err, ledger.ErrInsufficientFunds) {
		fmt.Println("fx-2 refused whole:", err.(*ledger.Error).Field)
	}
	mustDo(in(func(tx driver.Tx) error {
		for _, id := range []string{"alice-usd", "alice-eur", "fx-usd", "fx-eur"} {
			a, err := l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: "acme", ID: id})
			if err != nil {
				return err
			}
			fmt.Println(id, a.Balance, a.Currency)
		}
		return nil
	}))
	// Output:
	// fx-2 refused whole: debit_account_id
	// alice-usd 40000 USD
	// alice-eur 9200 EUR
	// fx-usd 10000 USD
	// fx-eur 5800 EUR
}

// A card authorisation: hold 80.00, then capture 65.00 of it; the rest is
// released. The hold counts against the wallet from the moment it is
// taken.
func ExampleLedger_Settle() {
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
	show := func() {
		a, err := l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: "acme", ID: "wallet"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("balance", a.Balance, "pending", a.DebitsPending, "available", a.Available)
	}
	for _, a := range []ledger.NewAccount{
		{ID: "wallet", Currency: "EUR", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}},
		{ID: "shop", Currency: "EUR"},
		{ID: "bank", Currency: "EUR"},
	} {
		if _, err := l.CreateAccount(ctx, tx, "acme", a); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := l.Post(ctx, tx, "acme",
		ledger.NewTransfer{ID: "top-up", DebitAccountID: "bank", CreditAccountID: "wallet", Amount: 10000, Currency: "EUR"},
		ledger.NewTransfer{ID: "auth-1", DebitAccountID: "wallet", CreditAccountID: "shop", Amount: 8000, Currency: "EUR",
			Pending: true, Timeout: 7 * 24 * time.Hour}); err != nil {
		log.Fatal(err)
	}
	show()
	// Right after Settle, enqueue transfer.posted in tx (outbox.Enqueue).
	capture, err := l.Settle(ctx, tx, "acme", ledger.NewSettlement{PendingID: "auth-1", Settles: ledger.SettlePost, ID: "capture-1", Amount: 6500})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(capture.ID, capture.Amount, capture.Status)
	show()
	_, err = l.Settle(ctx, tx, "acme", ledger.NewSettlement{PendingID: "auth-1", Settles: ledger.SettleVoid})
	fmt.Println(err.(*ledger.Error).Code)
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// balance 10000 pending 8000 available 2000
	// capture-1 6500 posted
	// balance 3500 pending 0 available 3500
	// pending_transfer_already_posted
}
