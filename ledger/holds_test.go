package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// settle runs Settle in a transaction of its own.
func settle(t testing.TB, d driver.Driver, l *ledger.Ledger, s ledger.NewSettlement) (ledger.Transfer, error) {
	t.Helper()
	var got ledger.Transfer
	err := inTx(t, d, func(tx driver.Tx) (err error) {
		got, err = l.Settle(context.Background(), tx, tenant, s)
		return err
	})
	return got, err
}

func getTransfer(t testing.TB, d driver.Driver, l *ledger.Ledger, id string) ledger.Transfer {
	t.Helper()
	var got ledger.Transfer
	must(t, d, func(tx driver.Tx) (err error) {
		got, err = l.GetTransfer(context.Background(), tx, ledger.TransferQuery{Tenant: tenant, ID: id})
		return err
	})
	return got
}

func getAccount(t testing.TB, d driver.Driver, l *ledger.Ledger, id string) ledger.Account {
	t.Helper()
	var got ledger.Account
	must(t, d, func(tx driver.Tx) (err error) {
		got, err = l.GetAccount(context.Background(), tx, ledger.AccountQuery{Tenant: tenant, ID: id})
		return err
	})
	return got
}

func openHolds(t testing.TB, d driver.Driver) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), "SELECT count(*) FROM ledger_holds").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantTotals fails unless the account's posted and pending totals are
// these, read now and by Balance.
func wantTotals(t testing.TB, d driver.Driver, l *ledger.Ledger, id string, debits, credits, debitsPending, creditsPending int64) {
	t.Helper()
	a := getAccount(t, d, l, id)
	b := balance(t, d, l, tenant, id, nil)
	for _, got := range [][4]int64{
		{a.DebitsPosted, a.CreditsPosted, a.DebitsPending, a.CreditsPending},
		{b.DebitsPosted, b.CreditsPosted, b.DebitsPending, b.CreditsPending},
	} {
		if got != [4]int64{debits, credits, debitsPending, creditsPending} {
			t.Fatalf("%s: totals %v, want %v", id, got, [4]int64{debits, credits, debitsPending, creditsPending})
		}
	}
	if want := credits - debits - debitsPending; a.Available != want || b.Available != want {
		t.Fatalf("%s: available %d and %d, want %d", id, a.Available, b.Available, want)
	}
}

// fundedWallet makes a wallet that must not go negative, funded with 1000
// from a bank, and a merchant.
func fundedWallet(t testing.TB, d driver.Driver, l *ledger.Ledger) {
	t.Helper()
	createAccount(t, d, l, tenant, usd("bank"))
	createAccount(t, d, l, tenant, ledger.NewAccount{ID: "wallet", Currency: "USD",
		Flags: ledger.Flags{DebitsMustNotExceedCredits: true}})
	createAccount(t, d, l, tenant, usd("merchant"))
	post(t, d, l, tenant, ledger.NewTransfer{ID: "fund", DebitAccountID: "bank", CreditAccountID: "wallet", Amount: 1000, Currency: "USD"})
}

func hold(id string, amount int64) ledger.NewTransfer {
	return ledger.NewTransfer{ID: id, DebitAccountID: "wallet", CreditAccountID: "merchant", Amount: amount,
		Currency: "USD", Pending: true}
}

func TestHoldPostPartial(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		fundedWallet(t, d, l)
		h := post(t, d, l, tenant, hold("h1", 600))[0]
		if h.Status != ledger.StatusPending || !h.Pending {
			t.Fatalf("hold = %+v", h)
		}
		wantTotals(t, d, l, "wallet", 0, 1000, 600, 0)
		wantTotals(t, d, l, "merchant", 0, 0, 0, 600)
		if n := openHolds(t, d); n != 1 {
			t.Fatalf("open holds = %d", n)
		}

		// What is held cannot be spent again, by a hold or a transfer.
		before := counts(t, d)
		for _, tr := range []ledger.NewTransfer{hold("h2", 401),
			{ID: "spend", DebitAccountID: "wallet", CreditAccountID: "merchant", Amount: 401, Currency: "USD"}} {
			err := inTx(t, d, func(tx driver.Tx) error { _, err := l.Post(context.Background(), tx, tenant, tr); return err })
			wantCode(t, err, "insufficient_funds")
		}
		if after := counts(t, d); after != before {
			t.Fatalf("a refusal wrote: %+v then %+v", before, after)
		}

		// A partial post moves 450 and releases the rest.
		p, err := settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, ID: "p1", Amount: 450})
		if err != nil {
			t.Fatal(err)
		}
		if p.Amount != 450 || p.PendingID != "h1" || p.Settles != ledger.SettlePost || p.Status != ledger.StatusPosted ||
			p.DebitAccountID != "wallet" || p.CreditAccountID != "merchant" || p.Existing {
			t.Fatalf("post = %+v", p)
		}
		wantTotals(t, d, l, "wallet", 450, 1000, 0, 0)
		wantTotals(t, d, l, "merchant", 0, 450, 0, 0)
		if got := getTransfer(t, d, l, "h1"); got.Status != ledger.StatusPosted || got.SettledBy != "p1" {
			t.Fatalf("hold after post = %+v", got)
		}
		if n := openHolds(t, d); n != 0 {
			t.Fatalf("open holds = %d", n)
		}

		// The same post again is its stored self; any other settlement of
		// the hold is refused, and writes nothing.
		again, err := settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, ID: "p1", Amount: 450})
		if err != nil || !again.Existing || again.Amount != 450 {
			t.Fatalf("replay = %+v, %v", again, err)
		}
		before = counts(t, d)
		_, err = settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, ID: "p2"})
		wantCode(t, err, "pending_transfer_already_posted")
		_, err = settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettleVoid, ID: "v2"})
		wantCode(t, err, "pending_transfer_already_posted")
		_, err = settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettleVoid, ID: "p1"})
		wantCode(t, err, "transfer_exists_with_different_settles")
		if after := counts(t, d); after != before {
			t.Fatalf("a refusal wrote: %+v then %+v", before, after)
		}

		// A hold is voided, not reversed; the post it became is reversed
		// like any transfer.
		err = inTx(t, d, func(tx driver.Tx) error {
			_, err := l.Reverse(context.Background(), tx, tenant, ledger.NewReversal{TransferID: "h1"})
			return err
		})
		wantCode(t, err, "cannot_reverse_pending")
		must(t, d, func(tx driver.Tx) error {
			_, err := l.Reverse(context.Background(), tx, tenant, ledger.NewReversal{TransferID: "p1", Amount: 50})
			return err
		})
		wantTotals(t, d, l, "wallet", 450, 1050, 0, 0)
		verify(t, d)
	})
}

func TestHoldVoid(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		fundedWallet(t, d, l)
		post(t, d, l, tenant, hold("h1", 700))
		v, err := settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettleVoid, ID: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		if v.Amount != 700 || v.Status != ledger.StatusVoided || v.Settles != ledger.SettleVoid {
			t.Fatalf("void = %+v", v)
		}
		wantTotals(t, d, l, "wallet", 0, 1000, 0, 0)
		wantTotals(t, d, l, "merchant", 0, 0, 0, 0)
		if got := getTransfer(t, d, l, "h1"); got.Status != ledger.StatusVoided || got.SettledBy != "v1" {
			t.Fatalf("hold after void = %+v", got)
		}
		_, err = settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, ID: "p1"})
		wantCode(t, err, "pending_transfer_already_voided")
		err = inTx(t, d, func(tx driver.Tx) error {
			_, err := l.Reverse(context.Background(), tx, tenant, ledger.NewReversal{TransferID: "v1"})
			return err
		})
		wantCode(t, err, "cannot_reverse_pending")
		// The whole 1000 is spendable again.
		post(t, d, l, tenant, ledger.NewTransfer{ID: "spend", DebitAccountID: "wallet", CreditAccountID: "merchant", Amount: 1000, Currency: "USD"})
		wantTotals(t, d, l, "wallet", 1000, 1000, 0, 0)
		verify(t, d)
	})
}

func TestHoldBadInput(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		fundedWallet(t, d, l)
		createAccount(t, d, l, tenant, ledger.NewAccount{ID: "euro", Currency: "EUR"})
		post(t, d, l, tenant, hold("h1", 100))
		before := counts(t, d)
		for _, c := range []struct {
			name string
			tr   ledger.NewTransfer
			code string
		}{
			{"timeout below a second", func() ledger.NewTransfer { h := hold("x", 1); h.Timeout = time.Millisecond; return h }(), "invalid_timeout"},
			{"timeout not whole seconds", func() ledger.NewTransfer { h := hold("x", 1); h.Timeout = 1500 * time.Millisecond; return h }(), "invalid_timeout"},
			{"timeout above 400 days", func() ledger.NewTransfer { h := hold("x", 1); h.Timeout = ledger.MaxTimeout + time.Second; return h }(), "invalid_timeout"},
			{"timeout without pending", ledger.NewTransfer{ID: "x", DebitAccountID: "bank", CreditAccountID: "merchant", Amount: 1, Currency: "USD", Timeout: time.Hour}, "invalid_request"},
			{"currencies differ", ledger.NewTransfer{ID: "x", DebitAccountID: "bank", CreditAccountID: "euro", Amount: 1, Currency: "USD", Pending: true}, "currency_mismatch"},
			{"same id, not pending", ledger.NewTransfer{ID: "h1", DebitAccountID: "wallet", CreditAccountID: "merchant", Amount: 100, Currency: "USD"}, "transfer_exists_with_different_pending"},
		} {
			err := inTx(t, d, func(tx driver.Tx) error { _, err := l.Post(context.Background(), tx, tenant, c.tr); return err })
			if le := wantCode(t, err, c.code); le == nil {
				t.Fatal(c.name)
			}
		}
		for _, c := range []struct {
			name string
			s    ledger.NewSettlement
			code string
		}{
			{"not a hold", ledger.NewSettlement{PendingID: "fund", Settles: ledger.SettlePost}, "transfer_not_pending"},
			{"no such hold", ledger.NewSettlement{PendingID: "nope", Settles: ledger.SettleVoid}, "transfer_not_found"},
			{"more than held", ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, Amount: 101}, "amount_exceeds_pending"},
			{"negative amount", ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, Amount: -1}, "invalid_amount"},
			{"void with an amount", ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettleVoid, Amount: 5}, "invalid_request"},
			{"expire by hand", ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettleExpire}, "invalid_request"},
		} {
			_, err := settle(t, d, l, c.s)
			if le := wantCode(t, err, c.code); le == nil {
				t.Fatal(c.name)
			}
		}
		if after := counts(t, d); after != before {
			t.Fatalf("a refusal wrote: %+v then %+v", before, after)
		}
		verify(t, d)
	})
}

// A hold reads as pending in an as-of answer before its post, posted
// after, and those answers never change.
func TestHoldAsOf(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		fundedWallet(t, d, l)
		h := post(t, d, l, tenant, hold("h1", 300))[0]
		p, err := settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, ID: "p1", Amount: 200})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			held := balance(t, d, l, tenant, "wallet", at(h.CreatedAt))
			if held.DebitsPending != 300 || held.DebitsPosted != 0 || held.Available != 700 {
				t.Fatalf("as of the hold: %+v", held)
			}
			posted := balance(t, d, l, tenant, "wallet", at(p.CreatedAt))
			if posted.DebitsPending != 0 || posted.DebitsPosted != 200 || posted.Available != 800 {
				t.Fatalf("as of the post: %+v", posted)
			}
		}
		verify(t, d)
	})
}

// A hold and its settlement in one call: the hold is never open.
func TestHoldSettledInOneApply(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		fundedWallet(t, d, l)
		h := hold("h1", 100)
		res := apply(t, d, l,
			ledger.Op{Tenant: tenant, Transfer: &h},
			ledger.Op{Tenant: tenant, Settlement: &ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, ID: "p1", Amount: 40}},
			ledger.Op{Tenant: tenant, Settlement: &ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettleVoid, ID: "v1"}})
		if res[0].Err != nil || res[1].Err != nil || res[2].Err == nil || res[2].Err.Code != "pending_transfer_already_posted" {
			t.Fatalf("results %+v %+v %+v", res[0], res[1], res[2])
		}
		if n := openHolds(t, d); n != 0 {
			t.Fatalf("open holds = %d", n)
		}
		wantTotals(t, d, l, "wallet", 40, 1000, 0, 0)
		verify(t, d)
	})
}

// Many posts and voids of one hold, each under its own id, race: exactly
// one settles it, every other is refused with the code of what did.
func TestHoldSettlesOnce(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		fundedWallet(t, d, l)
		const racers = 50
		for round := range 3 {
			id := fmt.Sprintf("h%d", round)
			post(t, d, l, tenant, hold(id, 100))
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make([]error, racers)
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					s := ledger.NewSettlement{PendingID: id, Settles: ledger.SettlePost, ID: fmt.Sprintf("%s-s%d", id, i), Amount: 60}
					if i%2 == 1 {
						s = ledger.NewSettlement{PendingID: id, Settles: ledger.SettleVoid, ID: fmt.Sprintf("%s-s%d", id, i)}
					}
					for attempt := 0; ; attempt++ {
						_, errs[i] = settle(t, d, l, s)
						if !errors.Is(errs[i], driver.ErrLockTimeout) || attempt == 3 {
							return
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			var winner = -1
			for i, err := range errs {
				if err == nil {
					if winner >= 0 {
						t.Fatalf("round %d: racers %d and %d both settled the hold", round, winner, i)
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: nobody settled the hold: %v", round, errs[0])
			}
			want := "pending_transfer_already_posted"
			if winner%2 == 1 {
				want = "pending_transfer_already_voided"
			}
			for i, err := range errs {
				if i != winner {
					wantCode(t, err, want)
				}
			}
			if got := getTransfer(t, d, l, id); got.SettledBy != fmt.Sprintf("%s-s%d", id, winner) {
				t.Fatalf("round %d: settled by %q, winner %d", round, got.SettledBy, winner)
			}
		}
		var settlements int
		if err := d.Reader().QueryRow(context.Background(),
			"SELECT count(*) FROM ledger_transfers WHERE pending_id IS NOT NULL").Scan(&settlements); err != nil {
			t.Fatal(err)
		}
		if settlements != 3 || openHolds(t, d) != 0 {
			t.Fatalf("%d settlements, %d open holds; want 3 and 0", settlements, openHolds(t, d))
		}
		a := getAccount(t, d, l, "wallet")
		if a.DebitsPending != 0 || a.DebitsPosted%60 != 0 {
			t.Fatalf("wallet = %+v", a)
		}
		verify(t, d)
		// Beneath the ledger's own check, the database refuses a second
		// settlement of a hold.
		insert := `INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at,
			pending_id, settles) VALUES ('acme', 'twice', 'wallet', 'merchant', 100, 'USD', $1, 'h0', 'void')`
		var now any = time.Now()
		if d.Dialect() == "sqlite" {
			insert = strings.ReplaceAll(insert, "$1", "?1")
			now = time.Now().UnixMicro()
		}
		err := inTx(t, d, func(tx driver.Tx) error { _, err := tx.Exec(context.Background(), insert, now); return err })
		if !errors.Is(err, driver.ErrUniqueViolation) {
			t.Fatalf("a second settlement stored directly: err = %v, want ErrUniqueViolation", err)
		}
	})
}

// A hold whose timeout passes cannot be posted or voided, and ExpireDue
// releases it once, whoever races to.
func TestHoldExpires(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l, err := ledger.New(d, ledger.Config{Clock: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		fundedWallet(t, d, l)
		h := hold("h1", 300)
		h.Timeout = time.Second
		got := post(t, d, l, tenant, h, hold("h2", 100))
		if got[0].TimeoutSeconds != 1 || got[0].ExpiresAt == nil || !got[0].ExpiresAt.Equal(got[0].CreatedAt.Add(time.Second)) {
			t.Fatalf("hold = %+v", got[0])
		}
		if stored := getTransfer(t, d, l, "h1"); stored.ExpiresAt == nil || !stored.ExpiresAt.Equal(*got[0].ExpiresAt) {
			t.Fatalf("stored hold = %+v, posted %+v", stored, got[0])
		}
		// Nothing is due yet.
		must(t, d, func(tx driver.Tx) error {
			ex, err := l.ExpireDue(ctx, tx, 10)
			if err == nil && len(ex) != 0 {
				err = fmt.Errorf("expired %+v early", ex)
			}
			return err
		})
		time.Sleep(time.Until(got[0].ExpiresAt.Add(50 * time.Millisecond)))

		_, err = settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, ID: "late"})
		wantCode(t, err, "pending_transfer_already_expired")
		wantTotals(t, d, l, "wallet", 0, 1000, 400, 0)

		// Two workers race; the hold is expired once.
		var wg sync.WaitGroup
		found := make([][]ledger.Expiry, 2)
		errs := make([]error, 2)
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[w] = inTx(t, d, func(tx driver.Tx) (err error) {
					found[w], err = l.ExpireDue(ctx, tx, 10)
					return err
				})
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		all := append(found[0], found[1]...)
		if len(all) != 1 || all[0].Tenant != tenant || all[0].Transfer.PendingID != "h1" ||
			all[0].Transfer.Settles != ledger.SettleExpire || all[0].Transfer.Amount != 300 || all[0].Transfer.Status != ledger.StatusExpired {
			t.Fatalf("expiries = %+v", all)
		}
		if h := getTransfer(t, d, l, "h1"); h.Status != ledger.StatusExpired || h.SettledBy != all[0].Transfer.ID {
			t.Fatalf("hold after expiry = %+v", h)
		}
		_, err = settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettleVoid, ID: "late-void"})
		wantCode(t, err, "pending_transfer_already_expired")
		wantTotals(t, d, l, "wallet", 0, 1000, 100, 0)
		if n := openHolds(t, d); n != 1 {
			t.Fatalf("open holds = %d, want h2 only", n)
		}
		verify(t, d)
	})
}

// Verify finds pending totals that disagree with the open holds.
func TestVerifyFindsPendingCorruption(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		fundedWallet(t, d, l)
		post(t, d, l, tenant, hold("h1", 100))
		verify(t, d)
		must(t, d, func(tx driver.Tx) error {
			_, err := tx.Exec(context.Background(), "DELETE FROM ledger_holds")
			return err
		})
		err := inTx(t, d, func(tx driver.Tx) error { return ledger.Verify(context.Background(), d, tx) })
		var ve *ledger.VerifyError
		if !errors.As(err, &ve) || len(ve.Violations) != 1 || ve.Violations[0] != "hold acme/h1: open, yet not stored as open" {
			t.Fatalf("verify = %v", err)
		}
	})
}

// Transfers lists by id, with statuses, the open holds alone for
// pending, and a cursor.
func TestTransfersList(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		fundedWallet(t, d, l)
		post(t, d, l, tenant, hold("h1", 10), hold("h2", 20), hold("h3", 30))
		if _, err := settle(t, d, l, ledger.NewSettlement{PendingID: "h1", Settles: ledger.SettlePost, ID: "p1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := settle(t, d, l, ledger.NewSettlement{PendingID: "h2", Settles: ledger.SettleVoid, ID: "v2"}); err != nil {
			t.Fatal(err)
		}
		list := func(q ledger.TransfersQuery) ([]string, string) {
			t.Helper()
			q.Tenant = tenant
			var ts []ledger.Transfer
			var next string
			must(t, d, func(tx driver.Tx) (err error) {
				ts, next, err = l.Transfers(context.Background(), tx, q)
				return err
			})
			var ids []string
			for _, tr := range ts {
				ids = append(ids, tr.ID+":"+string(tr.Status))
			}
			return ids, next
		}
		for _, c := range []struct {
			q    ledger.TransfersQuery
			want string
		}{
			{ledger.TransfersQuery{}, "[fund:posted h1:posted h2:voided h3:pending p1:posted v2:voided]"},
			{ledger.TransfersQuery{Status: ledger.StatusPending}, "[h3:pending]"},
			{ledger.TransfersQuery{Status: ledger.StatusPending, AccountID: "bank"}, "[]"},
			{ledger.TransfersQuery{Status: ledger.StatusVoided}, "[h2:voided v2:voided]"},
			{ledger.TransfersQuery{AccountID: "bank"}, "[fund:posted]"},
		} {
			if got, _ := list(c.q); fmt.Sprint(got) != c.want && !(c.want == "[]" && got == nil) {
				t.Errorf("%+v: %v, want %s", c.q, got, c.want)
			}
		}
		page, next := list(ledger.TransfersQuery{Limit: 4})
		rest, last := list(ledger.TransfersQuery{Limit: 4, After: next})
		if len(page) != 4 || next != "h3" || fmt.Sprint(rest) != "[p1:posted v2:voided]" || last != "" {
			t.Fatalf("pages %v %q, %v %q", page, next, rest, last)
		}
		err := inTx(t, d, func(tx driver.Tx) error {
			_, _, err := l.Transfers(context.Background(), tx, ledger.TransfersQuery{Tenant: tenant, Status: "held"})
			return err
		})
		wantCode(t, err, "invalid_request")
	})
}
