// Package storage opens the database a --db / IDEM_DB value names.
package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
)

// DefaultDir is where the embedded default keeps its data.
const DefaultDir = "idem-data"

// Open opens the database named by dbURL:
//
//	""                         SQLite in ./idem-data/idem.db (the default)
//	postgres://…, postgresql://…   PostgreSQL
//	sqlite:PATH, file:PATH     SQLite at PATH
//
// It does not migrate.
func Open(ctx context.Context, dbURL string) (driver.Driver, error) {
	switch {
	case dbURL == "":
		return sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(DefaultDir, "idem.db")})
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		return postgres.Open(ctx, postgres.Config{URL: dbURL})
	case strings.HasPrefix(dbURL, "sqlite:"), strings.HasPrefix(dbURL, "file:"):
		_, path, _ := strings.Cut(dbURL, ":")
		path = strings.TrimPrefix(path, "//")
		if path == "" {
			return nil, fmt.Errorf("--db %q: no SQLite path", dbURL)
		}
		return sqlite.Open(ctx, sqlite.Config{Path: path})
	default:
		return nil, fmt.Errorf("--db %q: want postgres://…, sqlite:PATH, or nothing for the embedded default", Redact(dbURL))
	}
}

// Redact hides the password of a database URL, for logs and errors.
func Redact(dbURL string) string {
	scheme, rest, ok := strings.Cut(dbURL, "://")
	if !ok {
		return dbURL
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return dbURL
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return dbURL
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// Prepare readies d's schema for a serving process: with migrate it
// applies what is pending, and either way it refuses a schema the binary
// cannot run on (migrations pending, or newer and not compatible). A newer
// schema whose migrations declare this binary compatible is accepted: old
// and new binaries serve side by side during a rolling upgrade.
func Prepare(ctx context.Context, d driver.Driver, migrate bool) error {
	if migrate {
		if err := d.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	st, err := d.MigrationStatus(ctx)
	if err != nil {
		return fmt.Errorf("migration status: %w", err)
	}
	return st.Err()
}
