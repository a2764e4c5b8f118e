package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// countingIDs generates ids "gen-1", "gen-2", …: two ledgers given the same
// requests in the same order generate the same ids.
func countingIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("gen-%d", n.Add(1)) }
}

func newCountingLedger(t testing.TB, d driver.Driver, maxBatch int) *ledger.Ledger {
	t.Helper()
	l, err := ledger.New(d, ledger.Config{Clock: stepClock(), NewID: countingIDs(), MaxBatch: maxBatch})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// apply runs ops in one committed transaction and fails the test on a
// call error.
func apply(t testing.TB, d driver.Driver, l *ledger.Ledger, ops ...ledger.Op) []ledger.OpResult {
	t.Helper()
	var res []ledger.OpResult
	must(t, d, func(tx driver.Tx) (err error) {
		res, err = l.Apply(context.Background(), tx, ops)
		return err
	})
	if len(res) != len(ops) {
		t.Fatalf("%d results for %d ops", len(res), len(ops))
	}
	return res
}

func acctOp(tenant string, a ledger.NewAccount) ledger.Op {
	return ledger.Op{Tenant: tenant, Account: &a}
}
func xferOp(tenant string, t ledger.NewTransfer) ledger.Op {
	return ledger.Op{Tenant: tenant, Transfer: &t}
}
func revOp(tenant string, r ledger.NewReversal) ledger.Op {
	return ledger.Op{Tenant: tenant, Reversal: &r}
}

func usdTransfer(id, from, to string, amount int64) ledger.NewTransfer {
	return ledger.NewTransfer{ID: id, DebitAccountID: from, CreditAccountID: to, Amount: amount, Currency: "USD"}
}

// wantOK fails unless the result is a success (Existing as given).
func wantOK(t testing.TB, i int, r ledger.OpResult, existing bool) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("op %d refused: %v", i, r.Err)
	}
	got := false
	switch {
	case r.Account != nil:
		got = r.Account.Existing
	case r.Transfer != nil:
		got = r.Transfer.Existing
	default:
		t.Fatalf("op %d: empty result", i)
	}
	if got != existing {
		t.Fatalf("op %d: Existing = %v, want %v", i, got, existing)
	}
}

func wantRefused(t testing.TB, i int, r ledger.OpResult, code, field string) {
	t.Helper()
	if r.Err == nil || r.Err.Code != code || r.Err.Field != field || r.Account != nil || r.Transfer != nil {
		t.Fatalf("op %d = %+v (err %v), want refused %s on %s", i, r, r.Err, code, field)
	}
}

// One call, ops depending on each other: each is decided as if applied
// alone in order, a refusal leaves nothing behind, and two tenants keep
// apart.
func TestApplyEachOnItsOwn(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("bank"))
		res := apply(t, d, l,
			xferOp(tenant, usdTransfer("early", "bank", "w", 10)), // 0: w does not exist yet
			acctOp(tenant, ledger.NewAccount{ID: "w", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}}),
			xferOp(tenant, usdTransfer("fund", "bank", "w", 100)),                       // 2
			xferOp(tenant, usdTransfer("spend", "w", "bank", 150)),                      // 3: more than w holds
			revOp(tenant, ledger.NewReversal{TransferID: "fund", ID: "r1", Amount: 60}), // 4
			revOp(tenant, ledger.NewReversal{TransferID: "fund", ID: "r2", Amount: 70}), // 5: only 40 remain
			revOp(tenant, ledger.NewReversal{TransferID: "fund", ID: "r3"}),             // 6: the 40 that remain
			xferOp(tenant, usdTransfer("fund", "bank", "w", 100)),                       // 7: an identical repeat
			xferOp(tenant, usdTransfer("fund", "bank", "w", 99)),                        // 8: the id, other amount
			revOp(tenant, ledger.NewReversal{TransferID: "r1"}),                         // 9: a reversal
			revOp(tenant, ledger.NewReversal{TransferID: "later"}),                      // 10: posted only at 11
			xferOp(tenant, usdTransfer("later", "bank", "w", 5)),                        // 11
			xferOp(tenant, usdTransfer("x", "bank", "w", 0)),                            // 12: invalid
			acctOp(tenant, ledger.NewAccount{ID: "w", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}}),
			acctOp(tenant, ledger.NewAccount{ID: "w", Currency: "EUR"}), // 14
			xferOp("beta", usdTransfer("fund", "bank", "w", 100)),       // 15: beta has no accounts
			ledger.Op{Tenant: tenant},                                   // 16: no operation
			acctOp("beta", usd("bank")),                                 // 17: beta's own bank
		)
		wantRefused(t, 0, res[0], "account_not_found", "credit_account_id")
		wantOK(t, 1, res[1], false)
		wantOK(t, 2, res[2], false)
		wantRefused(t, 3, res[3], "insufficient_funds", "debit_account_id")
		wantOK(t, 4, res[4], false)
		wantRefused(t, 5, res[5], "reversal_exceeds_remaining", "amount")
		wantOK(t, 6, res[6], false)
		if res[6].Transfer.Amount != 40 || res[6].Transfer.DebitAccountID != "w" {
			t.Fatalf("rest of fund = %+v, want 40 from w", res[6].Transfer)
		}
		wantOK(t, 7, res[7], true)
		wantRefused(t, 8, res[8], "transfer_exists_with_different_amount", "amount")
		wantRefused(t, 9, res[9], "cannot_reverse_reversal", "transfer_id")
		wantRefused(t, 10, res[10], "transfer_not_found", "transfer_id")
		wantOK(t, 11, res[11], false)
		wantRefused(t, 12, res[12], "invalid_amount", "amount")
		wantOK(t, 13, res[13], true)
		if a := res[13].Account; a.Balance != 5 || a.CreditsPosted != 105 {
			t.Fatalf("w as re-created at op 13 = %+v, want its totals then", a)
		}
		wantRefused(t, 14, res[14], "account_exists_with_different_currency", "currency")
		wantRefused(t, 15, res[15], "account_not_found", "debit_account_id")
		wantRefused(t, 16, res[16], "invalid_request", "op")
		wantOK(t, 17, res[17], false)

		// One recorded time for the call's transfers, returned on each.
		at := res[2].Transfer.CreatedAt
		for _, i := range []int{4, 6, 7, 11} {
			if !res[i].Transfer.CreatedAt.Equal(at) || at.IsZero() {
				t.Fatalf("op %d recorded at %s, op 2 at %s", i, res[i].Transfer.CreatedAt, at)
			}
		}
		if c := counts(t, d); c != (rowCounts{Accounts: 3, Transfers: 4, Entries: 8, ReversedTotals: 1}) {
			t.Fatalf("rows = %+v", c)
		}
		var fund ledger.Transfer
		must(t, d, func(tx driver.Tx) (err error) {
			fund, err = l.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: "fund"})
			return err
		})
		if len(fund.Reversals) != 2 || fund.Reversals[0].Amount+fund.Reversals[1].Amount != 100 {
			t.Fatalf("fund = %+v", fund)
		}
		var es []ledger.Entry
		must(t, d, func(tx driver.Tx) (err error) {
			es, _, err = l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: "w"})
			return err
		})
		// Sequences and running totals as if one at a time: fund, r1, r3,
		// later.
		want := []string{"4:later:5", "3:r3:0", "2:r1:40", "1:fund:100"}
		var got []string
		for _, e := range es {
			got = append(got, fmt.Sprintf("%d:%s:%d", e.Sequence, e.TransferID, e.Balance))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("entries of w = %v, want %v", got, want)
		}
		verify(t, d)
	})
}

// PostEach: each transfer its own result; the refused ones write nothing,
// the others are stored; the call's own limits are errors.
func TestPostEach(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		createAccount(t, d, l, tenant, usd("a"))
		createAccount(t, d, l, tenant, ledger.NewAccount{ID: "w", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}})
		var res []ledger.TransferResult
		must(t, d, func(tx driver.Tx) (err error) {
			res, err = l.PostEach(ctx, tx, tenant,
				usdTransfer("t1", "a", "w", 50),
				usdTransfer("t2", "w", "a", 51), // overdraws w
				usdTransfer("t3", "w", "a", 50),
				usdTransfer("t1", "a", "w", 50), // the same again
				usdTransfer("t4", "a", "nope", 1),
				ledger.NewTransfer{DebitAccountID: "a", CreditAccountID: "w", Amount: 7, Currency: "USD"},
			)
			return err
		})
		if len(res) != 6 || res[0].Err != nil || res[2].Err != nil || res[5].Err != nil || res[5].Transfer.ID == "" {
			t.Fatalf("results = %+v", res)
		}
		if res[1].Err == nil || res[1].Err.Code != "insufficient_funds" || res[4].Err == nil || res[4].Err.Code != "account_not_found" {
			t.Fatalf("refusals = %v, %v", res[1].Err, res[4].Err)
		}
		if !res[3].Transfer.Existing || res[3].Transfer.ID != "t1" || res[0].Transfer.Existing {
			t.Fatalf("repeat = %+v, first %+v", res[3].Transfer, res[0].Transfer)
		}
		if c := counts(t, d); c.Transfers != 3 || c.Entries != 6 {
			t.Fatalf("rows = %+v", c)
		}
		if b := balance(t, d, l, tenant, "w", nil); b.Balance != 7 {
			t.Fatalf("w = %+v, want 7", b)
		}
		for _, tc := range []struct {
			tenant string
			n      int
		}{{"", 1}, {tenant, 0}, {tenant, 101}} {
			ts := make([]ledger.NewTransfer, tc.n)
			for i := range ts {
				ts[i] = usdTransfer("", "a", "w", 1)
			}
			err := inTx(t, d, func(tx driver.Tx) error { _, err := l.PostEach(ctx, tx, tc.tenant, ts...); return err })
			wantCode(t, err, "invalid_request")
		}
		err := inTx(t, d, func(tx driver.Tx) error {
			_, err := l.Apply(ctx, tx, make([]ledger.Op, 101))
			return err
		})
		if le := wantCode(t, err, "invalid_request"); le.Field != "ops" {
			t.Fatalf("field = %q", le.Field)
		}
		verify(t, d)
	})
}

// opGen draws a random sequence of ledger operations on two tenants with a
// few hot accounts each: wallets that cannot go negative, a capped
// account, a EUR account, accounts created along the way, transfers to
// accounts that do not exist (yet), partial and total reversals, and ids
// repeated with the same and with other content.
type opGen struct {
	rng        *rand.Rand
	tenants    []string
	accounts   map[string][]ledger.NewAccount
	transfers  map[string][]ledger.NewTransfer
	reversals  map[string][]ledger.NewReversal
	transferID map[string][]string // every transfer id asked for, reversals' included
	planned    map[string][]string // account ids named before an op creates them
	n          int
}

func newOpGen(seed uint64) *opGen {
	return &opGen{
		rng:        rand.New(rand.NewPCG(seed, 17)),
		tenants:    []string{"acme", "beta"},
		accounts:   map[string][]ledger.NewAccount{},
		transfers:  map[string][]ledger.NewTransfer{},
		reversals:  map[string][]ledger.NewReversal{},
		transferID: map[string][]string{},
		planned:    map[string][]string{},
	}
}

// base are the accounts each tenant opens first.
var base = []ledger.NewAccount{
	{ID: "bank", Currency: "USD"},
	{ID: "w0", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}},
	{ID: "w1", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}},
	{ID: "w2", Currency: "USD", Flags: ledger.Flags{DebitsMustNotExceedCredits: true}},
	{ID: "cap", Currency: "USD", Flags: ledger.Flags{CreditsMustNotExceedDebits: true}},
	{ID: "eur", Currency: "EUR"},
}

func (g *opGen) ops(n int) []ledger.Op {
	var out []ledger.Op
	for _, tn := range g.tenants {
		for _, a := range base {
			g.accounts[tn] = append(g.accounts[tn], a)
			out = append(out, acctOp(tn, a))
		}
	}
	for len(out) < n {
		out = append(out, g.op())
	}
	return out
}

func (g *opGen) pick(ids []string) string { return ids[g.rng.IntN(len(ids))] }

func (g *opGen) account(tn string) string {
	switch g.rng.IntN(30) {
	case 0:
		return "ghost"
	case 1, 2:
		// An account that a later op will create: not found before it.
		p := g.planned[tn]
		if len(p) < 3 {
			p = append(p, fmt.Sprintf("p%d", g.n))
			g.planned[tn] = p
		}
		return p[g.rng.IntN(len(p))]
	}
	if g.rng.IntN(3) == 0 {
		return "bank" // the hot one
	}
	as := g.accounts[tn]
	return as[g.rng.IntN(len(as))].ID
}

func (g *opGen) op() ledger.Op {
	tn := g.tenants[g.rng.IntN(len(g.tenants))]
	g.n++
	r := g.rng.IntN(100)
	switch {
	case r < 8:
		if as := g.accounts[tn]; g.rng.IntN(2) == 0 {
			a := as[g.rng.IntN(len(as))]
			switch g.rng.IntN(4) {
			case 0:
				a.Currency = "EUR"
			case 1:
				a.Flags.CreditsMustNotExceedDebits = !a.Flags.CreditsMustNotExceedDebits
			}
			return acctOp(tn, a)
		}
		a := ledger.NewAccount{ID: fmt.Sprintf("n%d", g.n), Currency: "USD",
			Flags: ledger.Flags{DebitsMustNotExceedCredits: g.rng.IntN(2) == 0}}
		if p := g.planned[tn]; len(p) > 0 {
			a.ID, g.planned[tn] = p[0], p[1:]
		}
		if g.rng.IntN(10) == 0 {
			a.ID = "" // generated: created, never named
			return acctOp(tn, a)
		}
		g.accounts[tn] = append(g.accounts[tn], a)
		return acctOp(tn, a)
	case r < 78:
		if ts := g.transfers[tn]; len(ts) > 0 && g.rng.IntN(8) == 0 {
			t := ts[g.rng.IntN(len(ts))]
			if g.rng.IntN(3) == 0 {
				t.Amount++
			}
			return xferOp(tn, t)
		}
		t := ledger.NewTransfer{ID: fmt.Sprintf("t%d", g.n), DebitAccountID: g.account(tn), CreditAccountID: g.account(tn),
			Amount: int64(1 + g.rng.IntN(300)), Currency: "USD"}
		for t.CreditAccountID == t.DebitAccountID && g.rng.IntN(20) != 0 {
			t.CreditAccountID = g.account(tn)
		}
		if g.rng.IntN(12) == 0 {
			t.Currency = "EUR"
		}
		if g.rng.IntN(50) == 0 {
			t.Amount = 0
		}
		if g.rng.IntN(4) == 0 {
			t.Metadata = []byte(fmt.Sprintf(`{"n":%d}`, g.n))
		}
		if g.rng.IntN(8) == 0 {
			t.ID = ""
		} else {
			g.transfers[tn] = append(g.transfers[tn], t)
			g.transferID[tn] = append(g.transferID[tn], t.ID)
		}
		return xferOp(tn, t)
	default:
		if rs := g.reversals[tn]; len(rs) > 0 && g.rng.IntN(8) == 0 {
			r := rs[g.rng.IntN(len(rs))]
			if g.rng.IntN(3) == 0 {
				r.Amount += 5
			}
			return revOp(tn, r)
		}
		ids := g.transferID[tn]
		if len(ids) == 0 || g.rng.IntN(25) == 0 {
			return revOp(tn, ledger.NewReversal{TransferID: "unknown", ID: fmt.Sprintf("r%d", g.n)})
		}
		r := ledger.NewReversal{TransferID: g.pick(ids), ID: fmt.Sprintf("r%d", g.n), Reason: "void"}
		if g.rng.IntN(5) < 3 {
			r.Amount = int64(1 + g.rng.IntN(150))
		}
		if g.rng.IntN(8) == 0 {
			r.ID = ""
		} else {
			g.reversals[tn] = append(g.reversals[tn], r)
			g.transferID[tn] = append(g.transferID[tn], r.ID)
		}
		return revOp(tn, r)
	}
}

// outcome is a result without its times, which the two ways of applying
// give differently.
func outcome(r ledger.OpResult) string {
	switch {
	case r.Err != nil:
		return fmt.Sprintf("refused %s %s: %s", r.Err.Code, r.Err.Field, r.Err.Message)
	case r.Account != nil:
		a := r.Account
		return fmt.Sprintf("account %s %s %+v %s d=%d c=%d b=%d existing=%v", a.ID, a.Currency, a.Flags, a.Metadata,
			a.DebitsPosted, a.CreditsPosted, a.Balance, a.Existing)
	case r.Transfer != nil:
		t := r.Transfer
		return fmt.Sprintf("transfer %s %s->%s %d %s meta=%s reverses=%s reason=%s existing=%v", t.ID, t.DebitAccountID,
			t.CreditAccountID, t.Amount, t.Currency, t.Metadata, t.ReversesID, t.Reason, t.Existing)
	}
	return "empty"
}

// oneAtATime applies each op in a transaction of its own with
// CreateAccount, Post or Reverse.
func oneAtATime(t *testing.T, d driver.Driver, l *ledger.Ledger, ops []ledger.Op) []string {
	t.Helper()
	ctx := context.Background()
	out := make([]string, len(ops))
	for i, o := range ops {
		var r ledger.OpResult
		err := inTx(t, d, func(tx driver.Tx) error {
			var err error
			switch {
			case o.Account != nil:
				var a ledger.Account
				if a, err = l.CreateAccount(ctx, tx, o.Tenant, *o.Account); err == nil {
					r.Account = &a
				}
			case o.Transfer != nil:
				var ts []ledger.Transfer
				if ts, err = l.Post(ctx, tx, o.Tenant, *o.Transfer); err == nil {
					r.Transfer = &ts[0]
				}
			default:
				var tr ledger.Transfer
				if tr, err = l.Reverse(ctx, tx, o.Tenant, *o.Reversal); err == nil {
					r.Transfer = &tr
				}
			}
			if le, ok := errors.AsType[*ledger.Error](err); ok {
				r.Err = le
				return nil // nothing written; the transaction commits nothing
			}
			return err
		})
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		out[i] = outcome(r)
	}
	return out
}

// inBatches applies ops with Apply, in calls of random sizes, each in a
// transaction of its own.
func inBatches(t *testing.T, d driver.Driver, l *ledger.Ledger, ops []ledger.Op, rng *rand.Rand, maxBatch int) []string {
	t.Helper()
	var out []string
	for len(ops) > 0 {
		n := min(1+rng.IntN(maxBatch), len(ops))
		for _, r := range apply(t, d, l, ops[:n]...) {
			out = append(out, outcome(r))
		}
		ops = ops[n:]
	}
	return out
}

// dump is every ledger row but times, in key order.
func dump(t *testing.T, d driver.Driver) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, q := range []struct {
		sql  string
		cols int
	}{
		{`SELECT 'account', tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits,
		         coalesce(metadata, ''), debits_posted, credits_posted, sequence FROM ledger_accounts ORDER BY tenant, id`, 10},
		{`SELECT 'transfer', tenant, id, debit_account_id, credit_account_id, amount, currency, coalesce(metadata, ''),
		         coalesce(reverses_id, ''), coalesce(reason, '') FROM ledger_transfers ORDER BY tenant, id`, 10},
		{`SELECT 'entry', tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted
		    FROM ledger_entries ORDER BY tenant, account_id, sequence`, 9},
		{`SELECT 'reversed', tenant, transfer_id, amount, reversed FROM ledger_reversed_totals ORDER BY tenant, transfer_id`, 5},
	} {
		rows, err := d.Reader().Query(ctx, q.sql)
		if err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
		for rows.Next() {
			var cols [10]any
			n := q.cols
			dest := make([]any, n)
			for i := range dest {
				dest[i] = &cols[i]
			}
			if err := rows.Scan(dest...); err != nil {
				t.Fatal(err)
			}
			var line []string
			for _, c := range cols[:n] {
				switch v := c.(type) {
				case []byte:
					line = append(line, string(v))
				case bool: // Postgres's booleans are SQLite's integers
					line = append(line, map[bool]string{false: "0", true: "1"}[v])
				default:
					line = append(line, fmt.Sprint(v))
				}
			}
			out = append(out, strings.Join(line, " "))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestApplyEquivalence: a random sequence of ops applied with Apply in
// calls of random sizes leaves the same ledger, row for row, and gives the
// same results as the same ops applied one at a time with CreateAccount,
// Post and Reverse.
func TestApplyEquivalence(t *testing.T) {
	t.Parallel()
	n := 400
	if testing.Short() {
		n = 100
	}
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			for _, seed := range []uint64{1, 2} {
				ops := newOpGen(seed).ops(n)
				one, batched := drivertest.Open(t, dialect), drivertest.Open(t, dialect)
				want := oneAtATime(t, one, newCountingLedger(t, one, 100), ops)
				got := inBatches(t, batched, newCountingLedger(t, batched, 100), ops, rand.New(rand.NewPCG(seed, 3)), 60)
				codes := map[string]int{}
				for i := range ops {
					if got[i] != want[i] {
						t.Fatalf("seed %d op %d %+v:\n one at a time: %s\n Apply:         %s", seed, i, ops[i], want[i], got[i])
					}
					kind := strings.SplitN(want[i], " ", 3)
					if kind[0] == "refused" {
						codes[kind[1]]++
					} else {
						codes[kind[0]+map[bool]string{false: "", true: " existing"}[strings.HasSuffix(want[i], "existing=true")]]++
					}
				}
				wantRows, gotRows := dump(t, one), dump(t, batched)
				if !slices.Equal(wantRows, gotRows) {
					for i := range max(len(wantRows), len(gotRows)) {
						var w, g string
						if i < len(wantRows) {
							w = wantRows[i]
						}
						if i < len(gotRows) {
							g = gotRows[i]
						}
						if w != g {
							t.Fatalf("seed %d: row %d differs:\n one at a time: %s\n Apply:         %s", seed, i, w, g)
						}
					}
				}
				verify(t, one)
				verify(t, batched)
				t.Logf("seed %d: %d ops, %d rows alike; outcomes %v", seed, len(ops), len(gotRows), codes)
			}
		})
	}
}

// Writers apply batches on the same hot accounts of two tenants at once.
// No call may fail other than retryably (and none is expected to: every
// writer locks in one order), and the balances are the sum of what the
// results say was accepted.
func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newLedger(t, d)
		ctx := context.Background()
		tenants := []string{"acme", "beta"}
		ids := []string{"h0", "h1", "h2", "h3"}
		for _, tn := range tenants {
			for _, id := range ids {
				createAccount(t, d, l, tn, usd(id))
			}
		}
		const workers = 8
		calls := 12
		if d.Dialect() == "sqlite" {
			calls = 5
		}
		var mu sync.Mutex
		want := map[string]int64{}
		accepted := 0
		var retries atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 23))
				var mine []ledger.Op // this worker's committed transfers, to reverse
				for c := range calls {
					var ops []ledger.Op
					for i := range 1 + rng.IntN(30) {
						tn := tenants[rng.IntN(2)]
						if len(mine) > 0 && rng.IntN(6) == 0 {
							k := rng.IntN(len(mine))
							orig := mine[k]
							mine = slices.Delete(mine, k, k+1) // reversed once, by 1
							ops = append(ops, revOp(orig.Tenant, ledger.NewReversal{TransferID: orig.Transfer.ID,
								ID: fmt.Sprintf("w%d-c%d-r%d", w, c, i), Amount: 1}))
							continue
						}
						from := rng.IntN(4)
						to := (from + 1 + rng.IntN(3)) % 4
						ops = append(ops, xferOp(tn, usdTransfer(fmt.Sprintf("w%d-c%d-%d", w, c, i), ids[from], ids[to], int64(2+rng.IntN(500)))))
					}
					var res []ledger.OpResult
					for attempt := 0; ; attempt++ {
						err := inTx(t, d, func(tx driver.Tx) (err error) { res, err = l.Apply(ctx, tx, ops); return err })
						if err == nil {
							break
						}
						if driver.IsRetryable(err) && attempt < 5 {
							retries.Add(1)
							continue
						}
						errs <- fmt.Errorf("worker %d call %d: %w", w, c, err)
						return
					}
					mu.Lock()
					for i, r := range res {
						if r.Err != nil || r.Transfer == nil || r.Transfer.Existing {
							mu.Unlock()
							errs <- fmt.Errorf("worker %d call %d op %d: %+v %v", w, c, i, r, r.Err)
							return
						}
						tr := r.Transfer
						want[ops[i].Tenant+"/"+tr.DebitAccountID] -= tr.Amount
						want[ops[i].Tenant+"/"+tr.CreditAccountID] += tr.Amount
						accepted++
						if ops[i].Transfer != nil {
							mine = append(mine, ops[i])
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if c := counts(t, d); c.Transfers != accepted || c.Entries != 2*accepted {
			t.Fatalf("rows = %+v, want %d transfers", c, accepted)
		}
		for _, tn := range tenants {
			for _, id := range ids {
				if b := balance(t, d, l, tn, id, nil); b.Balance != want[tn+"/"+id] {
					t.Errorf("%s/%s balance = %d, want %d", tn, id, b.Balance, want[tn+"/"+id])
				}
			}
		}
		if n := retries.Load(); n > 0 {
			t.Logf("%d retries", n)
		}
		verify(t, d)
	})
}

// The statements an Apply sends do not grow with its ops: a call of 1,000
// ops that creates accounts (one new, one existing), posts transfers with
// chosen ids and reverses a stored transfer sends as many as one of 4.
// So do PostEach and Post. (Postgres: 7 for such an Apply, 4 for a Post
// with chosen ids; SQLite: 9 and 5, one insert per table.)
func TestApplyStatementsDoNotGrow(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := newCountingLedger(t, d, 1000)
		ctx := context.Background()
		accts := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"}
		for _, id := range accts {
			createAccount(t, d, l, tenant, usd(id))
		}
		// Apply up to the largest call; the others up to 400 (SQLite is
		// slow under -race).
		sizes := map[string][]int{"Apply": {4, 40, 1000}, "PostEach": {4, 40, 400}, "Post": {4, 40, 400}}
		for _, n := range sizes["Apply"] {
			post(t, d, l, tenant, usdTransfer(fmt.Sprintf("orig-%d", n), "s0", "s1", 10))
		}
		count := func(fn func(tx driver.Tx) error) int {
			var n int
			must(t, d, func(tx driver.Tx) error {
				c := drivertest.Counting(tx)
				err := fn(c)
				n = c.Statements()
				return err
			})
			return n
		}
		type call struct {
			name string
			fn   func(n int) func(tx driver.Tx) error
		}
		transfers := func(prefix string, n int) []ledger.NewTransfer {
			ts := make([]ledger.NewTransfer, n)
			for i := range ts {
				ts[i] = usdTransfer(fmt.Sprintf("%s-%d-%d", prefix, n, i), accts[i%8], accts[(i+1+i/8)%8], int64(1+i))
				if ts[i].DebitAccountID == ts[i].CreditAccountID {
					ts[i].CreditAccountID = accts[(i+1)%8]
				}
			}
			return ts
		}
		for _, c := range []call{
			{"Apply", func(n int) func(tx driver.Tx) error {
				ops := []ledger.Op{acctOp(tenant, usd(fmt.Sprintf("new-%d", n))), acctOp(tenant, usd("s0")),
					revOp(tenant, ledger.NewReversal{TransferID: fmt.Sprintf("orig-%d", n), ID: fmt.Sprintf("rev-%d", n), Amount: 3})}
				for _, tr := range transfers("apply", n-3) {
					ops = append(ops, xferOp(tenant, tr))
				}
				return func(tx driver.Tx) error {
					res, err := l.Apply(ctx, tx, ops)
					for i, r := range res {
						if r.Err != nil {
							return fmt.Errorf("op %d: %w", i, r.Err)
						}
					}
					return err
				}
			}},
			{"PostEach", func(n int) func(tx driver.Tx) error {
				ts := transfers("each", n)
				return func(tx driver.Tx) error { _, err := l.PostEach(ctx, tx, tenant, ts...); return err }
			}},
			{"Post", func(n int) func(tx driver.Tx) error {
				ts := transfers("post", n)
				return func(tx driver.Tx) error { _, err := l.Post(ctx, tx, tenant, ts...); return err }
			}},
		} {
			var got []int
			for _, n := range sizes[c.name] {
				got = append(got, count(c.fn(n)))
			}
			t.Logf("%s: %d statements for %v ops", c.name, got, sizes[c.name])
			if slices.Min(got) != slices.Max(got) || got[0] > 9 {
				t.Errorf("%s sent %v statements for calls of %v ops, want the same few", c.name, got, sizes[c.name])
			}
		}
		// The originals, then Apply's n-3 transfers and a reversal, PostEach's
		// n and Post's n, for each size.
		if c := counts(t, d); c.Transfers != 3+(1044-2*3)+444+444 {
			t.Fatalf("rows = %+v", c)
		}
		verify(t, d)
	})
}
