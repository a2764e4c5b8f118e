package main

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
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/storage"
)

// operatorCommands are every inspection command, redrive included: none of
// them may create a database or migrate one.
var operatorCommands = [][]string{
	{"keys", "get", "order-1042"},
	{"ledger", "balance", "wallet"},
	{"ledger", "verify"},
	{"outbox", "stats"},
	{"outbox", "list", "--dead"},
	{"outbox", "redrive", "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"},
}

// noEnv keeps the developer's own IDEM_DB and IDEM_CONFIG out of the test.
var noEnv = []string{"IDEM_DB=", "IDEM_CONFIG="}

// Run outside a data directory, an operator command says where it looked
// and what to do, exits non-zero, and creates nothing: no idem-data/, no
// empty database to answer from.
func TestOperatorCommandsWithoutDatabase(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, db, want string
	}{
		{"default", "", "idem: no idem database at ./idem-data/idem.db — run where serve ran or pass --db\n"},
		{"sqlite path", "sqlite:elsewhere/idem.db", "idem: no idem database at ./elsewhere/idem.db — run where serve ran or pass --db\n"},
	} {
		for _, args := range operatorCommands {
			t.Run(c.name+"/"+strings.Join(args[:2], " "), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				if c.db != "" {
					args = append(args[:len(args):len(args)], "--db", c.db)
				}
				out, stderr, code := runIdemIn(t, dir, noEnv, args...)
				if code == 0 || stderr != c.want || out != "" {
					t.Errorf("idem %v: exit %d, stdout %q, stderr %q; want stderr %q", args, code, out, stderr, c.want)
				}
				if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
					t.Errorf("idem %v left %v behind (%v)", args, left, err)
				}
				if _, err := os.Stat(filepath.Join(dir, "idem-data")); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("idem %v: idem-data: %v", args, err)
				}
			})
		}
	}
}

// A Postgres database (here a fresh schema) without idem's tables gets a
// sentence, not "relation does not exist", and stays empty.
func TestOperatorCommandsWithoutSchema(t *testing.T) {
	t.Parallel()
	db := drivertest.PostgresURL(t)
	for _, args := range operatorCommands {
		args = append(args[:len(args):len(args)], "--db", db)
		_, stderr, code := runIdem(t, noEnv, args...)
		if code == 0 || !strings.HasPrefix(stderr, "idem: no idem database at postgres://") ||
			!strings.Contains(stderr, "it has no idem tables — pass --db with the URL idem serve uses") {
			t.Errorf("idem %v: exit %d, stderr %q", args[:2], code, stderr)
		}
	}
	ctx := context.Background()
	d, err := storage.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var tables int
	if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("the schema holds %d tables (%v), want none", tables, err)
	}
}

// A database whose schema is older than the binary is named with both
// versions, and left as it was: operator commands never migrate.
func TestOperatorCommandsOnAnOlderSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "idem-data", "idem.db")
	ctx := context.Background()
	d, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	status := func() (applied, latest int) {
		t.Helper()
		st, err := d.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Applied, st.Latest
	}
	_, latest := status()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM idem_migrations WHERE version = ?1`, latest); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	d.Close()
	want := fmt.Sprintf("idem: the idem database at ./idem-data/idem.db has schema version %d, this idem needs %d — "+
		"run idem migrate with this binary (or start its serve, which migrates) first\n", latest-1, latest)
	for _, args := range operatorCommands {
		if _, stderr, code := runIdemIn(t, dir, noEnv, args...); code == 0 || stderr != want {
			t.Errorf("idem %v: exit %d, stderr %q; want %q", args, code, stderr, want)
		}
	}
	if d, err = sqlite.Open(ctx, sqlite.Config{Path: path}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if applied, _ := status(); applied != latest-1 {
		t.Fatalf("the commands migrated the database to %d", applied)
	}
}
