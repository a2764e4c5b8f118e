package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/testpg"
)

// LedgerSettle's contract on Postgres, which the ledger's final as-of
// answers rest on: it waits for the account's writer (FOR UPDATE, as
// LedgerLock takes it) and reads the clock while holding the lock, so after
// that writer committed; a read-only transaction gets ErrReadOnly and stays
// usable; a moment the clock has not reached locks nothing; and under
// REPEATABLE READ a writer that committed after the snapshot is an
// ErrSerialization, not a stale answer.
func TestLedgerSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := Open(ctx, Config{URL: testpg.URL(t), SearchPath: testpg.Schema(t), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reader().Exec(ctx, `INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
	    credits_must_not_exceed_debits, created_at) VALUES ('t', 'a', 'EUR', false, false, now())`); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	settle := func(tx driver.Tx, after time.Time) (*driver.LedgerSettleResult, error) {
		return d.LedgerSettle(ctx, tx, &driver.LedgerSettleParams{Tenant: "t", AccountID: "a", After: after})
	}
	pid := func(tx driver.Tx) int {
		var n int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A writer holds the account; the settle waits for its commit.
	writer, _ := d.Begin(ctx, driver.BeginOptions{})
	defer writer.Rollback(ctx)
	if _, err := d.LedgerLock(ctx, writer, &driver.LedgerLockParams{AccountKeys: []driver.LedgerKey{{Tenant: "t", ID: "a"}}}); err != nil {
		t.Fatal(err)
	}
	reader, _ := d.Begin(ctx, driver.BeginOptions{})
	defer reader.Rollback(ctx)
	readerPID := pid(reader)
	type settled struct {
		res *driver.LedgerSettleResult
		err error
	}
	done := make(chan settled, 1)
	go func() {
		res, err := settle(reader, past)
		done <- settled{res, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := d.Reader().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`,
			readerPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case s := <-done:
			t.Fatalf("settled while the writer held the account: %+v %v", s.res, s.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the settle did not wait for the writer's lock in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var beforeCommit time.Time
	if err := writer.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&beforeCommit); err != nil {
		t.Fatal(err)
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil || !s.res.Locked || !s.res.Clock.After(beforeCommit) {
		t.Fatalf("settle = %+v %v: want Locked, with a clock after the writer's last reading %s", s.res, s.err, beforeCommit)
	}
	_ = reader.Rollback(ctx)

	// Outside a transaction (the pool), lock and clock share a statement.
	if res, err := settle(d.Reader(), past); err != nil || !res.Locked || !res.Clock.After(past) {
		t.Fatalf("settle on the pool = %+v %v", res, err)
	}

	// A moment ahead of the clock: nothing locked, the clock returned.
	ahead := time.Now().Add(time.Hour)
	if res, err := settle(d.Reader(), ahead); err != nil || res.Locked || res.Clock.After(ahead) {
		t.Fatalf("settle ahead = %+v %v, want not Locked", res, err)
	}

	// Read-only: ErrReadOnly, and the transaction is still usable.
	ro, _ := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	defer ro.Rollback(ctx)
	if _, err := settle(ro, past); !errors.Is(err, driver.ErrReadOnly) {
		t.Fatalf("settle in a read-only transaction: %v, want ErrReadOnly", err)
	}
	var one int
	if err := ro.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		t.Fatalf("the read-only transaction after ErrReadOnly: %v", err)
	}

	// REPEATABLE READ: a writer committed after the snapshot.
	pgtx, err := d.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer pgtx.Rollback(ctx)
	rr := TxFromPgx(pgtx)
	if _, err := rr.Exec(ctx, `SELECT sequence FROM ledger_accounts WHERE tenant = 't' AND id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reader().Exec(ctx, `UPDATE ledger_accounts SET sequence = sequence + 1 WHERE tenant = 't' AND id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := settle(rr, past); !errors.Is(err, driver.ErrSerialization) {
		t.Fatalf("settle under REPEATABLE READ after a later commit: %v, want ErrSerialization", err)
	}
}
