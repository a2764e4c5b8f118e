package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
)

// StdSQLFromTx hands out the transaction the driver began as its *sql.Tx,
// whose statements commit and roll back with it; the caller's own *sql.Tx
// comes back as it is; the reader pool is no transaction.
func TestStdSQLFromTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "idem.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.DB().ExecContext(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
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
