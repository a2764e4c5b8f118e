package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testpg"
)

// A tenant the planner's statistics have not seen (new, or new since the
// last ANALYZE) is estimated at one row. The ledger's lookups by id must
// still descend the primary key by (tenant, id): planned on the tenant
// alone, the account lock, the transfer lookup and the totals' update read
// every row of the tenant and filter, a cost that grows with the tenant
// (first seen in bench/run: 0.7–0.9 ms a lookup after a few thousand
// transfers). Checked with custom and generic plans, as pgx's prepared
// statements get either.
func TestLedgerLookupsUseTheWholeKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := migratedConn(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Tenant old is all ANALYZE sees; tenant new comes after it.
	seed := func(tenant string, transfers int) {
		exec(`INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
		                                   credits_must_not_exceed_debits, created_at)
		      SELECT $1, 'acc-' || i, 'EUR', false, false, now() FROM generate_series(1, 1000) i`, tenant)
		exec(`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
		      SELECT $1, 'tr-' || i, 'acc-' || (1 + i % 500), 'acc-' || (501 + i % 500), 1, 'EUR', now()
		        FROM generate_series(1, $2::int) i`, tenant, transfers)
		// Open holds: not transfers of their own here, only their rows.
		exec(`INSERT INTO ledger_holds (tenant, transfer_id, debit_account_id, credit_account_id, amount, expires_at)
		      SELECT $1, 'tr-' || i, 'acc-1', 'acc-501', 1, now() FROM generate_series(1, $2::int) i`, tenant, transfers)
	}
	for _, table := range []string{"ledger_accounts", "ledger_transfers", "ledger_holds"} {
		exec(`ALTER TABLE ` + table + ` SET (autovacuum_enabled = false)`)
	}
	seed("old", 3000)
	exec(`ANALYZE ledger_accounts`)
	exec(`ANALYZE ledger_transfers`)
	exec(`ANALYZE ledger_holds`)
	seed("new", 3000)

	statements := []struct {
		name, sql, args string
	}{
		{"account lock", sqlLedgerLockAccounts, `'{new,new}', '{acc-7,acc-507}'`},
		{"account lock with originals'", sqlLedgerLockAccountsOf, `'{new}', '{acc-7}', '{new,new}', '{tr-9,tr-none}'`},
		{"account read", sqlLedgerAccountsGet, `'{new,new,old}', '{acc-7,acc-none,acc-8}'`},
		{"account insert", sqlLedgerAccountsInsert,
			`'{new,new}', '{acc-7,acc-x}', '{EUR,EUR}', '{f,f}', '{f,f}', '{"",""}'`},
		{"transfer lookup", sqlLedgerTransfersGet, `'new', '{tr-9,tr-none}'`},
		{"transfer find", sqlLedgerTransfersFind, `'{new,new,old}', '{tr-9,tr-none,tr-10}'`},
		{"batch write", sqlLedgerWrite,
			`now(), '{new}', '{tr-x}', '{acc-7}', '{acc-507}', '{1}', '{EUR}', '{""}', '{""}', '{""}',
			 '{t}', '{60}', '{""}', '{""}',
			 '{new,new}', '{acc-7,acc-507}', '{1,1}', '{tr-x,tr-x}', '{1,1}', '{f,t}', '{0,0}', '{0,0}',
			 '{1,1}', '{t,t}', '{1,0}', '{0,1}',
			 '{new,new}', '{acc-7,acc-507}', '{EUR,EUR}', '{f,f}', '{f,f}', ARRAY[now(),now()], '{0,0}', '{0,0}', '{1,1}',
			 '{1,0}', '{0,1}',
			 '{new}', '{tr-9}', '{1}', '{1}',
			 '{new}', '{tr-x}', '{acc-7}', '{acc-507}', '{1}', '{60}',
			 '{new}', '{tr-9}'`},
		{"due holds", sqlLedgerHoldsDue, `10`},
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, s := range statements {
			text := planOf(t, conn.Conn(), mode, s.sql, s.args)
			if strings.Contains(text, "Rows Removed by") || strings.Contains(text, "Seq Scan on ledger_") {
				t.Errorf("%s, %s: the plan reads rows it does not want:\n%s", s.name, mode, text)
			}
		}
	}
}

// planOf runs sql with args (SQL literals) under plan_cache_mode mode, as
// a prepared statement in a transaction it rolls back, and returns its
// EXPLAIN ANALYZE.
func planOf(t *testing.T, conn *pgx.Conn, mode, sql, args string) string {
	t.Helper()
	return planUnder(t, conn, `SET LOCAL plan_cache_mode = `+mode, sql, args)
}

// planUnder is planOf with settings, a statement, run first in the
// transaction.
func planUnder(t *testing.T, conn *pgx.Conn, settings, sql, args string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the EXPLAIN ANALYZE's writes go
	if _, err := tx.Exec(ctx, settings); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `PREPARE q AS `+sql); err != nil {
		t.Fatalf("prepare: %v\n%s", err, sql)
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE q(`+args+`)`)
	if err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	plan := readPlan(t, rows)
	if _, err := tx.Exec(ctx, `DEALLOCATE q`); err != nil {
		t.Fatal(err)
	}
	return plan
}

// readPlan returns an EXPLAIN's lines, joined.
func readPlan(t *testing.T, rows pgx.Rows) string {
	t.Helper()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// A keeper batch plans its statements once per connection (generic
// plans, generic in the driver), blind to the arrays' length,
// and so does the reader's batch of reads: each must still find its keys
// through the primary key, however many records the table holds. The read
// is checked on a thousand keys too, where a plain join read the whole
// table into a hash.
func TestKeyBatchPlansUseTheKey(t *testing.T) {
	t.Parallel()
	conn := migratedConn(t)
	insert := func(n int) string {
		return fmt.Sprintf(`INSERT INTO idem_keys (scope, operation, key, fingerprint, status, created_at, expires_at)
		 SELECT 'default', 'POST /v1/transfers', 'k-' || i, '\x00', 201, now(), now() + interval '1 day'
		   FROM generate_series(1, %d) i ON CONFLICT DO NOTHING`, n)
	}
	const keys = `'{default,default}', '{"POST /v1/transfers","POST /v1/transfers"}', '{k-7,k-9}'`
	read := planCase{"read", sqlKeyGetBatch, keys}
	seed(t, conn, insert(1000), `ANALYZE idem_keys`)
	genericPlan(t, conn, "idem_keys", planCase{"read, 1,000 keys", read.sql, read.args})
	seed(t, conn, insert(20000), `ANALYZE idem_keys`)
	for _, c := range []planCase{
		{"claim", sqlKeyClaimBatch, `'{default,default}', '{"POST /v1/transfers","POST /v1/transfers"}', '{new-1,new-2}',
			'{"\\x01","\\x02"}', now(), now() + interval '1 day', now() - interval '30 days'`},
		read,
		{"record", sqlKeyRecordBatch, keys + `, '{201,201}', '{NULL,NULL}', '{"\\x7b7d","\\x7b7d"}', '{}', '{}', '{}', '{false,false}'`},
		{"release", sqlKeyRecordBatch, `'{}', '{}', '{}', '{}', '{}', '{}', ` + keys + `, '{}'`},
	} {
		genericPlan(t, conn, "idem_keys", c)
	}
}

// planCase is a statement and its arguments, as SQL literals, for planOf.
type planCase struct{ name, sql, args string }

// genericPlan returns c's generic plan, and fails the test when that plan
// reads rows of table it does not want: a sequential scan, or rows an
// index or join found and a filter then dropped.
func genericPlan(t *testing.T, conn *pgxpool.Conn, table string, c planCase) string {
	t.Helper()
	text := planOf(t, conn.Conn(), "force_generic_plan", c.sql, c.args)
	if strings.Contains(text, "Rows Removed by") || strings.Contains(text, "Seq Scan on "+table) {
		t.Errorf("%s: the plan reads rows it does not want:\n%s", c.name, text)
	}
	return text
}

// seed runs the statements that fill a plan test's tables.
func seed(t *testing.T, conn *pgxpool.Conn, stmts ...string) {
	t.Helper()
	for _, sql := range stmts {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
}

// Verify reads every transfer with its entries as one stream of both tables
// (a UNION ALL in transfer order, not a join). Nothing indexes the entries
// by transfer, so any plan that looked them up per transfer, as a nested
// loop over a join did on SQLite, would read all of a tenant's entries for
// every transfer: quadratic. The plan must read each table once.
func TestLedgerScanReadsEachTableOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := migratedConn(t)
	for _, sql := range []string{
		`INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
		                              credits_must_not_exceed_debits, created_at)
		 SELECT 'acme', 'acc-' || i, 'EUR', false, false, now() FROM generate_series(0, 99) i`,
		`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
		 SELECT 'acme', 'tr-' || i, 'acc-' || (i % 100), 'acc-' || ((i + 1) % 100), 1, 'EUR', now()
		   FROM generate_series(1, 2000) i`,
		// Two entries a transfer; running totals do not matter to the plan.
		`INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit,
		                             debits_posted, credits_posted, created_at)
		 SELECT 'acme', 'acc-' || ((i + c) % 100), i, 'tr-' || i, 1, c = 1, 0, 0, now()
		   FROM generate_series(1, 2000) i, generate_series(0, 1) c`,
		`ANALYZE`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	rows, err := conn.Query(ctx, `EXPLAIN (COSTS OFF) `+sqlLedgerScanTransfers)
	if err != nil {
		t.Fatal(err)
	}
	text := readPlan(t, rows)
	if strings.Contains(text, "Nested Loop") || strings.Count(text, " on ledger_transfers") != 1 ||
		strings.Count(text, " on ledger_entries") != 1 {
		t.Errorf("the scan does not read each table once:\n%s", text)
	}
}

// migratedConn is a connection to a schema of its own, migrated, held
// until the test ends.
func migratedConn(t *testing.T) *pgxpool.Conn {
	t.Helper()
	ctx := context.Background()
	d, err := Open(ctx, Config{URL: testpg.URL(t), SearchPath: testpg.Schema(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn
}

// migratedSchema returns a new schema with every migration applied, for a
// test that opens its drivers on it with settings of its own (migrating
// takes two connections).
func migratedSchema(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	schema := testpg.Schema(t)
	m, err := Open(ctx, Config{URL: testpg.URL(t), SearchPath: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return schema
}

// oneConnDriver opens a driver of one connection on a migrated schema of
// its own, so that each statement meets whatever settings the ones before
// it left behind.
func oneConnDriver(t *testing.T) *Driver {
	t.Helper()
	d, err := Open(context.Background(), Config{URL: testpg.URL(t), SearchPath: migratedSchema(t), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
