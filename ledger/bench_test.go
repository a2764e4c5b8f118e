package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// BenchmarkPost measures posting throughput (transfers/s) on each driver:
// one transfer per transaction from one goroutine, the same from 8
// goroutines over 64 accounts, and batches of 100 transfers per
// transaction.
func BenchmarkPost(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			d := drivertest.Open(b, dialect)
			l, err := ledger.New(d, ledger.Config{MaxBatch: 1000})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			// As many accounts as bench/pgbench/setup.sql makes for the
			// pgbench ceiling, so contention matches.
			const accounts = 1000
			for i := range accounts {
				createAccount(b, d, l, tenant, usd("acct-"+strconv.Itoa(i)))
			}
			pair := func(rng *rand.Rand) (string, string) {
				from := rng.IntN(accounts)
				to := (from + 1 + rng.IntN(accounts-1)) % accounts
				return "acct-" + strconv.Itoa(from), "acct-" + strconv.Itoa(to)
			}
			postOne := func(b *testing.B, rng *rand.Rand, n int) {
				ts := make([]ledger.NewTransfer, n)
				for i := range ts {
					from, to := pair(rng)
					ts[i] = ledger.NewTransfer{DebitAccountID: from, CreditAccountID: to, Amount: 1 + rng.Int64N(1000), Currency: "USD"}
				}
				if err := inTx(b, d, func(tx driver.Tx) error { _, err := l.Post(ctx, tx, tenant, ts...); return err }); err != nil {
					b.Error(err)
				}
			}
			b.Run("single", func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				for b.Loop() {
					postOne(b, rng, 1)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transfers/s")
			})
			b.Run("parallel-16", func(b *testing.B) {
				var seed atomic.Uint64
				b.SetParallelism(16 / runtime.GOMAXPROCS(0)) // bench/run gives pgbench 16 clients
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(seed.Add(1), 3))
					for pb.Next() {
						postOne(b, rng, 1)
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transfers/s")
			})
			b.Run("batch-100", func(b *testing.B) {
				rng := rand.New(rand.NewPCG(4, 5))
				for b.Loop() {
					postOne(b, rng, 100)
				}
				b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "transfers/s")
			})
		})
	}
}

// BenchmarkPostEach measures PostEach throughput (transfers/s) on each
// driver: one call per transaction over 1,000 accounts (the same as
// BenchmarkPost's), random pairs, in batches of 100 and 1,000 transfers
// with generated ids, and of 1,000 with chosen ids (which the ledger also
// locks and looks up, as a caller's idempotency keys are). Each iteration
// is a whole transaction as a caller sees it: build the batch, begin,
// PostEach (validation, the account locks, the write), commit (on Postgres
// a durable server waits for the WAL to reach the disk).
//
// These run one batch after another from one goroutine, so they add up
// the client's CPU, the database's and the commit's wait: on Postgres a
// statement runs on one core. batch-1000-2-callers posts the same batches
// from two goroutines at once, each on 1,000 accounts of its own, so that
// neither waits for the other's locks: what two callers (two service
// processes, or a service with two batch writers) get together.
func BenchmarkPostEach(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			d := drivertest.Open(b, dialect)
			l, err := ledger.New(d, ledger.Config{MaxBatch: 1000})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			// Each caller has accounts of its own: caller c posts between
			// acct-(c*accounts) and acct-(c*accounts+accounts-1).
			const accounts, callers = 1000, 2
			for c := range callers {
				ops := make([]ledger.Op, accounts)
				for i := range ops {
					ops[i] = ledger.Op{Tenant: tenant, Account: &ledger.NewAccount{ID: "acct-" + strconv.Itoa(c*accounts+i), Currency: "USD"}}
				}
				must(b, d, func(tx driver.Tx) error { _, err := l.Apply(ctx, tx, ops); return err })
			}
			var batches atomic.Int64
			// postBatch posts one batch of len(ts) random transfers among
			// caller's accounts in a transaction of its own.
			postBatch := func(rng *rand.Rand, ts []ledger.NewTransfer, caller int, chosen bool) error {
				batch := batches.Add(1)
				for i := range ts {
					from := rng.IntN(accounts)
					to := (from + 1 + rng.IntN(accounts-1)) % accounts
					ts[i] = ledger.NewTransfer{DebitAccountID: "acct-" + strconv.Itoa(caller*accounts+from),
						CreditAccountID: "acct-" + strconv.Itoa(caller*accounts+to), Amount: 1 + rng.Int64N(1000), Currency: "USD"}
					if chosen {
						ts[i].ID = fmt.Sprintf("b%d-%d", batch, i)
					}
				}
				tx, err := d.Begin(ctx, driver.BeginOptions{})
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
				res, err := l.PostEach(ctx, tx, tenant, ts...)
				if err != nil {
					return err
				}
				for i := range res {
					if res[i].Err != nil {
						return res[i].Err
					}
				}
				return tx.Commit(ctx)
			}
			for _, c := range []struct {
				n      int
				chosen bool
			}{{100, false}, {1000, false}, {1000, true}} {
				name := fmt.Sprintf("batch-%d", c.n)
				if c.chosen {
					name += "-chosen-ids"
				}
				b.Run(name, func(b *testing.B) {
					rng := rand.New(rand.NewPCG(8, uint64(c.n)))
					ts := make([]ledger.NewTransfer, c.n)
					for b.Loop() {
						if err := postBatch(rng, ts, 0, c.chosen); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(c.n*b.N)/b.Elapsed().Seconds(), "transfers/s")
				})
			}
			b.Run(fmt.Sprintf("batch-1000-%d-callers", callers), func(b *testing.B) {
				const n = 1000
				var next atomic.Int64
				var wg sync.WaitGroup
				for c := range callers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(9, uint64(c)))
						ts := make([]ledger.NewTransfer, n)
						for next.Add(1) <= int64(b.N) {
							if err := postBatch(rng, ts, c, false); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "transfers/s")
			})
		})
	}
}

// BenchmarkBalanceAsOf measures one as-of balance read (the account, then
// its newest entry at a random time) on an account with 1k and with 1M
// entries. The time per read must not grow with the history.
func BenchmarkBalanceAsOf(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			d := drivertest.Open(b, dialect)
			l, err := ledger.New(d, ledger.Config{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for _, n := range []int{1_000, 1_000_000} {
				tenant := fmt.Sprintf("bench-%d", n)
				base := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
				start := time.Now()
				fillHistory(b, d, l, tenant, base, n)
				b.Logf("%s: %d entries on one account loaded in %s", dialect, n, time.Since(start).Round(time.Millisecond))
				if n <= 1000 {
					// The bulk fixture obeys every invariant Post keeps.
					verify(b, d)
				}
				logPlan(b, d, tenant, base.Add(time.Duration(n/2)*time.Millisecond))
				b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
					rng := rand.New(rand.NewPCG(6, 7))
					for b.Loop() {
						// Before the newest entry: the history read, which
						// waits for no writer, in any transaction.
						k := 1 + rng.IntN(n-1)
						asOf := base.Add(time.Duration(k) * time.Millisecond)
						bal, err := l.Balance(ctx, d.Reader(), ledger.BalanceQuery{Tenant: tenant, AccountID: "dst", AsOf: &asOf})
						if err != nil {
							b.Fatal(err)
						}
						if bal.CreditsPosted != int64(k) {
							b.Fatalf("as of entry %d: credits %d", k, bal.CreditsPosted)
						}
					}
				})
			}
		})
	}
}

// The fixture writes n transfers of 1 from src to dst, one per millisecond
// after base, with their entries and running totals, in a few statements.
// It is test-only SQL: the ledger itself never writes this way.
var fillSQL = map[string][]string{
	"postgres": {
		`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
		 SELECT $1, 'f' || n, 'src', 'dst', 1, 'USD', $2::timestamptz + n * interval '1 millisecond'
		   FROM generate_series(1, $3::bigint) AS n`,
		`INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
		 SELECT $1, 'src', n, 'f' || n, 1, false, n, 0, $2::timestamptz + n * interval '1 millisecond'
		   FROM generate_series(1, $3::bigint) AS n`,
		`INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
		 SELECT $1, 'dst', n, 'f' || n, 1, true, 0, n, $2::timestamptz + n * interval '1 millisecond'
		   FROM generate_series(1, $3::bigint) AS n`,
		`UPDATE ledger_accounts SET debits_posted = $3::bigint, sequence = $3::bigint,
		        last_entry_at = $2::timestamptz + $3::bigint * interval '1 millisecond'
		  WHERE tenant = $1 AND id = 'src'`,
		`UPDATE ledger_accounts SET credits_posted = $3::bigint, sequence = $3::bigint,
		        last_entry_at = $2::timestamptz + $3::bigint * interval '1 millisecond'
		  WHERE tenant = $1 AND id = 'dst'`,
		`ANALYZE`,
	},
	"sqlite": {
		`WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ?3)
		 INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
		 SELECT ?1, 'f' || n, 'src', 'dst', 1, 'USD', ?2 + n * 1000 FROM s`,
		`WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ?3)
		 INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
		 SELECT ?1, 'src', n, 'f' || n, 1, 0, n, 0, ?2 + n * 1000 FROM s`,
		`WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ?3)
		 INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
		 SELECT ?1, 'dst', n, 'f' || n, 1, 1, 0, n, ?2 + n * 1000 FROM s`,
		`UPDATE ledger_accounts SET debits_posted = ?3, sequence = ?3, last_entry_at = ?2 + ?3 * 1000
		  WHERE tenant = ?1 AND id = 'src'`,
		`UPDATE ledger_accounts SET credits_posted = ?3, sequence = ?3, last_entry_at = ?2 + ?3 * 1000
		  WHERE tenant = ?1 AND id = 'dst'`,
		`ANALYZE`,
	},
}

func fillHistory(b *testing.B, d driver.Driver, l *ledger.Ledger, tenant string, base time.Time, n int) {
	b.Helper()
	createAccount(b, d, l, tenant, usd("src"))
	createAccount(b, d, l, tenant, usd("dst"))
	var at any = base
	if d.Dialect() == "sqlite" {
		at = base.UnixMicro()
	}
	must(b, d, func(tx driver.Tx) error {
		for _, q := range fillSQL[d.Dialect()] {
			args := []any{tenant, at, n}
			if q == "ANALYZE" {
				args = nil
			}
			if _, err := tx.Exec(context.Background(), q, args...); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
}

// explainSQL repeats the driver's as-of lookup under EXPLAIN, so the
// benchmark log shows it is one index descent (and, on Postgres, how many
// pages it read).
var explainSQL = map[string]string{
	"postgres": `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at
  FROM ledger_entries WHERE tenant = $1 AND account_id = 'dst' AND created_at <= $2
 ORDER BY created_at DESC, sequence DESC LIMIT 1`,
	"sqlite": `EXPLAIN QUERY PLAN
SELECT tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at
  FROM ledger_entries WHERE tenant = ?1 AND account_id = 'dst' AND created_at <= ?2
 ORDER BY created_at DESC, sequence DESC LIMIT 1`,
}

func logPlan(b *testing.B, d driver.Driver, tenant string, asOf time.Time) {
	b.Helper()
	var at any = asOf
	if d.Dialect() == "sqlite" {
		at = asOf.UnixMicro()
	}
	rows, err := d.Reader().Query(context.Background(), explainSQL[d.Dialect()], tenant, at)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		if d.Dialect() == "sqlite" {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				b.Fatal(err)
			}
			plan = append(plan, detail)
			continue
		}
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, line)
	}
	b.Logf("%s as-of plan for %s:\n  %s", d.Dialect(), tenant, strings.Join(plan, "\n  "))
}

// BenchmarkVerify measures Verify over the whole ledger at 100k and at 1M
// entries (50k, then 500k transfers over 1,000 accounts a tenant; the
// second size adds a tenant to the first). Verify reads every row once, so
// its time must grow linearly: the target is at most 30 s per million
// entries on either driver (docs/benchmarks.md). s/Mentries is the time
// per million entries; the two sizes side by side show the growth.
func BenchmarkVerify(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			d := drivertest.Open(b, dialect)
			ctx := context.Background()
			transfers := 0
			for _, entries := range []int{100_000, 1_000_000} {
				add := entries/2 - transfers
				start := time.Now()
				fillLedger(b, d, fmt.Sprintf("verify-%d", entries), add)
				transfers += add
				b.Logf("%s: %d transfers added in %s", dialect, add, time.Since(start).Round(time.Millisecond))
				b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
					for b.Loop() {
						tx, err := d.BeginSnapshot(ctx)
						if err != nil {
							b.Fatal(err)
						}
						err = ledger.Verify(ctx, d, tx)
						tx.Rollback(ctx) //nolint:errcheck // read-only
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e6/float64(entries), "s/Mentries")
				})
			}
		})
	}
}

// fillAccounts is the number of accounts a fillLedger tenant has.
const fillAccounts = 1000

// fillLedgerSQL writes a sound ledger for a tenant in four statements:
// fillAccounts accounts; n transfers, transfer i from account i mod 1000 to
// the next one, of 1 + i mod 100, one millisecond apart, with ids in time
// order as the ledger's own UUIDv7s are; their entries, numbered per
// account with running totals (window sums); and each account's totals from
// its newest entry. Parameters: tenant, base time, n, accounts (accounts:
// tenant, base time, accounts; totals: tenant). Test-only SQL: the ledger
// never writes this way, and Verify checks the result.
var fillLedgerSQL = map[string][4]string{
	"postgres": {
		`INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits, created_at)
		 SELECT $1, 'a' || i, 'USD', false, false, $2::timestamptz FROM generate_series(0, $3::int - 1) AS i`,
		`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
		 SELECT $1, 't' || lpad(i::text, 9, '0'), 'a' || (i % $4::int), 'a' || ((i + 1) % $4::int), 1 + i % 100, 'USD',
		        $2::timestamptz + i * interval '1 millisecond'
		   FROM generate_series(1, $3::int) AS i`,
		`INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
		 SELECT $1, acct, row_number() OVER w, 't' || lpad(i::text, 9, '0'), amt, credit,
		        sum(CASE WHEN credit THEN 0 ELSE amt END) OVER w, sum(CASE WHEN credit THEN amt ELSE 0 END) OVER w,
		        $2::timestamptz + i * interval '1 millisecond'
		   FROM (SELECT i, 'a' || (i % $4::int) AS acct, false AS credit, 1 + i % 100 AS amt FROM generate_series(1, $3::int) AS i
		         UNION ALL
		         SELECT i, 'a' || ((i + 1) % $4::int), true, 1 + i % 100 FROM generate_series(1, $3::int) AS i) AS legs
		 WINDOW w AS (PARTITION BY acct ORDER BY i ROWS UNBOUNDED PRECEDING)
		 ORDER BY i, credit`, // in the heap in time order, as posting leaves them
		`UPDATE ledger_accounts a
		    SET debits_posted = e.debits_posted, credits_posted = e.credits_posted, sequence = e.sequence, last_entry_at = e.created_at
		   FROM (SELECT DISTINCT ON (account_id) account_id, sequence, debits_posted, credits_posted, created_at
		           FROM ledger_entries WHERE tenant = $1 ORDER BY account_id, sequence DESC) AS e
		  WHERE a.tenant = $1 AND a.id = e.account_id`,
	},
	"sqlite": {
		`WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < ?3 - 1)
		 INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits, created_at)
		 SELECT ?1, 'a' || i, 'USD', 0, 0, ?2 FROM s`,
		`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?3)
		 INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
		 SELECT ?1, printf('t%09d', i), 'a' || (i % ?4), 'a' || ((i + 1) % ?4), 1 + i % 100, 'USD', ?2 + i * 1000 FROM s`,
		`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?3),
		 legs AS (SELECT i, 'a' || (i % ?4) AS acct, 0 AS credit, 1 + i % 100 AS amt FROM s
		          UNION ALL
		          SELECT i, 'a' || ((i + 1) % ?4), 1, 1 + i % 100 FROM s)
		 INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
		 SELECT ?1, acct, row_number() OVER w, printf('t%09d', i), amt, credit,
		        sum((1 - credit) * amt) OVER w, sum(credit * amt) OVER w, ?2 + i * 1000
		   FROM legs
		 WINDOW w AS (PARTITION BY acct ORDER BY i ROWS UNBOUNDED PRECEDING)`,
		`UPDATE ledger_accounts
		    SET (debits_posted, credits_posted, sequence, last_entry_at) =
		        (SELECT debits_posted, credits_posted, sequence, created_at FROM ledger_entries e
		          WHERE e.tenant = ledger_accounts.tenant AND e.account_id = ledger_accounts.id
		          ORDER BY sequence DESC LIMIT 1)
		  WHERE tenant = ?1`,
	},
}

// fillLedger adds a tenant of n transfers (2n entries) to the ledger, in
// one transaction, and refreshes the planner's statistics as autovacuum
// would after a load this size.
func fillLedger(b *testing.B, d driver.Driver, tenant string, n int) {
	b.Helper()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var at any = base
	if d.Dialect() == "sqlite" {
		at = base.UnixMicro()
	}
	q := fillLedgerSQL[d.Dialect()]
	must(b, d, func(tx driver.Tx) error {
		for _, s := range []struct {
			sql  string
			args []any
		}{
			{q[0], []any{tenant, at, fillAccounts}},
			{q[1], []any{tenant, at, n, fillAccounts}},
			{q[2], []any{tenant, at, n, fillAccounts}},
			{q[3], []any{tenant}},
			{"ANALYZE", nil},
		} {
			if _, err := tx.Exec(context.Background(), s.sql, s.args...); err != nil {
				return fmt.Errorf("%s: %w", s.sql, err)
			}
		}
		return nil
	})
}

// BenchmarkHolds measures two-phase transfers (holds/s) on each driver:
// each iteration reserves a hold in one transaction and posts it in a
// second, as a card authorisation and its capture are, from 16 clients
// over 1,000 accounts (BenchmarkPost's). bench/pgbench/ledger_holds.sql
// runs the same statements on Postgres for the ceiling.
func BenchmarkHolds(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			d := drivertest.Open(b, dialect)
			l, err := ledger.New(d, ledger.Config{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			const accounts = 1000
			for i := range accounts {
				createAccount(b, d, l, tenant, usd("acct-"+strconv.Itoa(i)))
			}
			var seq atomic.Int64
			b.Run("parallel-16", func(b *testing.B) {
				var seed atomic.Uint64
				b.SetParallelism(16 / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(seed.Add(1), 7))
					for pb.Next() {
						from := rng.IntN(accounts)
						to := (from + 1 + rng.IntN(accounts-1)) % accounts
						id := "hold-" + strconv.FormatInt(seq.Add(1), 10)
						h := ledger.NewTransfer{ID: id, DebitAccountID: "acct-" + strconv.Itoa(from), CreditAccountID: "acct-" + strconv.Itoa(to),
							Amount: 100, Currency: "USD", Pending: true, Timeout: time.Hour}
						if err := inTx(b, d, func(tx driver.Tx) error { _, err := l.Post(ctx, tx, tenant, h); return err }); err != nil {
							b.Error(err)
							return
						}
						s := ledger.NewSettlement{PendingID: id, Settles: ledger.SettlePost, ID: id + "-post", Amount: 60}
						if err := inTx(b, d, func(tx driver.Tx) error { _, err := l.Settle(ctx, tx, tenant, s); return err }); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "holds/s")
			})
		})
	}
}
