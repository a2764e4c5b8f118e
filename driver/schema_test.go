package driver_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
)

// A newer binary's migrations leave rows this binary does not know. One
// that declares this binary compatible (an expand step) lets it start and
// serve; one that does not stops it with a message naming both versions.
func TestSchemaNewerThanBinary(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		st, err := d.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Required is below Latest when the newest migration is an expand
		// step (compatible-from), never above.
		if !st.Runnable() || st.Applied != st.Latest || st.Required > st.Latest {
			t.Fatalf("fresh schema status %+v", st)
		}
		latest := st.Latest
		record := func(version, compatibleFrom int) {
			t.Helper()
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			sql := `INSERT INTO idem_migrations (version, name, applied_at, compatible_from) VALUES ($1, 'future', now(), $2)`
			if d.Dialect() == "sqlite" {
				sql = `INSERT INTO idem_migrations (version, name, applied_at, compatible_from) VALUES (?1, 'future', 0, ?2)`
			}
			if _, err := tx.Exec(ctx, sql, version, compatibleFrom); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}

		// An expand step this binary may run on.
		record(latest+1, latest)
		if err := d.Migrate(ctx); err != nil {
			t.Fatalf("Migrate on a compatible newer schema: %v", err)
		}
		st, err = d.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Runnable() || st.Applied != latest+1 || st.Required != latest || st.Err() != nil {
			t.Fatalf("compatible newer schema: %+v, %v", st, st.Err())
		}
		if p, err := d.PendingMigrations(ctx); err != nil || len(p) != 0 {
			t.Fatalf("pending on a newer schema: %v, %v", p, err)
		}

		// A step that needs the newer binary.
		record(latest+2, latest+2)
		st, err = d.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.TooNew() || st.Runnable() || st.Required != latest+2 {
			t.Fatalf("incompatible newer schema: %+v", st)
		}
		err = d.Migrate(ctx)
		if err == nil || !strings.Contains(err.Error(), "needs a binary of migration") {
			t.Fatalf("Migrate on an incompatible schema: %v", err)
		}
	})
}

func TestMigrationDirectives(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	ms, err := driver.LoadMigrations(fstest.MapFS{
		"m/001_a.sql": file("CREATE TABLE a (x int);"),
		"m/002_b.sql": file("-- An index.\n--   idem:compatible-from 1\n-- idem:no-transaction\n\n" +
			"DROP INDEX CONCURRENTLY IF EXISTS b;\n-- the index itself\nCREATE INDEX CONCURRENTLY IF NOT EXISTS b\n    ON a (x);\n-- trailing comment\n"),
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].CompatibleFrom != 1 || ms[0].NoTransaction {
		t.Fatalf("plain migration: %+v", ms[0])
	}
	if ms[1].CompatibleFrom != 1 || !ms[1].NoTransaction {
		t.Fatalf("directives not read: %+v", ms[1])
	}
	got := ms[1].Statements()
	want := []string{
		"-- An index.\n--   idem:compatible-from 1\n-- idem:no-transaction\n\nDROP INDEX CONCURRENTLY IF EXISTS b;",
		"-- the index itself\nCREATE INDEX CONCURRENTLY IF NOT EXISTS b\n    ON a (x);",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("statements %q, want %q", got, want)
	}

	for name, body := range map[string]string{
		"future floor":      "-- idem:compatible-from 3\nSELECT 1;",
		"not a number":      "-- idem:compatible-from x\nSELECT 1;",
		"unknown directive": "-- idem:concurrently\nSELECT 1;",
	} {
		_, err := driver.LoadMigrations(fstest.MapFS{"m/001_a.sql": file("SELECT 1;"), "m/002_b.sql": file(body)}, "m")
		if err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}
