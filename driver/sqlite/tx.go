package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemhq/idem/driver"
)

// dialect is the name Tx.Dialect reports for SQLite transactions.
const dialect = "sqlite"

// querier is what *sql.Tx and *sql.DB have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// TxFromStdSQL adapts a database/sql transaction on an idem SQLite database
// (begun on Driver.DB, which begins IMMEDIATE transactions) so the keeper,
// the ledger, the outbox and the inbox can write in it. The caller still owns
// the transaction.
func TxFromStdSQL(tx *sql.Tx) driver.Tx { return &sqlTx{q: tx} }

// StdSQLFromTx returns tx as a *sql.Tx, for code written against
// database/sql (sqlc's generated queries) to run in the transaction idem
// handed out: the one idemhttp.Tx returns to a guarded handler, the one the
// keeper's Do passes to its work. Statements sent through it are part of that
// transaction, so they commit with the key and its outcome or roll back with
// them. ok is false when tx is not a SQLite transaction of this package
// (nil, Postgres's, or the reader pool Driver.Reader, which is no
// transaction).
//
// The returned *sql.Tx is valid only while tx is: inside the handler or the
// work. Its owner is tx's owner, never the caller: do not call its Commit or
// Rollback (return an error from the work, or a 5xx from the handler, to roll
// back). For a tx adapted by TxFromStdSQL, the caller's own *sql.Tx is
// returned. Errors are database/sql's and the SQLite driver's own, not
// mapped to the driver's sentinels.
func StdSQLFromTx(tx driver.Tx) (*sql.Tx, bool) {
	switch t := tx.(type) {
	case *sqlTx:
		stx, ok := t.q.(*sql.Tx)
		return stx, ok
	case *ownedTx:
		return t.tx, true
	}
	return nil, false
}

type sqlTx struct{ q querier }

func (t *sqlTx) Dialect() string { return dialect }

func (t *sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, mapErr(err)
	}
	n, err := res.RowsAffected()
	return n, mapErr(err)
}

func (t *sqlTx) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := t.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	return sqlRows{rows}, nil
}

func (t *sqlTx) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return sqlRow{t.q.QueryRowContext(ctx, query, args...)}
}

type sqlRows struct{ rows *sql.Rows }

func (r sqlRows) Next() bool             { return r.rows.Next() }
func (r sqlRows) Scan(dest ...any) error { return mapErr(r.rows.Scan(dest...)) }
func (r sqlRows) Err() error             { return mapErr(r.rows.Err()) }
func (r sqlRows) Close()                 { _ = r.rows.Close() }

type sqlRow struct{ row *sql.Row }

func (r sqlRow) Scan(dest ...any) error { return mapErr(r.row.Scan(dest...)) }

// ownedTx is a transaction the driver began.
type ownedTx struct {
	sqlTx
	tx *sql.Tx
}

func (t *ownedTx) Commit(ctx context.Context) error { return mapErr(t.tx.Commit()) }
func (t *ownedTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return mapErr(err)
}

var _ driver.TxCloser = (*ownedTx)(nil)

// immutableMarker starts the message of idem's RAISE(ABORT, …) triggers.
const immutableMarker = "idem: immutable"

func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", driver.ErrNotFound, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		if errors.Is(err, sql.ErrConnDone) {
			return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
		}
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w: %w", driver.ErrUniqueViolation, err)
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_BUSY_SNAPSHOT, sqlite3.SQLITE_BUSY_TIMEOUT, sqlite3.SQLITE_LOCKED:
		return fmt.Errorf("%w: %w", driver.ErrLockTimeout, err)
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY:
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	if strings.Contains(se.Error(), immutableMarker) {
		return fmt.Errorf("%w: %w", driver.ErrImmutable, err)
	}
	return err
}
