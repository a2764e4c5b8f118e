package sealtest

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/internal/drivertest"
)

// Each runs fn as a parallel subtest per dialect with a fresh migrated
// database, as drivertest.Each does, and the directory of its files: the
// SQLite file's, "" on PostgreSQL.
func Each(t *testing.T, fn func(t *testing.T, d driver.Driver, dir string)) {
	t.Helper()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			if dialect != "sqlite" {
				fn(t, drivertest.Open(t, dialect), "")
				return
			}
			dir := t.TempDir()
			d, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "idem.db")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			if err := d.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			fn(t, d, dir)
		})
	}
}

// Absent fails tb when marker is stored in d, read where it would be at
// rest: on PostgreSQL every row of tables as text (bytea in hex), on
// SQLite the bytes of every file in dir (the database, its WAL). It
// returns how many rows of tables it read on PostgreSQL, so that a test
// can tell it looked at something.
func Absent(tb testing.TB, d driver.Driver, dir, marker string, tables ...string) int {
	tb.Helper()
	if d.Dialect() == "sqlite" {
		files, err := os.ReadDir(dir)
		if err != nil {
			tb.Fatal(err)
		}
		read := 0
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(dir, f.Name()))
			if err != nil {
				tb.Fatal(err)
			}
			read += len(b)
			if bytes.Contains(b, []byte(marker)) {
				tb.Errorf("the plaintext %q is in %s", marker, f.Name())
			}
		}
		if read == 0 {
			tb.Fatalf("no bytes in %s", dir)
		}
		return 0
	}
	hexMarker := hex.EncodeToString([]byte(marker))
	rows := 0
	for _, table := range tables {
		// table is a constant of the test, never input.
		rs, err := d.Reader().Query(context.Background(), "SELECT t::text FROM "+table+" t")
		if err != nil {
			tb.Fatalf("read %s: %v", table, err)
		}
		for rs.Next() {
			var row string
			if err := rs.Scan(&row); err != nil {
				rs.Close()
				tb.Fatal(err)
			}
			rows++
			if strings.Contains(row, marker) || strings.Contains(row, hexMarker) {
				tb.Errorf("the plaintext %q is in a row of %s: %.200s", marker, table, row)
			}
		}
		if err := rs.Err(); err != nil {
			tb.Fatal(err)
		}
		rs.Close()
	}
	return rows
}

// Present is Absent's opposite, for the control half of a test: it fails
// tb unless marker is stored in d, so that Absent is known to look where
// plaintext would be.
func Present(tb testing.TB, d driver.Driver, dir, marker string, tables ...string) {
	tb.Helper()
	probe := &recorder{TB: tb}
	Absent(probe, d, dir, marker, tables...)
	if !probe.failed {
		tb.Fatalf("the plaintext %q is stored nowhere: the check reads the wrong place", marker)
	}
}

// recorder is a testing.TB whose Errorf only records that it was called.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Errorf(string, ...any) { r.failed = true }
