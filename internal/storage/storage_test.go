package storage_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/storage"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }

// leakChecked fails a passing run that left goroutines behind.
// place is a database URL of the dialect that names nothing yet: a SQLite
// path in a directory that does not exist, or a fresh Postgres schema.
func place(t *testing.T, dialect string) (dbURL, dir string) {
	t.Helper()
	if dialect == "postgres" {
		return drivertest.PostgresURL(t), ""
	}
	dir = filepath.Join(t.TempDir(), "idem-data")
	return "sqlite:" + filepath.Join(dir, "idem.db"), dir
}

func create(t *testing.T, dbURL string, migrate bool) {
	t.Helper()
	ctx := context.Background()
	d, err := storage.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if migrate {
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// exec runs one statement in a committed transaction of d.
func exec(t *testing.T, d driver.Driver, sql string, args ...any) error {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// setVersion makes the recorded schema version applied+delta.
func setVersion(t *testing.T, dbURL string, delta int) {
	t.Helper()
	ctx := context.Background()
	d, err := storage.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, err := d.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	latest := st.Latest
	sql := `DELETE FROM idem_migrations WHERE version = $1`
	if delta > 0 {
		sql = `INSERT INTO idem_migrations (version, name, applied_at) VALUES ($1 + 1, 'from_the_future', ` + map[string]string{
			"postgres": "now()", "sqlite": "0"}[d.Dialect()] + `)`
	}
	if d.Dialect() == "sqlite" {
		sql = strings.ReplaceAll(sql, "$1", "?1")
	}
	if err := exec(t, d, sql, latest); err != nil {
		t.Fatal(err)
	}
}

// OpenExisting, for operator commands, never creates or migrates a
// database, and refuses one it cannot answer from with a sentence.
func TestOpenExisting(t *testing.T) {
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			for _, c := range []struct {
				name    string
				prepare func(t *testing.T, dbURL string)
				want    error
				text    string
			}{
				{"nothing there", func(*testing.T, string) {}, storage.ErrNoDatabase, "no idem database at "},
				{"no idem tables", func(t *testing.T, u string) { create(t, u, false) }, storage.ErrNoDatabase, ": it has no idem tables — "},
				{"older schema", func(t *testing.T, u string) { create(t, u, true); setVersion(t, u, -1) }, storage.ErrSchemaVersion, ", this idem needs "},
				{"newer schema", func(t *testing.T, u string) { create(t, u, true); setVersion(t, u, +1) }, storage.ErrSchemaVersion, ", which needs an idem of migration "},
			} {
				t.Run(c.name, func(t *testing.T) {
					dbURL, dir := place(t, dialect)
					c.prepare(t, dbURL)
					for _, readOnly := range []bool{true, false} {
						d, err := storage.OpenExisting(ctx, dbURL, readOnly)
						if err == nil {
							d.Close()
						}
						if !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), c.text) {
							t.Errorf("read-only %t: %v, want %v saying %q", readOnly, err, c.want, c.text)
						}
					}
					if c.name == "nothing there" && dir != "" {
						if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
							t.Errorf("%s: %v, want nothing created", dir, err)
						}
					}
				})
			}
			t.Run("current", func(t *testing.T) {
				dbURL, _ := place(t, dialect)
				create(t, dbURL, true)
				d, err := storage.OpenExisting(ctx, dbURL, true)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if err := exec(t, d, `DELETE FROM idem_inbox`); err == nil {
					t.Error("a read-only open wrote")
				}
				w, err := storage.OpenExisting(ctx, dbURL, false)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if err := exec(t, w, `DELETE FROM idem_inbox`); err != nil {
					t.Errorf("a read-write open could not write: %v", err)
				}
			})
		})
	}
}
