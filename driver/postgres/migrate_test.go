package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	d, version := withMigration(t, "CREATE TABLE u (id int PRIMARY KEY)",
		"LOCK TABLE t IN ACCESS EXCLUSIVE MODE;\nSELECT pg_sleep(0.3);\nALTER TABLE u ADD COLUMN note text;\n")
	req := holding(t, d, `SELECT count(*) FROM u`)
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
		select {
		case err := <-migrated:
			t.Fatalf("migrate ended before it took t: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
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
	if err != nil || st.Applied != version {
		t.Fatalf("status %+v, %v", st, err)
	}
}

// A migration that cannot have its locks within its budget gives up and
// says why; the request that held them was never disturbed.
func TestMigrationGivesUpOnBusyTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, version := withMigration(t, "", "ALTER TABLE t ADD COLUMN note text;")
	d.migrateBudget = 500 * time.Millisecond
	req := holding(t, d, `INSERT INTO t VALUES (1)`)
	var pid int32
	if err := req.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	err := d.Migrate(ctx)
	if err == nil || !errors.Is(err, driver.ErrLockTimeout) || !strings.Contains(err.Error(), "attempts") {
		t.Fatalf("migrate on a table a request holds: %v", err)
	}
	// The operator is told who holds the table, to end that session.
	if holder := fmt.Sprintf("pid %d (", pid); !strings.Contains(err.Error(), holder) || !strings.Contains(err.Error(), "idle in transaction") || !strings.Contains(err.Error(), ") on t") {
		t.Fatalf("the error does not name the request's session (%s…, idle in transaction, on t): %v", holder, err)
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
	if err != nil || st.Applied != version-1 {
		t.Fatalf("status %+v, %v", st, err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("migrate once the request ended: %v", err)
	}
}

// withMigration opens a migrated driver (with table t), runs setup on it
// when not empty, and gives it one more migration to apply, of sql, whose
// version it returns.
func withMigration(t *testing.T, setup, sql string) (*Driver, int) {
	t.Helper()
	ctx := context.Background()
	d := open(t)
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if setup != "" {
		if _, err := d.pool.Exec(ctx, setup); err != nil {
			t.Fatal(err)
		}
	}
	v := len(d.migrations) + 1
	d.migrations = append(d.migrations, driver.Migration{Version: v, Name: "test", CompatibleFrom: v - 1, SQL: sql})
	return d, v
}

// holding begins a transaction that stands for a request, runs stmt in it
// and leaves it open: the locks stmt took stay held until the test ends it.
func holding(t *testing.T, d *Driver, stmt string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, stmt); err != nil {
		t.Fatal(err)
	}
	return tx
}

// lockFirstFrom is the first migration written under the rule that
// TestMigrationsLockFirst checks; older ones ran before it existed.
const lockFirstFrom = 7

// Every migration that changes tables requests write to takes their locks
// in its first statement, so that its bounded wait for them is its only
// one (Migrate): a LOCK TABLE that names each table an ALTER TABLE, a
// trigger or an index of the migration changes, other than the tables the
// migration creates.
func TestMigrationsLockFirst(t *testing.T) {
	t.Parallel()
	ms, err := driver.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	changes := regexp.MustCompile(`(?is)^(?:ALTER TABLE (?:IF EXISTS )?(?:ONLY )?(\w+)|` +
		`CREATE (?:OR REPLACE )?(?:CONSTRAINT )?TRIGGER .*? ON (\w+)|DROP TRIGGER (?:IF EXISTS )?\w+ ON (\w+)|` +
		`CREATE (?:UNIQUE )?INDEX (?:IF NOT EXISTS )?\w+ ON (?:ONLY )?(\w+))`)
	creates := regexp.MustCompile(`(?is)^CREATE TABLE (?:IF NOT EXISTS )?(\w+)`)
	locks := regexp.MustCompile(`(?is)^LOCK (?:TABLE )?(.+?) IN ACCESS EXCLUSIVE MODE;$`)
	for _, m := range ms {
		if m.Version < lockFirstFrom || m.NoTransaction {
			continue
		}
		var stmts []string
		for _, s := range m.Statements() {
			stmts = append(stmts, withoutComments(s))
		}
		created, changed := map[string]bool{}, map[string]bool{}
		for _, s := range stmts {
			if c := creates.FindStringSubmatch(s); c != nil {
				created[strings.ToLower(c[1])] = true
			}
			if c := changes.FindStringSubmatch(s); c != nil {
				if name := strings.ToLower(c[1] + c[2] + c[3] + c[4]); !created[name] {
					changed[name] = true
				}
			}
		}
		if len(changed) == 0 {
			continue
		}
		locked := map[string]bool{}
		if l := locks.FindStringSubmatch(stmts[0]); l != nil {
			for _, name := range strings.Split(l[1], ",") {
				locked[strings.ToLower(strings.TrimSpace(name))] = true
			}
		}
		for name := range changed {
			if !locked[name] {
				t.Errorf("migration %d_%s changes %s but does not lock it first: begin it with LOCK TABLE naming every table it changes, IN ACCESS EXCLUSIVE MODE (docs/operations.md, \"Writing a migration\")", m.Version, m.Name, name)
			}
		}
	}
}

func withoutComments(stmt string) string {
	var keep []string
	for _, line := range strings.Split(stmt, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
