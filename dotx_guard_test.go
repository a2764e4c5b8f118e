package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/drivertest"
)

// pgUserTxs are the two ways a user hands DoTx a PostgreSQL transaction of
// their own: pgx's, and database/sql's (GORM, sqlx, bun) on the same pool.
func pgUserTxs(t *testing.T, d *postgres.Driver) map[string]func(iso pgx.TxIsoLevel) driver.TxCloser {
	db := stdlib.OpenDBFromPool(d.Pool())
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	return map[string]func(pgx.TxIsoLevel) driver.TxCloser{
		"pgx": func(iso pgx.TxIsoLevel) driver.TxCloser {
			tx, err := d.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			return closer{Tx: postgres.TxFromPgx(tx), commit: tx.Commit, rollback: tx.Rollback}
		},
		"database/sql": func(iso pgx.TxIsoLevel) driver.TxCloser {
			level := sql.LevelReadCommitted
			if iso == pgx.RepeatableRead {
				level = sql.LevelRepeatableRead
			}
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			return closer{Tx: postgres.TxFromStdSQL(tx),
				commit:   func(context.Context) error { return tx.Commit() },
				rollback: func(context.Context) error { return tx.Rollback() }}
		},
	}
}

// DoTx's claim must be the transaction's first write, in READ COMMITTED:
// a write before it (it would commit with a replay that runs no work) or
// another isolation level is refused with ErrClaimNotFirst, nothing
// claimed, nothing run. Reads before the claim are fine. PostgreSQL only:
// SQLite cannot see what a transaction wrote (the rule is documented).
func TestDoTxClaimMustComeFirst(t *testing.T) {
	d := drivertest.Open(t, "postgres").(*postgres.Driver)
	setup(t, d)
	k := newKeeper(t, d, idem.Config{})
	ctx := context.Background()
	for name, begin := range pgUserTxs(t, d) {
		var runs atomic.Int64
		refused := func(what string, tx driver.TxCloser) {
			t.Helper()
			_, err := k.DoTx(ctx, tx, req(name+"-"+strings.ReplaceAll(what, " ", "-"), `{}`), insertWork(&runs, 201, `{}`))
			if rerr := tx.Rollback(ctx); rerr != nil {
				t.Fatal(rerr)
			}
			if !errors.Is(err, idem.ErrClaimNotFirst) {
				t.Fatalf("%s: DoTx %s: %v, want ErrClaimNotFirst", name, what, err)
			}
		}
		tx := begin(pgx.ReadCommitted)
		if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ('before', 'the claim')`); err != nil {
			t.Fatal(err)
		}
		refused("after a write", tx)
		refused("under repeatable read", begin(pgx.RepeatableRead))
		if runs.Load() != 0 || countRows(t, d, "biz") != 0 || countRows(t, d, "idem_keys") != 0 {
			t.Fatalf("%s: refused DoTx ran %d times, left %d biz rows and %d keys", name, runs.Load(), countRows(t, d, "biz"), countRows(t, d, "idem_keys"))
		}

		tx = begin(pgx.ReadCommitted)
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM biz`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := k.DoTx(ctx, tx, req(name+"-after-a-read", `{}`), insertWork(&runs, 201, `{}`)); err != nil {
			t.Fatalf("%s: DoTx after a read: %v", name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if runs.Load() != 1 || countRows(t, d, "biz") != 1 {
			t.Fatalf("%s: DoTx after a read: runs %d, biz rows %d", name, runs.Load(), countRows(t, d, "biz"))
		}

		// A second claim after a first one's writes is the caller's: allowed.
		tx = begin(pgx.ReadCommitted)
		for _, key := range []string{"first", "second"} {
			if _, err := k.DoTx(ctx, tx, req(name+"-"+key, `{}`), insertWork(&runs, 201, `{}`)); err != nil {
				_ = tx.Rollback(ctx)
				t.Fatalf("%s: DoTx %s in one transaction: %v", name, key, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Pool().Exec(ctx, `DELETE FROM biz; DELETE FROM idem_keys`); err != nil {
			t.Fatal(err)
		}
	}
}

// DoTx waits for a copy in flight in another transaction up to
// Config.Wait, as Do does, not up to the session's lock_timeout (5s
// here): then ErrInFlight. The claim's bound is its own: the caller's
// transaction keeps its lock_timeout for what follows.
func TestDoTxHonoursWait(t *testing.T) {
	d := drivertest.Open(t, "postgres").(*postgres.Driver)
	setup(t, d)
	const wait = 300 * time.Millisecond
	k := newKeeper(t, d, idem.Config{Wait: wait})
	ctx := context.Background()
	for name, begin := range pgUserTxs(t, d) {
		var runs atomic.Int64
		holder := begin(pgx.ReadCommitted)
		if _, err := k.DoTx(ctx, holder, req(name+"-held", `{}`), insertWork(&runs, 201, `{"first":1}`)); err != nil {
			t.Fatal(err)
		}
		tx := begin(pgx.ReadCommitted)
		start := time.Now()
		_, err := k.DoTx(ctx, tx, req(name+"-held", `{}`), insertWork(&runs, 201, `{"second":1}`))
		waited := time.Since(start)
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := holder.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, idem.ErrInFlight) || waited > 3*time.Second {
			t.Fatalf("%s: DoTx on a key in flight elsewhere: %v after %s; want ErrInFlight after about %s, not lock_timeout's 5s", name, err, waited, wait)
		}
		if runs.Load() != 1 || countRows(t, d, "biz") != 1 {
			t.Fatalf("%s: runs %d, biz rows %d; want the holder's one", name, runs.Load(), countRows(t, d, "biz"))
		}

		tx = begin(pgx.ReadCommitted)
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', '7s', true)`); err != nil {
			t.Fatal(err)
		}
		if _, err := k.DoTx(ctx, tx, req(name+"-other", `{}`), insertWork(&runs, 201, `{}`)); err != nil {
			t.Fatal(err)
		}
		var lockTimeout string
		err = tx.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&lockTimeout)
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err != nil || lockTimeout != "7s" {
			t.Fatalf("%s: the transaction's lock_timeout after DoTx: %q (%v), want its own 7s", name, lockTimeout, err)
		}
		if _, err := d.Pool().Exec(ctx, `DELETE FROM biz`); err != nil {
			t.Fatal(err)
		}
	}
}
