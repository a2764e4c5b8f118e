package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

func TestCreateAccountIdempotent(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		a := ledger.NewAccount{ID: "wallet", Currency: "EUR",
			Flags: ledger.Flags{DebitsMustNotExceedCredits: true}, Metadata: json.RawMessage(`{"b": 2, "a": 1}`)}
		first := createAccount(t, d, l, tenant, a)
		if first.Existing || first.ID != "wallet" || string(first.Metadata) != `{"a":1,"b":2}` {
			t.Fatalf("first = %+v", first)
		}
		// The same account, keys in another order: found, not created.
		a2 := a
		a2.Metadata = json.RawMessage(`{"a":1,"b":2}`)
		again := createAccount(t, d, l, tenant, a2)
		if !again.Existing || !again.CreatedAt.Equal(first.CreatedAt) {
			t.Fatalf("again = %+v, want the existing account", again)
		}
		for _, tc := range []struct {
			field string
			mod   func(*ledger.NewAccount)
		}{
			{"currency", func(a *ledger.NewAccount) { a.Currency = "USD" }},
			{"flags", func(a *ledger.NewAccount) { a.Flags = ledger.Flags{} }},
			{"metadata", func(a *ledger.NewAccount) { a.Metadata = json.RawMessage(`{"a":2}`) }},
		} {
			b := a
			tc.mod(&b)
			err := inTx(t, d, func(tx driver.Tx) error { _, err := l.CreateAccount(ctx, tx, tenant, b); return err })
			le := wantCode(t, err, "account_exists_with_different_"+tc.field)
			if le.Field != tc.field || !errors.Is(err, ledger.ErrAccountExists) {
				t.Fatalf("%s: %+v", tc.field, le)
			}
		}
		// A generated id is time-ordered and usable.
		gen := createAccount(t, d, l, tenant, ledger.NewAccount{Currency: "EUR"})
		if gen.ID == "" {
			t.Fatal("no generated id")
		}
		got, err := func() (a ledger.Account, err error) {
			err = inTx(t, d, func(tx driver.Tx) error {
				a, err = l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: tenant, ID: "wallet"})
				return err
			})
			return
		}()
		if err != nil || got.ID != "wallet" || got.Currency != "EUR" || !got.Flags.DebitsMustNotExceedCredits {
			t.Fatalf("GetAccount = %+v, %v", got, err)
		}
		if c := counts(t, d); c.Accounts != 2 {
			t.Fatalf("accounts = %d, want 2", c.Accounts)
		}
		verify(t, d)
	})
}

func TestPostIdempotentByID(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		createAccount(t, d, l, tenant, usd("c"))
		createAccount(t, d, l, tenant, ledger.NewAccount{ID: "e", Currency: "EUR"})
		bet := ledger.NewTransfer{ID: "bet-1", DebitAccountID: "a", CreditAccountID: "b", Amount: 500,
			Currency: "USD", Metadata: json.RawMessage(`{"game":"dice"}`)}
		first := post(t, d, l, tenant, bet)[0]
		second := post(t, d, l, tenant, bet)[0]
		if first.Existing || !second.Existing {
			t.Fatalf("Existing = %v then %v, want false then true", first.Existing, second.Existing)
		}
		if !second.CreatedAt.Equal(first.CreatedAt) || second.Amount != 500 || string(second.Metadata) != `{"game":"dice"}` {
			t.Fatalf("second = %+v, want the stored %+v", second, first)
		}
		want := rowCounts{Accounts: 4, Transfers: 1, Entries: 2}
		if c := counts(t, d); c != want {
			t.Fatalf("rows = %+v, want %+v", c, want)
		}
		if b := balance(t, d, l, tenant, "b", nil); b.Balance != 500 {
			t.Fatalf("b balance = %d, want 500", b.Balance)
		}
		for _, tc := range []struct {
			field string
			mod   func(*ledger.NewTransfer)
		}{
			{"amount", func(t *ledger.NewTransfer) { t.Amount = 501 }},
			{"debit_account_id", func(t *ledger.NewTransfer) { t.DebitAccountID = "c" }},
			{"credit_account_id", func(t *ledger.NewTransfer) { t.CreditAccountID = "c" }},
			{"currency", func(t *ledger.NewTransfer) { t.Currency = "EUR" }},
			{"metadata", func(t *ledger.NewTransfer) { t.Metadata = nil }},
		} {
			other := bet
			tc.mod(&other)
			// The refusal leaves the transaction usable: a later post in it
			// commits.
			err := inTx(t, d, func(tx driver.Tx) error {
				_, err := l.Post(ctx, tx, tenant, other)
				wantCode(t, err, "transfer_exists_with_different_"+tc.field)
				if !errors.Is(err, ledger.ErrTransferExists) {
					t.Fatalf("errors.Is(%v, ErrTransferExists) = false", err)
				}
				_, err = l.Post(ctx, tx, tenant, ledger.NewTransfer{ID: "after-" + tc.field, DebitAccountID: "a",
					CreditAccountID: "c", Amount: 1, Currency: "USD"})
				return err
			})
			if err != nil {
				t.Fatalf("%s: post after refusal: %v", tc.field, err)
			}
		}
		want = rowCounts{Accounts: 4, Transfers: 6, Entries: 12}
		if c := counts(t, d); c != want {
			t.Fatalf("rows = %+v, want %+v", c, want)
		}
		verify(t, d)
	})
}

func TestRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		createAccount(t, d, l, tenant, ledger.NewAccount{ID: "wallet", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}})
		createAccount(t, d, l, tenant, ledger.NewAccount{ID: "cap", Currency: "USD", Flags: ledger.Flags{CreditsMustNotExceedDebits: true}})
		createAccount(t, d, l, tenant, ledger.NewAccount{ID: "eur", Currency: "EUR"})
		createAccount(t, d, l, tenant, usd("whale"))
		createAccount(t, d, l, tenant, usd("sink"))
		post(t, d, l, tenant,
			ledger.NewTransfer{ID: "fund", DebitAccountID: "a", CreditAccountID: "wallet", Amount: 100, Currency: "USD"},
			ledger.NewTransfer{ID: "max", DebitAccountID: "whale", CreditAccountID: "sink", Amount: math.MaxInt64, Currency: "USD"},
		)
		before := counts(t, d)
		tr := func(mod func(*ledger.NewTransfer)) ledger.NewTransfer {
			t := ledger.NewTransfer{ID: "x", DebitAccountID: "a", CreditAccountID: "b", Amount: 10, Currency: "USD"}
			mod(&t)
			return t
		}
		big := make([]byte, 17<<10)
		for i := range big {
			big[i] = ' '
		}
		big[0], big[len(big)-1] = '{', '}'
		for _, tc := range []struct {
			name  string
			t     ledger.NewTransfer
			code  string
			field string
		}{
			{"zero amount", tr(func(t *ledger.NewTransfer) { t.Amount = 0 }), "invalid_amount", "amount"},
			{"negative amount", tr(func(t *ledger.NewTransfer) { t.Amount = -5 }), "invalid_amount", "amount"},
			{"debits overflow", tr(func(t *ledger.NewTransfer) { t.DebitAccountID = "whale" }), "amount_overflow", "amount"},
			{"credits overflow", tr(func(t *ledger.NewTransfer) { t.CreditAccountID = "sink" }), "amount_overflow", "amount"},
			{"unknown debit account", tr(func(t *ledger.NewTransfer) { t.DebitAccountID = "nope" }), "account_not_found", "debit_account_id"},
			{"unknown credit account", tr(func(t *ledger.NewTransfer) { t.CreditAccountID = "nope" }), "account_not_found", "credit_account_id"},
			{"currency mismatch", tr(func(t *ledger.NewTransfer) { t.CreditAccountID = "eur" }), "currency_mismatch", "currency"},
			{"same account", tr(func(t *ledger.NewTransfer) { t.CreditAccountID = "a" }), "same_account", "credit_account_id"},
			{"debits above credits", tr(func(t *ledger.NewTransfer) { t.DebitAccountID = "wallet"; t.Amount = 101 }), "insufficient_funds", "debit_account_id"},
			{"credits above debits", tr(func(t *ledger.NewTransfer) { t.CreditAccountID = "cap" }), "insufficient_funds", "credit_account_id"},
			{"bad currency", tr(func(t *ledger.NewTransfer) { t.Currency = "usd" }), "invalid_request", "currency"},
			{"empty debit id", tr(func(t *ledger.NewTransfer) { t.DebitAccountID = "" }), "invalid_request", "debit_account_id"},
			{"id too long", tr(func(t *ledger.NewTransfer) { t.ID = strings.Repeat("i", 129) }), "invalid_request", "id"},
			{"id with slash", tr(func(t *ledger.NewTransfer) { t.ID = "a/b" }), "invalid_request", "id"},
			{"metadata array", tr(func(t *ledger.NewTransfer) { t.Metadata = json.RawMessage(`[1]`) }), "invalid_request", "metadata"},
			{"metadata not json", tr(func(t *ledger.NewTransfer) { t.Metadata = json.RawMessage(`{"a":`) }), "invalid_request", "metadata"},
			{"metadata trailing", tr(func(t *ledger.NewTransfer) { t.Metadata = json.RawMessage(`{} {}`) }), "invalid_request", "metadata"},
			{"metadata too big", tr(func(t *ledger.NewTransfer) { t.Metadata = big }), "invalid_request", "metadata"},
			{"dot id", tr(func(t *ledger.NewTransfer) { t.ID = "." }), "invalid_request", "id"},
			{"dot-dot debit id", tr(func(t *ledger.NewTransfer) { t.DebitAccountID = ".." }), "invalid_request", "debit_account_id"},
			{"metadata member twice", tr(func(t *ledger.NewTransfer) { t.Metadata = json.RawMessage(`{"a":1,"b":{"c":1,"c":2}}`) }), "invalid_request", "metadata"},
			{"metadata not UTF-8", tr(func(t *ledger.NewTransfer) { t.Metadata = json.RawMessage("{\"a\":\"\xff\"}") }), "invalid_request", "metadata"},
			{"metadata half a surrogate pair", tr(func(t *ledger.NewTransfer) { t.Metadata = json.RawMessage(`{"a":"\ud800"}`) }), "invalid_request", "metadata"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				// Refused, and the same transaction then commits a transfer:
				// a refusal never aborts the caller's transaction.
				err := inTx(t, d, func(tx driver.Tx) error {
					_, err := l.Post(ctx, tx, tenant, tc.t)
					le := wantCode(t, err, tc.code)
					if le.Field != tc.field {
						t.Errorf("field = %q, want %q", le.Field, tc.field)
					}
					if !errors.Is(err, &ledger.Error{Code: tc.code}) {
						t.Errorf("errors.Is by code failed for %v", err)
					}
					if c := countsIn(t, tx); c != before {
						t.Errorf("rows in tx after refusal = %+v, want %+v", c, before)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
		// Bad reversals are refused the same way.
		for _, tc := range []struct {
			name string
			r    ledger.NewReversal
			code string
		}{
			{"unknown transfer", ledger.NewReversal{TransferID: "nope"}, "transfer_not_found"},
			{"negative amount", ledger.NewReversal{TransferID: "fund", Amount: -1}, "invalid_amount"},
			{"above original", ledger.NewReversal{TransferID: "fund", Amount: 101}, "reversal_exceeds_remaining"},
			{"long reason", ledger.NewReversal{TransferID: "fund", Reason: string(big)}, "invalid_request"},
			{"dot id", ledger.NewReversal{TransferID: "fund", ID: "."}, "invalid_request"},
			{"reason with NUL", ledger.NewReversal{TransferID: "fund", Reason: "a\x00b"}, "invalid_request"},
			{"metadata member twice", ledger.NewReversal{TransferID: "fund", Metadata: json.RawMessage(`{"a":1,"a":1}`)}, "invalid_request"},
		} {
			err := inTx(t, d, func(tx driver.Tx) error { _, err := l.Reverse(ctx, tx, tenant, tc.r); return err })
			wantCode(t, err, tc.code)
		}
		if c := counts(t, d); c != before {
			t.Fatalf("rows = %+v, want %+v", c, before)
		}
		verify(t, d)
	})
}

// countsIn counts rows inside a transaction, so a refusal's effect (none)
// is seen before commit.
func countsIn(t testing.TB, tx driver.Tx) rowCounts {
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
		if err := tx.QueryRow(ctx, q.sql).Scan(q.n); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	return c
}

func TestAtomicBatch(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, ledger.NewAccount{ID: "w", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}})
		// The 2nd transfer would overdraw w by 1 after the 1st funds it.
		batch := []ledger.NewTransfer{
			{ID: "t1", DebitAccountID: "a", CreditAccountID: "w", Amount: 50, Currency: "USD"},
			{ID: "t2", DebitAccountID: "w", CreditAccountID: "a", Amount: 51, Currency: "USD"},
			{ID: "t3", DebitAccountID: "a", CreditAccountID: "w", Amount: 5, Currency: "USD"},
		}
		err := inTx(t, d, func(tx driver.Tx) error { _, err := l.Post(ctx, tx, tenant, batch...); return err })
		le := wantCode(t, err, "insufficient_funds")
		if le.Field != "debit_account_id" {
			t.Fatalf("field = %q", le.Field)
		}
		if c := counts(t, d); c.Transfers != 0 || c.Entries != 0 {
			t.Fatalf("rows = %+v after a refused batch, want none", c)
		}
		// Within a batch later transfers see earlier ones: with 50 funded
		// first, w can pay 50 back in the same batch.
		batch[1].Amount = 50
		got := post(t, d, l, tenant, batch...)
		if len(got) != 3 || got[0].ID != "t1" || got[2].ID != "t3" {
			t.Fatalf("got %+v", got)
		}
		var entries []ledger.Entry
		must(t, d, func(tx driver.Tx) (err error) {
			entries, _, err = l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: "w"})
			return err
		})
		if len(entries) != 3 || entries[0].Sequence != 3 || entries[0].Balance != 5 || entries[1].Balance != 0 || entries[2].Balance != 50 {
			t.Fatalf("entries of w = %+v", entries)
		}
		// A duplicate id inside one batch is refused.
		err = inTx(t, d, func(tx driver.Tx) error { _, err := l.Post(ctx, tx, tenant, batch[0], batch[0]); return err })
		wantCode(t, err, "invalid_request")
		verify(t, d)
	})
}

func TestReversals(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("house"))
		createAccount(t, d, l, tenant, usd("player"))
		orig := post(t, d, l, tenant, ledger.NewTransfer{ID: "bet", DebitAccountID: "house", CreditAccountID: "player",
			Amount: 100, Currency: "USD", Metadata: json.RawMessage(`{"round":7}`)})[0]
		reverse := func(r ledger.NewReversal) (ledger.Transfer, error) {
			var got ledger.Transfer
			err := inTx(t, d, func(tx driver.Tx) (err error) { got, err = l.Reverse(ctx, tx, tenant, r); return err })
			return got, err
		}
		r1, err := reverse(ledger.NewReversal{TransferID: "bet", ID: "rev-1", Amount: 30, Reason: "void"})
		if err != nil {
			t.Fatal(err)
		}
		if r1.ReversesID != "bet" || r1.DebitAccountID != "player" || r1.CreditAccountID != "house" || r1.Amount != 30 || r1.Reason != "void" {
			t.Fatalf("reversal = %+v", r1)
		}
		// Idempotent by its id; the same id with another amount is refused.
		again, err := reverse(ledger.NewReversal{TransferID: "bet", ID: "rev-1", Amount: 30, Reason: "void"})
		if err != nil || !again.Existing || again.Amount != 30 {
			t.Fatalf("again = %+v, %v", again, err)
		}
		_, err = reverse(ledger.NewReversal{TransferID: "bet", ID: "rev-1", Amount: 31, Reason: "void"})
		wantCode(t, err, "transfer_exists_with_different_amount")
		_, err = reverse(ledger.NewReversal{TransferID: "bet", ID: "rev-1", Amount: 30, Reason: "other"})
		wantCode(t, err, "transfer_exists_with_different_reason")
		// Too much, then all that remains by default.
		_, err = reverse(ledger.NewReversal{TransferID: "bet", Amount: 71})
		wantCode(t, err, "reversal_exceeds_remaining")
		r2, err := reverse(ledger.NewReversal{TransferID: "bet"})
		if err != nil || r2.Amount != 70 {
			t.Fatalf("rest = %+v, %v", r2, err)
		}
		_, err = reverse(ledger.NewReversal{TransferID: "bet"})
		wantCode(t, err, "reversal_exceeds_remaining")
		_, err = reverse(ledger.NewReversal{TransferID: "rev-1"})
		wantCode(t, err, "cannot_reverse_reversal")

		// The original is unchanged and lists its reversals.
		var got ledger.Transfer
		must(t, d, func(tx driver.Tx) (err error) {
			got, err = l.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: "bet"})
			return err
		})
		if got.Amount != 100 || !got.CreatedAt.Equal(orig.CreatedAt) || string(got.Metadata) != `{"round":7}` || got.ReversesID != "" {
			t.Fatalf("original = %+v, want as posted %+v", got, orig)
		}
		if len(got.Reversals) != 2 || got.Reversals[0].ID != "rev-1" || got.Reversals[1].ID != r2.ID {
			t.Fatalf("reversals = %+v", got.Reversals)
		}
		if b := balance(t, d, l, tenant, "player", nil); b.Balance != 0 || b.DebitsPosted != 100 || b.CreditsPosted != 100 {
			t.Fatalf("player = %+v, want all reversed", b)
		}
		if c := counts(t, d); c.Transfers != 3 || c.Entries != 6 || c.ReversedTotals != 1 {
			t.Fatalf("rows = %+v", c)
		}
		verify(t, d)
	})
}

func TestReversalOfSpentFundsIsRefused(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("bank"))
		createAccount(t, d, l, tenant, usd("shop"))
		createAccount(t, d, l, tenant, ledger.NewAccount{ID: "wallet", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}})
		post(t, d, l, tenant,
			ledger.NewTransfer{ID: "topup", DebitAccountID: "bank", CreditAccountID: "wallet", Amount: 100, Currency: "USD"},
			ledger.NewTransfer{ID: "buy", DebitAccountID: "wallet", CreditAccountID: "shop", Amount: 80, Currency: "USD"})
		err := inTx(t, d, func(tx driver.Tx) error {
			_, err := l.Reverse(ctx, tx, tenant, ledger.NewReversal{TransferID: "topup"})
			return err
		})
		wantCode(t, err, "insufficient_funds")
		if c := counts(t, d); c.Transfers != 2 || c.ReversedTotals != 0 {
			t.Fatalf("rows = %+v", c)
		}
		verify(t, d)
	})
}

func TestAsOfAcrossReversal(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("house"))
		createAccount(t, d, l, tenant, usd("player"))
		win := post(t, d, l, tenant, ledger.NewTransfer{ID: "win", DebitAccountID: "house", CreditAccountID: "player", Amount: 100, Currency: "USD"})[0]
		var rev ledger.Transfer
		must(t, d, func(tx driver.Tx) (err error) {
			rev, err = l.Reverse(ctx, tx, tenant, ledger.NewReversal{TransferID: "win", Amount: 40, Reason: "dispute"})
			return err
		})
		if !rev.CreatedAt.After(win.CreatedAt) {
			t.Fatalf("reversal at %s, not after the win at %s", rev.CreatedAt, win.CreatedAt)
		}
		us := time.Microsecond
		for _, tc := range []struct {
			name    string
			asOf    *time.Time
			balance int64
			entries int
		}{
			{"the zero time", at(time.Time{}), 0, 0},
			{"before the win", at(win.CreatedAt.Add(-us)), 0, 0},
			{"at the win", at(win.CreatedAt), 100, 1},
			{"just before the reversal", at(rev.CreatedAt.Add(-us)), 100, 1},
			{"at the reversal", at(rev.CreatedAt), 60, 2},
			{"now", nil, 60, 2},
		} {
			b := balance(t, d, l, tenant, "player", tc.asOf)
			if b.Balance != tc.balance || b.CreditsPosted != 100*min(int64(tc.entries), 1) {
				t.Errorf("%s: balance = %+v, want %d", tc.name, b, tc.balance)
			}
			var es []ledger.Entry
			must(t, d, func(tx driver.Tx) (err error) {
				es, _, err = l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: "player", AsOf: tc.asOf})
				return err
			})
			if len(es) != tc.entries || (len(es) > 0 && es[0].Balance != tc.balance) {
				t.Errorf("%s: entries = %+v, want %d ending at %d", tc.name, es, tc.entries, tc.balance)
			}
		}
		verify(t, d)
	})
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, "a", usd("x"))
		createAccount(t, d, l, "a", usd("y"))
		post(t, d, l, "a", ledger.NewTransfer{ID: "t", DebitAccountID: "x", CreditAccountID: "y", Amount: 5, Currency: "USD"})
		before := counts(t, d)
		err := inTx(t, d, func(tx driver.Tx) error {
			if _, err := l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: "b", ID: "x"}); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("GetAccount from b: %v, want ErrNotFound", err)
			}
			if _, err := l.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: "b", ID: "t"}); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("GetTransfer from b: %v, want ErrNotFound", err)
			}
			if _, err := l.Balance(ctx, tx, ledger.BalanceQuery{Tenant: "b", AccountID: "x"}); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("Balance from b: %v, want ErrNotFound", err)
			}
			if _, _, err := l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: "b", AccountID: "x"}); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("Entries from b: %v, want ErrNotFound", err)
			}
			_, err := l.Post(ctx, tx, "b", ledger.NewTransfer{ID: "t", DebitAccountID: "x", CreditAccountID: "y", Amount: 5, Currency: "USD"})
			wantCode(t, err, "account_not_found")
			_, err = l.Reverse(ctx, tx, "b", ledger.NewReversal{TransferID: "t"})
			wantCode(t, err, "transfer_not_found")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if c := counts(t, d); c != before {
			t.Fatalf("rows = %+v, want %+v", c, before)
		}
		// Tenant b may use the same ids for its own accounts and transfers.
		createAccount(t, d, l, "b", ledger.NewAccount{ID: "x", Currency: "EUR"})
		createAccount(t, d, l, "b", ledger.NewAccount{ID: "y", Currency: "EUR"})
		got := post(t, d, l, "b", ledger.NewTransfer{ID: "t", DebitAccountID: "x", CreditAccountID: "y", Amount: 7, Currency: "EUR"})[0]
		if got.Existing || got.Amount != 7 {
			t.Fatalf("b's transfer = %+v", got)
		}
		if b := balance(t, d, l, "a", "y", nil); b.Balance != 5 {
			t.Fatalf("a/y = %+v, want 5", b)
		}
		verify(t, d)
	})
}

func TestEntriesPagination(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("src"))
		createAccount(t, d, l, tenant, usd("dst"))
		var ts []ledger.NewTransfer
		for i := 1; i <= 25; i++ {
			ts = append(ts, ledger.NewTransfer{DebitAccountID: "src", CreditAccountID: "dst", Amount: int64(i), Currency: "USD"})
		}
		// Two batches: the transfers of one share its recorded time, so
		// the as-of page below, as of the 5th transfer, ends the first.
		posted := append(post(t, d, l, tenant, ts[:5]...), post(t, d, l, tenant, ts[5:]...)...)
		var seqs []int64
		cursor, pages := "", 0
		for {
			var es []ledger.Entry
			var next string
			must(t, d, func(tx driver.Tx) (err error) {
				es, next, err = l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: "dst", Limit: 10, After: cursor})
				return err
			})
			pages++
			for _, e := range es {
				seqs = append(seqs, e.Sequence)
				if e.Direction != ledger.Credit || e.TransferID != posted[e.Sequence-1].ID || e.Amount != e.Sequence ||
					e.Balance != e.Sequence*(e.Sequence+1)/2 {
					t.Fatalf("entry %+v", e)
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if pages != 3 || len(seqs) != 25 {
			t.Fatalf("%d pages, %d entries; want 3 and 25", pages, len(seqs))
		}
		for i, s := range seqs {
			if s != int64(25-i) {
				t.Fatalf("sequences %v, want 25 down to 1", seqs)
			}
		}
		// Limits and cursors are checked.
		for _, q := range []ledger.EntriesQuery{{Limit: 1001}, {Limit: -1}, {After: "x"}, {After: "0"}} {
			q.Tenant, q.AccountID = tenant, "dst"
			err := inTx(t, d, func(tx driver.Tx) error { _, _, err := l.Entries(ctx, tx, q); return err })
			wantCode(t, err, "invalid_request")
		}
		// As of the 5th transfer, pages stop at it.
		var es []ledger.Entry
		var next string
		must(t, d, func(tx driver.Tx) (err error) {
			es, next, err = l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: "dst", AsOf: at(posted[4].CreatedAt), Limit: 3})
			return err
		})
		if len(es) != 3 || es[0].Sequence != 5 || next != "3" {
			t.Fatalf("as-of page = %+v next %q", es, next)
		}
		verify(t, d)
	})
}

func TestImmutable(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		createAccount(t, d, l, tenant, usd("unused"))
		post(t, d, l, tenant, ledger.NewTransfer{ID: "t", DebitAccountID: "a", CreditAccountID: "b", Amount: 9, Currency: "USD"})
		for _, stmt := range []string{
			"UPDATE ledger_entries SET amount = 1",
			"DELETE FROM ledger_entries",
			"UPDATE ledger_transfers SET amount = 1",
			"DELETE FROM ledger_transfers",
			// Accounts are mutable caches, but entries and transfers name
			// them by key, which no foreign key guards on Postgres: the
			// rows and their keys stay, even an account without entries.
			"DELETE FROM ledger_accounts WHERE id = 'unused'",
			"DELETE FROM ledger_accounts",
			"UPDATE ledger_accounts SET id = 'renamed' WHERE id = 'a'",
			"UPDATE ledger_accounts SET tenant = 'other'",
		} {
			err := inTx(t, d, func(tx driver.Tx) error { _, err := tx.Exec(ctx, stmt); return err })
			if !errors.Is(err, driver.ErrImmutable) {
				t.Errorf("%s: err = %v, want ErrImmutable", stmt, err)
			}
		}
		if c := counts(t, d); c.Accounts != 3 || c.Transfers != 1 || c.Entries != 2 {
			t.Fatalf("rows = %+v", c)
		}
		if b := balance(t, d, l, tenant, "b", nil); b.Balance != 9 {
			t.Fatalf("b = %+v", b)
		}
		verify(t, d)
	})
}

func TestVerifyFindsCorruption(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		post(t, d, l, tenant, ledger.NewTransfer{ID: "t", DebitAccountID: "a", CreditAccountID: "b", Amount: 9, Currency: "USD"})
		verify(t, d)
		// The account cache is the one mutable copy of a balance; tamper
		// with it and Verify must notice.
		must(t, d, func(tx driver.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE ledger_accounts SET credits_posted = 10 WHERE id = 'b'")
			return err
		})
		err := inTx(t, d, func(tx driver.Tx) error { return ledger.Verify(ctx, d, tx) })
		var ve *ledger.VerifyError
		if !errors.As(err, &ve) || len(ve.Violations) != 1 || !strings.Contains(ve.Violations[0], "account acme/b") {
			t.Fatalf("verify = %v, want account b's cache reported", err)
		}
	})
}

// Entries whose transfer does not exist, in an otherwise sound ledger (the
// accounts' chains, caches and balances all agree with them): no foreign
// key refuses them on Postgres, so Verify must.
func TestVerifyFindsEntriesWithoutTransfer(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, usd("b"))
		post(t, d, l, tenant, ledger.NewTransfer{ID: "t", DebitAccountID: "a", CreditAccountID: "b", Amount: 9, Currency: "USD"})
		verify(t, d)
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // the forged rows are never kept
		stmts := []string{
			// A second pair of entries like t's, of 5, for a transfer
			// "ghost" that was never written, and the caches moved to them.
			`INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
			 SELECT tenant, account_id, 2, 'ghost', 5, credit,
			        debits_posted + CASE WHEN credit THEN 0 ELSE 5 END, credits_posted + CASE WHEN credit THEN 5 ELSE 0 END, created_at
			   FROM ledger_entries WHERE transfer_id = 't'`,
			`UPDATE ledger_accounts
			    SET debits_posted = (SELECT e.debits_posted FROM ledger_entries e
			                          WHERE e.tenant = ledger_accounts.tenant AND e.account_id = ledger_accounts.id AND e.sequence = 2),
			        credits_posted = (SELECT e.credits_posted FROM ledger_entries e
			                           WHERE e.tenant = ledger_accounts.tenant AND e.account_id = ledger_accounts.id AND e.sequence = 2),
			        sequence = 2
			  WHERE id IN ('a', 'b')`,
		}
		if d.Dialect() == "sqlite" {
			// SQLite keeps its foreign keys; checked at commit, which
			// never comes, they let Verify see the rows first.
			stmts = append([]string{"PRAGMA defer_foreign_keys = ON"}, stmts...)
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		err = ledger.Verify(ctx, d, tx)
		var ve *ledger.VerifyError
		if !errors.As(err, &ve) || len(ve.Violations) != 1 || !strings.Contains(ve.Violations[0], "2 of 4 belong to no transfer") {
			t.Fatalf("verify = %v, want the two entries without a transfer reported", err)
		}
	})
}

func TestConfig(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	if _, err := ledger.New(d, ledger.Config{MaxBatch: 1001}); err == nil {
		t.Fatal("MaxBatch 1001 accepted")
	}
	if _, err := ledger.New(nil, ledger.Config{}); err == nil {
		t.Fatal("nil driver accepted")
	}
	l, err := ledger.New(d, ledger.Config{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = inTx(t, d, func(tx driver.Tx) error {
		_, err := l.Post(context.Background(), tx, tenant, ledger.NewTransfer{}, ledger.NewTransfer{})
		return err
	})
	wantCode(t, err, "invalid_request")
}

// TestAccountIDsAreURLSegments: "." and ".." are refused at creation (a
// URL path reads them as "this" and "parent", so /v1/accounts/.. could
// never name the account), with nothing written; ids that merely hold dots
// are accounts like any other.
func TestAccountIDsAreURLSegments(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		for _, id := range []string{".", ".."} {
			err := inTx(t, d, func(tx driver.Tx) error {
				_, err := l.CreateAccount(ctx, tx, tenant, ledger.NewAccount{ID: id, Currency: "EUR"})
				return err
			})
			if le := wantCode(t, err, "invalid_request"); le.Field != "id" {
				t.Fatalf("id %q: field %q", id, le.Field)
			}
		}
		if c := counts(t, d); c.Accounts != 0 {
			t.Fatalf("%d accounts after refusals, want 0", c.Accounts)
		}
		for _, id := range []string{"...", ".a", "a.", "a..b", "~", ":"} {
			createAccount(t, d, l, tenant, ledger.NewAccount{ID: id, Currency: "EUR"})
		}
		if c := counts(t, d); c.Accounts != 6 {
			t.Fatalf("%d accounts, want 6", c.Accounts)
		}
	})
}

// Verify reads the transfers and their entries as one merged stream: each
// transfer must get its own entries and no other's, across tenants that
// reuse ids, and a transfer without entries must still be seen.
func TestVerifyMatchesEntriesToTheirTransfer(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		for _, tn := range []string{tenant, "other"} {
			createAccount(t, d, l, tn, usd("a"))
			createAccount(t, d, l, tn, usd("b"))
			post(t, d, l, tn,
				ledger.NewTransfer{ID: "t", DebitAccountID: "a", CreditAccountID: "b", Amount: 9, Currency: "USD"},
				ledger.NewTransfer{ID: "u", DebitAccountID: "b", CreditAccountID: "a", Amount: 4, Currency: "USD"})
		}
		verify(t, d)
		// A transfer row without entries, written behind the ledger's back.
		var at any = time.Now()
		if d.Dialect() == "sqlite" {
			at = time.Now().UnixMicro()
		}
		must(t, d, func(tx driver.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
			                        VALUES ('acme', 'ghost', 'a', 'b', 5, 'USD', $1)`, at)
			return err
		})
		err := inTx(t, d, func(tx driver.Tx) error { return ledger.Verify(ctx, d, tx) })
		var ve *ledger.VerifyError
		if !errors.As(err, &ve) || len(ve.Violations) != 2 || !strings.Contains(ve.Violations[0], "transfer acme/ghost: 0 entries, want 2") ||
			!strings.Contains(ve.Violations[1], "transfer acme/ghost: 0 debit(s) and 0 credit(s)") {
			t.Fatalf("verify = %v, want only the transfer without entries reported", err)
		}
	})
}
