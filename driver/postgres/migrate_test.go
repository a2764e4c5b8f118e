package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
)

// A migration marked idem:no-transaction runs its statements one at a time
// outside a transaction, so CREATE INDEX CONCURRENTLY works (inside one it
// is refused), is recorded with its compatibility, and can run again after
// a crash between its statements and its record.
func TestMigrationWithoutTransaction(t *testing.T) {
	ctx := context.Background()
	d := open(t) // migrated, with a table t
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	latest := len(d.migrations)
	d.migrations = append(d.migrations, driver.Migration{
		Version: latest + 1, Name: "t_concurrently", CompatibleFrom: latest, NoTransaction: true,
		SQL: "-- idem:no-transaction\nDROP INDEX CONCURRENTLY IF EXISTS t_by_id;\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_by_id ON t (id);\n",
	})
	check := func() {
		t.Helper()
		if err := d.Migrate(ctx); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		var valid bool
		if err := d.Reader().QueryRow(ctx, `SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass('t_by_id')`).Scan(&valid); err != nil || !valid {
			t.Fatalf("index t_by_id: valid %v, %v", valid, err)
		}
		st, err := d.MigrationStatus(ctx)
		if err != nil || st.Applied != latest+1 || st.Required != latest || !st.Runnable() {
			t.Fatalf("status %+v, %v", st, err)
		}
	}
	check()
	// A crash after the statements, before the record: the next start runs
	// them again.
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM idem_migrations WHERE version = $1`, latest+1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	check()

	// The same statements in a transaction are refused: the mark matters.
	d.migrations = append(d.migrations, driver.Migration{
		Version: latest + 2, Name: "t_in_tx", CompatibleFrom: latest + 2,
		SQL: "CREATE INDEX CONCURRENTLY IF NOT EXISTS t_by_id_again ON t (id);",
	})
	if err := d.Migrate(ctx); err == nil {
		t.Fatal("CREATE INDEX CONCURRENTLY ran inside a transaction")
	}
}

// A migration yields to the requests of processes serving beside it. Here
// it deadlocks with one: it takes table t, a request holding u waits for
// t, and the migration then asks for u. The request waited first, so the
// database would end the request at deadlock_timeout; the migration's own
// wait ends before that, it is rolled back, the request goes on and
// commits, and the migration is applied on its next attempt.
func TestMigrationYieldsToRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.pool.Exec(ctx, `CREATE TABLE u (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	latest := len(d.migrations)
	d.migrations = append(d.migrations, driver.Migration{
		Version: latest + 1, Name: "u_note", CompatibleFrom: latest,
		SQL: "LOCK TABLE t IN ACCESS EXCLUSIVE MODE;\nSELECT pg_sleep(0.3);\nALTER TABLE u ADD COLUMN note text;\n",
	})

	req, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer req.Rollback(ctx) //nolint:errcheck
	if _, err := req.Exec(ctx, `SELECT count(*) FROM u`); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() { migrated <- d.Migrate(ctx) }()
	for {
		var held bool
		if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE relation = 't'::regclass AND mode = 'AccessExclusiveLock' AND granted)`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err := req.Exec(ctx, `SELECT count(*) FROM t`); err != nil {
		t.Fatalf("the request lost to the migration: %v", err)
	}
	if err := req.Commit(ctx); err != nil {
		t.Fatalf("the request's commit: %v", err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var note bool
	if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'u'::regclass AND attname = 'note')`).Scan(&note); err != nil || !note {
		t.Fatalf("column u.note: %v, %v", note, err)
	}
	st, err := d.MigrationStatus(ctx)
	if err != nil || st.Applied != latest+1 {
		t.Fatalf("status %+v, %v", st, err)
	}
}

// A migration that cannot have its locks within its budget gives up and
// says why; the request that held them was never disturbed.
func TestMigrationGivesUpOnBusyTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	d.migrateBudget = 500 * time.Millisecond
	latest := len(d.migrations)
	d.migrations = append(d.migrations, driver.Migration{
		Version: latest + 1, Name: "t_note", CompatibleFrom: latest,
		SQL: "ALTER TABLE t ADD COLUMN note text;",
	})
	req, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer req.Rollback(ctx) //nolint:errcheck
	if _, err := req.Exec(ctx, `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	err = d.Migrate(ctx)
	if err == nil || !errors.Is(err, driver.ErrLockTimeout) || !strings.Contains(err.Error(), "attempts") {
		t.Fatalf("migrate on a table a request holds: %v", err)
	}
	if _, err := req.Exec(ctx, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if err := req.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, d); n != 2 {
		t.Fatalf("%d rows in t, want the request's 2", n)
	}
	st, err := d.MigrationStatus(ctx)
	if err != nil || st.Applied != latest {
		t.Fatalf("status %+v, %v", st, err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("migrate once the request ended: %v", err)
	}
}
