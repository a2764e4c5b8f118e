// Package drivertest opens real, migrated idem databases for tests: a
// Postgres schema of the test's own (package testpg) and a SQLite file in
// the test's temp dir. Each runs a test body once per driver, so every
// conformance test holds on both.
package drivertest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/internal/testpg"
)

// Dialects are the drivers every conformance test runs on.
var Dialects = []string{"postgres", "sqlite"}

// Each runs fn as a parallel subtest per dialect, with a fresh migrated
// database.
func Each(t *testing.T, fn func(t *testing.T, d driver.Driver)) {
	t.Helper()
	for _, dialect := range Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			fn(t, Open(t, dialect))
		})
	}
}

// Open returns a fresh migrated database of the dialect, closed when tb
// ends.
func Open(tb testing.TB, dialect string) driver.Driver {
	tb.Helper()
	ctx := context.Background()
	var (
		d   driver.Driver
		err error
	)
	switch dialect {
	case "postgres":
		d, err = postgres.Open(ctx, postgres.Config{URL: testpg.URL(tb), SearchPath: testpg.Schema(tb)})
	case "sqlite":
		d, err = sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(tb.TempDir(), "idem.db")})
	default:
		tb.Fatalf("drivertest: unknown dialect %q", dialect)
	}
	if err != nil {
		tb.Fatalf("drivertest: open %s: %v", dialect, err)
	}
	tb.Cleanup(func() { _ = d.Close() })
	if err := d.Migrate(ctx); err != nil {
		tb.Fatalf("drivertest: migrate %s: %v", dialect, err)
	}
	return d
}

// PostgresURL returns a URL whose connections use a fresh schema of tb's,
// for tests that start processes (search_path travels in the URL).
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	return testpg.URL(tb) + "&search_path=" + testpg.Schema(tb)
}
