package postgres

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(m)) }

func open(t *testing.T) *Driver {
	t.Helper()
	d, err := Open(context.Background(), Config{URL: testpg.URL(t), SearchPath: testpg.Schema(t), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	tx, err := d.Begin(context.Background(), driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d
}

func count(t *testing.T, d *Driver) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The BEGIN that travels with the first statement: every way a
// transaction ends leaves the right rows and an idle connection.
func TestOwnedTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)

	// Nothing sent: commit and rollback are no-ops.
	for range 10 {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal("rollback after commit:", err)
		}
	}

	// First statement of each kind (Exec, QueryRow, Query), then commit.
	tx, _ := d.Begin(ctx, driver.BeginOptions{})
	var one int
	if err := tx.QueryRow(ctx, `INSERT INTO t VALUES (1) RETURNING id`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("QueryRow first: %v %d", err, one)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, _ = d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	rows, err := tx.Query(ctx, `SELECT id FROM t ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) != 2 {
		t.Fatalf("Query first: %v %v", ids, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (3)`); err == nil {
		t.Fatal("a read-only transaction wrote")
	}
	_ = tx.Rollback(ctx)

	// Rolled back: gone.
	tx, _ = d.Begin(ctx, driver.BeginOptions{})
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (4)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// A failed first statement aborts the transaction: commit says so.
	tx, _ = d.Begin(ctx, driver.BeginOptions{})
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (1)`); !errors.Is(err, driver.ErrUniqueViolation) {
		t.Fatalf("duplicate insert: %v", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit of an aborted transaction succeeded")
	}
	if got := count(t, d); got != 2 {
		t.Fatalf("rows %d, want 2", got)
	}
	if n := d.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still held", n)
	}
}

// A per-transaction lock timeout goes out with BEGIN and bounds the wait.
func TestOwnedTxLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)
	holder, _ := d.Begin(ctx, driver.BeginOptions{})
	if _, err := holder.Exec(ctx, `INSERT INTO t VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)

	waiter, _ := d.Begin(ctx, driver.BeginOptions{LockTimeout: 100 * time.Millisecond})
	defer waiter.Rollback(ctx)
	start := time.Now()
	_, err := waiter.Exec(ctx, `INSERT INTO t VALUES (7)`)
	if !errors.Is(err, driver.ErrLockTimeout) {
		t.Fatalf("insert behind a held key: %v, want ErrLockTimeout", err)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("waited %s: the transaction's 100ms bound was not applied", waited)
	}
}

// PgxFromTx hands out the transaction the driver began as a pgx.Tx whose
// statements (Exec, CopyFrom, SendBatch) run inside it, even before the
// transaction's own first statement has sent its BEGIN; the caller's own
// pgx.Tx comes back as it is; the pool reader is no transaction.
func TestPgxFromTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)

	// Rolled back: every row written through the pgx.Tx goes with it. The
	// first statement goes through the pgx.Tx, so it must send the BEGIN.
	for _, end := range []string{"rollback", "commit"} {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ptx, ok := PgxFromTx(tx)
		if !ok {
			t.Fatal("PgxFromTx refused a transaction the driver began")
		}
		if _, err := ptx.Exec(ctx, `INSERT INTO t VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		if _, err := ptx.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"id"}, pgx.CopyFromRows([][]any{{2}, {3}})); err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO t VALUES (4)`)
		b.Queue(`INSERT INTO t VALUES (5)`)
		if err := ptx.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (6)`); err != nil {
			t.Fatal(err)
		}
		if err := ptx.Commit(ctx); !errors.Is(err, errNotOwner) {
			t.Fatalf("Commit through the pgx.Tx: %v, want errNotOwner", err)
		}
		if err := ptx.Rollback(ctx); !errors.Is(err, errNotOwner) {
			t.Fatalf("Rollback through the pgx.Tx: %v, want errNotOwner", err)
		}
		want := 0
		if end == "commit" {
			err, want = tx.Commit(ctx), 6
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(end, err)
		}
		if n := count(t, d); n != want {
			t.Fatalf("after %s: %d rows, want %d", end, n, want)
		}
		if _, ok := PgxFromTx(tx); ok {
			t.Fatalf("PgxFromTx after %s: ok", end)
		}
		if _, err := ptx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("statement after %s: %v, want pgx.ErrTxClosed", end, err)
		}
		if _, err := d.Pool().Exec(ctx, `TRUNCATE t`); err != nil {
			t.Fatal(err)
		}
	}

	// The caller's own transaction comes back as it is.
	own, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Rollback(ctx)
	if got, ok := PgxFromTx(TxFromPgx(own)); !ok || got != own {
		t.Fatalf("PgxFromTx(TxFromPgx(tx)) = %v, %v; want tx, true", got, ok)
	}
	for name, tx := range map[string]driver.Tx{"reader": d.Reader(), "nil": nil} {
		if _, ok := PgxFromTx(tx); ok {
			t.Fatalf("PgxFromTx(%s): ok", name)
		}
	}
}

// A LazyCommit transaction commits with synchronous_commit off, and only
// it: the setting ends with the transaction, on the same connection too.
func TestLazyCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The test cluster is not durable: its connections begin with
	// synchronous_commit on here (a startup parameter), as in production.
	u := testpg.URL(t)
	if strings.Contains(u, "?") {
		u += "&synchronous_commit=on"
	} else {
		u += "?synchronous_commit=on"
	}
	d, err := Open(ctx, Config{URL: u, SearchPath: testpg.Schema(t), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Reader().Exec(ctx, `CREATE TABLE lazy (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	setting := func(tx driver.Tx) (s string) {
		t.Helper()
		if err := tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i, lazy := range []bool{true, false, true, false} {
		tx, err := d.Begin(ctx, driver.BeginOptions{LazyCommit: lazy})
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{true: "off", false: "on"}[lazy]
		if s := setting(tx); s != want {
			t.Errorf("transaction %d (LazyCommit %v): synchronous_commit is %s, want %s", i, lazy, s, want)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO lazy VALUES ($1)`, i); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM lazy`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != i+1 {
			t.Fatalf("after transaction %d: %d rows, want %d", i, n, i+1)
		}
	}
}
