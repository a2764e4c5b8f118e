package postgres

import (
	"context"
	"testing"

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
