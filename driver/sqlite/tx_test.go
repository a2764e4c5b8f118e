package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
)

// openWithTable opens a database of its own with an empty table t.
func openWithTable(t *testing.T) *sqlite.Driver {
	t.Helper()
	ctx := context.Background()
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "idem.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if _, err := d.DB().ExecContext(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return d
}

// StdSQLFromTx hands out the transaction the driver began as its *sql.Tx,
// whose statements commit and roll back with it; the caller's own *sql.Tx
// comes back as it is; the reader pool is no transaction.
func TestStdSQLFromTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openWithTable(t)
	count := func() (n int) {
		t.Helper()
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	for _, end := range []string{"rollback", "commit"} {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stx, ok := sqlite.StdSQLFromTx(tx)
		if !ok {
			t.Fatal("StdSQLFromTx refused a transaction the driver began")
		}
		if _, err := stx.ExecContext(ctx, `INSERT INTO t VALUES (1), (2)`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (3)`); err != nil {
			t.Fatal(err)
		}
		want := 0
		if end == "commit" {
			err, want = tx.Commit(ctx), 3
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(end, err)
		}
		if n := count(); n != want {
			t.Fatalf("after %s: %d rows, want %d", end, n, want)
		}
	}

	own, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Rollback()
	if got, ok := sqlite.StdSQLFromTx(sqlite.TxFromStdSQL(own)); !ok || got != own {
		t.Fatalf("StdSQLFromTx(TxFromStdSQL(tx)) = %v, %v; want tx, true", got, ok)
	}
	for name, tx := range map[string]driver.Tx{"reader": d.Reader(), "nil": nil} {
		if _, ok := sqlite.StdSQLFromTx(tx); ok {
			t.Fatalf("StdSQLFromTx(%s): ok", name)
		}
	}
}

// A LazyCommit transaction runs with synchronous=NORMAL (its commit writes
// the log without flushing it) and gives the writer back at FULL, however
// it ends; a read-only one ignores the option.
func TestLazyCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openWithTable(t)
	// synchronous: 1 is NORMAL, 2 is FULL.
	level := func(tx driver.Tx) (n int) {
		t.Helper()
		if err := tx.QueryRow(ctx, `PRAGMA synchronous`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The next writer, begun under a deadline: a writer connection the lazy
	// transaction kept would make it wait.
	durable := func(after string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
		defer tx.Rollback(ctx)
		if n := level(tx); n != 2 {
			t.Fatalf("after %s: the writer's next transaction runs at synchronous=%d, want 2 (FULL)", after, n)
		}
	}

	for i, end := range []string{"commit", "rollback", "commit, then the deferred rollback", "cancel"} {
		ctx, cancel := context.WithCancel(ctx)
		tx, err := d.Begin(ctx, driver.BeginOptions{LazyCommit: true})
		if err != nil {
			t.Fatal(err)
		}
		if n := level(tx); n != 1 {
			t.Errorf("%s: a lazy transaction runs at synchronous=%d, want 1 (NORMAL)", end, n)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (?)`, i); err != nil {
			t.Fatal(err)
		}
		switch end {
		case "commit":
			err = tx.Commit(ctx)
		case "rollback":
			err = tx.Rollback(ctx)
		case "commit, then the deferred rollback":
			if err = tx.Commit(ctx); err == nil {
				err = tx.Rollback(ctx)
			}
		case "cancel":
			cancel()
			if err = tx.Commit(ctx); err == nil {
				t.Fatal("cancel: the commit of a cancelled transaction succeeded")
			}
			err = tx.Rollback(context.Background())
		}
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", end, err)
		}
		durable(end)
		var n int
		if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM t WHERE id = ?`, i).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1, false: 0}[strings.HasPrefix(end, "commit")]; n != want {
			t.Errorf("%s: the row is there %d times, want %d", end, n, want)
		}
	}

	ro, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true, LazyCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := level(ro); n != 2 {
		t.Errorf("a read-only transaction runs at synchronous=%d, want 2", n)
	}
	if err := ro.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	durable("a read-only transaction")
}

// The writer copies its log back into the database only once the log holds
// about 10,000 pages (SQLite's default is 1,000): after 2,500 pages of
// commits the log file holds them all. Its file is cut back to 64 MiB when
// it is rewound.
func TestWriterCheckpointsLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	d, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	db := d.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE b (id INTEGER PRIMARY KEY, v BLOB)`); err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 3000) // one row a page
	for c := range 250 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO b VALUES (?, ?)`, c*10+i, blob); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if pages := st.Size() / 4096; pages < 2500 {
		t.Errorf("the log holds %d pages after 2,500 pages of commits: the writer checkpointed early", pages)
	}
	var limit int64
	if err := db.QueryRowContext(ctx, `PRAGMA journal_size_limit`).Scan(&limit); err != nil {
		t.Fatal(err)
	}
	if limit != 64<<20 {
		t.Errorf("journal_size_limit %d, want %d", limit, 64<<20)
	}
}
