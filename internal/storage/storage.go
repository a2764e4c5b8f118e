// Package storage opens the database a --db / IDEM_DB value names.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

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
// A SQLite file is created when missing. It does not migrate.
func Open(ctx context.Context, dbURL string) (driver.Driver, error) {
	return OpenServing(ctx, dbURL, Limits{})
}

// Limits bound a serving process's waits on its database (idem serve,
// idem relay). The zero value leaves the drivers' defaults.
type Limits struct {
	// Timeout is PostgreSQL's statement_timeout and
	// idle_in_transaction_session_timeout, and its connections' bound on
	// unacknowledged data and silent idle time (postgres.Config's
	// NetTimeout). The callers' contexts carry the same deadline; SQLite
	// needs nothing more.
	Timeout time.Duration
	// ConnectTimeout bounds the connection attempt to each PostgreSQL host.
	ConnectTimeout time.Duration
	// Logger receives the PostgreSQL driver's reports of commits not
	// replicated.
	Logger *slog.Logger
}

// OpenServing is Open with the waits of a serving process bounded.
func OpenServing(ctx context.Context, dbURL string, lim Limits) (driver.Driver, error) {
	path, pgURL, err := parse(dbURL)
	if err != nil {
		return nil, err
	}
	if pgURL != "" {
		cfg := postgres.Config{URL: pgURL, StatementTimeout: lim.Timeout, IdleInTransactionTimeout: lim.Timeout,
			ConnectTimeout: lim.ConnectTimeout, Logger: lim.Logger}
		if lim.Timeout > 0 {
			cfg.NetTimeout = max(lim.Timeout, time.Second)
		}
		return postgres.Open(ctx, cfg)
	}
	return sqlite.Open(ctx, sqlite.Config{Path: path})
}

// OpenReview opens the database named by dbURL for a review of its
// migrations (idem migrate --dry-run, --print), which changes nothing: a
// SQLite file that does not exist is not created (nor its directory);
// the review then runs on an empty scratch database, removed on Close,
// where every migration is pending. ok is false in that case, so that the
// review can say the database is yet to be made.
func OpenReview(ctx context.Context, dbURL string) (d driver.Driver, ok bool, err error) {
	path, pgURL, err := parse(dbURL)
	if err != nil {
		return nil, false, err
	}
	if pgURL != "" {
		d, err = postgres.Open(ctx, postgres.Config{URL: pgURL})
		return d, err == nil, err
	}
	if _, statErr := os.Stat(path); statErr == nil || !errors.Is(statErr, fs.ErrNotExist) {
		d, err = sqlite.Open(ctx, sqlite.Config{Path: path})
		return d, err == nil, err
	}
	dir, err := os.MkdirTemp("", "idem-review-")
	if err != nil {
		return nil, false, err
	}
	sd, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		os.RemoveAll(dir)
		return nil, false, err
	}
	return &scratch{Driver: sd, dir: dir}, false, nil
}

// scratch is a throwaway SQLite database whose directory goes with it.
type scratch struct {
	driver.Driver
	dir string
}

// Unwrap is the SQLite driver, whose optional interfaces
// (driver.Optional) are the scratch database's.
func (s *scratch) Unwrap() driver.Driver { return s.Driver }

func (s *scratch) Close() error {
	err := s.Driver.Close()
	return errors.Join(err, os.RemoveAll(s.dir))
}

// ErrNoDatabase: there is no idem database where an operator's command was
// pointed (no SQLite file, or a database without idem's tables).
var ErrNoDatabase = errors.New("no idem database")

// ErrSchemaVersion: the database's schema is older or newer than this
// binary's.
var ErrSchemaVersion = errors.New("idem database schema version differs")

// OpenExisting opens the database named by dbURL (read as Open reads it)
// for an operator's command (idem keys, ledger, outbox), which works on
// the database idem serve created and migrated: it never creates a SQLite
// file and never migrates. With readOnly, SQLite is opened read-only
// (mode=ro) and Postgres transactions default to read-only. A database
// that is missing, has no idem schema (ErrNoDatabase) or has another
// schema version than this binary (ErrSchemaVersion) is refused with an
// error that says where it looked and what to do.
func OpenExisting(ctx context.Context, dbURL string, readOnly bool) (driver.Driver, error) {
	path, pgURL, err := parse(dbURL)
	if err != nil {
		return nil, err
	}
	var d driver.Driver
	where, hint := Redact(pgURL), "pass --db with the URL idem serve uses, search_path included"
	if pgURL != "" {
		d, err = postgres.Open(ctx, postgres.Config{URL: pgURL, ReadOnly: readOnly})
	} else {
		where, hint = displayPath(path), "run where serve ran or pass --db"
		if _, statErr := os.Stat(path); errors.Is(statErr, fs.ErrNotExist) {
			return nil, &openError{ErrNoDatabase, fmt.Sprintf("no idem database at %s — %s", where, hint)}
		}
		d, err = sqlite.Open(ctx, sqlite.Config{Path: path, ReadOnly: readOnly})
	}
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, d, where, hint); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// checkSchema refuses a database this binary cannot run on: migrations
// pending (its queries would meet missing tables or indexes; idem serve and
// idem migrate bring it up to date), or a newer schema whose migrations do
// not declare this binary compatible (driver.SchemaStatus).
func checkSchema(ctx context.Context, d driver.Driver, where, hint string) error {
	st, err := d.MigrationStatus(ctx)
	if err != nil {
		return fmt.Errorf("read the schema version at %s: %w", where, err)
	}
	switch {
	case st.Applied == 0:
		return &openError{ErrNoDatabase, fmt.Sprintf("no idem database at %s: it has no idem tables — %s", where, hint)}
	case st.Pending():
		return &openError{ErrSchemaVersion, fmt.Sprintf("the idem database at %s has schema version %d, this idem needs %d — "+
			"run idem migrate with this binary (or start its serve, which migrates) first", where, st.Applied, st.Latest)}
	case st.TooNew():
		return &openError{ErrSchemaVersion, fmt.Sprintf("the idem database at %s has schema version %d, which needs an idem of migration %d or later; this idem has %d — "+
			"use the idem binary that serves it", where, st.Applied, st.Required, st.Latest)}
	}
	return nil
}

// openError is a refusal of OpenExisting: a sentence for the operator,
// classified by one of the sentinels.
type openError struct {
	kind error
	msg  string
}

func (e *openError) Error() string { return e.msg }
func (e *openError) Unwrap() error { return e.kind }

// parse splits dbURL into a SQLite path or a Postgres URL (one is empty).
func parse(dbURL string) (path, pgURL string, err error) {
	switch {
	case dbURL == "":
		return filepath.Join(DefaultDir, "idem.db"), "", nil
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		return "", dbURL, nil
	case strings.HasPrefix(dbURL, "sqlite:"), strings.HasPrefix(dbURL, "file:"):
		_, path, _ := strings.Cut(dbURL, ":")
		path = strings.TrimPrefix(path, "//")
		if path == "" {
			return "", "", fmt.Errorf("--db %q: no SQLite path", dbURL)
		}
		return path, "", nil
	default:
		return "", "", fmt.Errorf("--db %q: want postgres://…, sqlite:PATH, or nothing for the embedded default", Redact(dbURL))
	}
}

// displayPath writes a relative path as ./path, so that a message names the
// place relative to the directory the command ran in.
func displayPath(path string) string {
	if filepath.IsAbs(path) || strings.HasPrefix(path, ".") {
		return path
	}
	return "." + string(filepath.Separator) + path
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
			return fmt.Errorf("apply the pending migrations: %w", err)
		}
	}
	st, err := d.MigrationStatus(ctx)
	if err != nil {
		return fmt.Errorf("migration status: %w", err)
	}
	return st.Err()
}
