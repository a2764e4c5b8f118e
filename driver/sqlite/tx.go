package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

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
	switch t := driver.Underlying(tx).(type) {
	case *sqlTx:
		stx, ok := t.q.(*sql.Tx)
		return stx, ok
	case *ownedTx:
		return t.tx, true
	}
	return nil, false
}

// sqlTx runs statements on a transaction or on the reader pool itself.
// With a cache, the hot ones run prepared (stmt.go).
type sqlTx struct {
	q     querier
	tx    *sql.Tx    // q as a transaction; nil for the pool
	cache *stmtCache // nil: every statement is parsed (TxFromStdSQL)

	mu    sync.Mutex         // a *sql.Tx may be shared by goroutines
	stmts map[string]*txStmt // the transaction's prepared statements
}

// stmt returns query's prepared statement and what to call once it is done
// with (after an Exec, when its rows close), or nil: run query parsed.
func (t *sqlTx) stmt(ctx context.Context, query string) (*sql.Stmt, func()) {
	if t.cache == nil {
		return nil, nil
	}
	if t.tx == nil {
		// Each use of a pool's statement takes a connection of its own.
		return t.cache.prepare(ctx, query), func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.stmts[query]
	if ts == nil {
		s := t.cache.get(query)
		if s == nil {
			return nil, nil
		}
		if t.stmts == nil {
			t.stmts = map[string]*txStmt{}
		}
		ts = &txStmt{s: t.tx.StmtContext(ctx, s)}
		t.stmts[query] = ts
	}
	if ts.busy {
		return nil, nil
	}
	ts.busy = true
	var once sync.Once
	return ts.s, func() {
		once.Do(func() {
			t.mu.Lock()
			ts.busy = false
			t.mu.Unlock()
		})
	}
}

func (t *sqlTx) Dialect() string { return dialect }

func (t *sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	var res sql.Result
	var err error
	if s, done := t.stmt(ctx, query); s != nil {
		res, err = s.ExecContext(ctx, args...)
		done()
	} else {
		res, err = t.q.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return 0, mapErr(err)
	}
	n, err := res.RowsAffected()
	return n, mapErr(err)
}

func (t *sqlTx) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	var rows *sql.Rows
	var err error
	s, done := t.stmt(ctx, query)
	if s != nil {
		rows, err = s.QueryContext(ctx, args...)
	} else {
		rows, err = t.q.QueryContext(ctx, query, args...)
	}
	if err != nil {
		if done != nil {
			done()
		}
		return nil, mapErr(err)
	}
	return sqlRows{rows, done}, nil
}

func (t *sqlTx) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	if s, done := t.stmt(ctx, query); s != nil {
		return sqlRow{s.QueryRowContext(ctx, args...), done}
	}
	return sqlRow{t.q.QueryRowContext(ctx, query, args...), nil}
}

// sqlRows and sqlRow call done, when set, once their rows are closed.
type sqlRows struct {
	rows *sql.Rows
	done func()
}

func (r sqlRows) Next() bool             { return r.rows.Next() }
func (r sqlRows) Scan(dest ...any) error { return mapErr(r.rows.Scan(dest...)) }
func (r sqlRows) Err() error             { return mapErr(r.rows.Err()) }
func (r sqlRows) Close() {
	_ = r.rows.Close()
	if r.done != nil {
		r.done()
	}
}

type sqlRow struct {
	row  *sql.Row
	done func()
}

func (r sqlRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...) // closes its rows
	if r.done != nil {
		r.done()
	}
	return mapErr(err)
}

// ownedTx is a transaction the driver began.
type ownedTx struct {
	sqlTx
	// lazy is the writer's connection a LazyCommit transaction holds
	// (Driver.beginLazy), set back to FULL once the transaction ends.
	lazy *sql.Conn
	once sync.Once
}

func (t *ownedTx) Commit(ctx context.Context) error {
	err := t.tx.Commit()
	t.end()
	return mapErr(err)
}

func (t *ownedTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback()
	t.end()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return mapErr(err)
}

func (t *ownedTx) end() {
	if t.lazy != nil {
		t.once.Do(func() { restoreSync(t.lazy) })
	}
}

var _ driver.TxCloser = (*ownedTx)(nil)

// immutableMarker starts the message of idem's RAISE(ABORT, …) triggers.
const immutableMarker = "idem: immutable"

func mapErr(err error) error {
	if m, ok := driver.MapCommon(err, sql.ErrNoRows); ok {
		return m
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
