package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver"
)

// dialect is the name Tx.Dialect reports for Postgres transactions.
const dialect = "postgres"

// querier is what pgx.Tx, *pgxpool.Pool and *pgx.Conn have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TxFromPgx adapts a pgx transaction the caller began, so the keeper, the
// ledger, the outbox and the inbox can write in it. The caller still owns the
// transaction: those packages never commit or roll it back.
func TxFromPgx(tx pgx.Tx) driver.Tx { return &pgTx{q: tx} }

// pgTx adapts a querier to driver.Tx and maps errors to driver sentinels.
type pgTx struct{ q querier }

func (t *pgTx) Dialect() string { return dialect }

func (t *pgTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := t.q.Exec(ctx, sql, args...)
	if err != nil {
		return 0, mapErr(err)
	}
	return tag.RowsAffected(), nil
}

func (t *pgTx) Query(ctx context.Context, sql string, args ...any) (driver.Rows, error) {
	rows, err := t.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	return pgRows{rows}, nil
}

func (t *pgTx) QueryRow(ctx context.Context, sql string, args ...any) driver.Row {
	return pgRow{t.q.QueryRow(ctx, sql, args...)}
}

type pgRows struct{ pgx.Rows }

func (r pgRows) Scan(dest ...any) error { return mapErr(r.Rows.Scan(dest...)) }
func (r pgRows) Err() error             { return mapErr(r.Rows.Err()) }

type pgRow struct{ row pgx.Row }

func (r pgRow) Scan(dest ...any) error { return mapErr(r.row.Scan(dest...)) }

// ownedTx is a transaction the driver began; it also commits and rolls back.
//
// Its BEGIN is not sent alone: it travels in one round trip (a pipelined
// batch) with the transaction's first statement, which saves a round trip
// on every transaction — a sixth of a keeper first arrival's. The
// connection is the transaction's until Commit or Rollback returns it to the
// pool; the pool destroys a connection it gets back inside a transaction.
type ownedTx struct {
	conn    *pgxpool.Conn
	begin   []string // the statements that open the transaction, until sent
	pending bool     // begin not yet sent
	begun   bool     // the server holds the transaction open
	done    bool
}

func (t *ownedTx) Dialect() string { return dialect }

// sendFirst sends the opening statements and sql in one batch, reads the
// opening statements' results, and returns the batch for sql's result.
func (t *ownedTx) sendFirst(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	for _, stmt := range t.begin {
		b.Queue(stmt)
	}
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	t.pending = false
	for range t.begin {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, mapErr(err)
		}
		t.begun = true
	}
	return br, nil
}

func (t *ownedTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if !t.pending {
		tag, err := t.conn.Exec(ctx, sql, args...)
		if err != nil {
			return 0, mapErr(err)
		}
		return tag.RowsAffected(), nil
	}
	br, err := t.sendFirst(ctx, sql, args)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, mapErr(err)
	}
	return tag.RowsAffected(), nil
}

func (t *ownedTx) Query(ctx context.Context, sql string, args ...any) (driver.Rows, error) {
	if !t.pending {
		rows, err := t.conn.Query(ctx, sql, args...)
		if err != nil {
			return nil, mapErr(err)
		}
		return pgRows{rows}, nil
	}
	br, err := t.sendFirst(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, mapErr(err)
	}
	return batchRows{pgRows{rows}, br}, nil
}

func (t *ownedTx) QueryRow(ctx context.Context, sql string, args ...any) driver.Row {
	if !t.pending {
		return pgRow{t.conn.QueryRow(ctx, sql, args...)}
	}
	br, err := t.sendFirst(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br.QueryRow(), br}
}

func (t *ownedTx) Commit(ctx context.Context) error {
	if t.done {
		return mapErr(pgx.ErrTxClosed)
	}
	t.done = true
	defer t.conn.Release()
	if !t.begun {
		return nil // no statement was sent: there is nothing to commit
	}
	tag, err := t.conn.Exec(ctx, "COMMIT")
	if err != nil {
		return mapErr(err)
	}
	if tag.String() == "ROLLBACK" { // a statement failed and aborted it
		return mapErr(pgx.ErrTxCommitRollback)
	}
	return nil
}

func (t *ownedTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	defer t.conn.Release()
	if !t.begun {
		return nil
	}
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return mapErr(err)
}

// batchRows closes the batch its rows came from with them.
type batchRows struct {
	pgRows
	br pgx.BatchResults
}

func (r batchRows) Close() {
	r.pgRows.Close()
	_ = r.br.Close()
}

// batchRow closes the batch its row came from once scanned.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return mapErr(err)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

var _ driver.TxCloser = (*ownedTx)(nil)

// poolTx runs each statement on its own, outside a transaction.
func poolTx(p *pgxpool.Pool) driver.Tx { return &pgTx{q: p} }

// SQLSTATE codes this driver maps. See the PostgreSQL manual, appendix A.
const (
	codeUniqueViolation      = "23505"
	codeLockNotAvailable     = "55P03"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
	codeTooManyConnections   = "53300"
	codeReadOnlyTransaction  = "25006"
	// codeImmutable is raised by idem's triggers on append-only tables.
	codeImmutable = "IDM01"
)

// mapErr wraps err with the driver sentinel it corresponds to. The original
// error stays reachable with errors.As.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", driver.ErrNotFound, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeUniqueViolation:
			return fmt.Errorf("%w: %w", driver.ErrUniqueViolation, err)
		case codeLockNotAvailable:
			return fmt.Errorf("%w: %w", driver.ErrLockTimeout, err)
		case codeSerializationFailure, codeDeadlockDetected:
			return fmt.Errorf("%w: %w", driver.ErrSerialization, err)
		case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeTooManyConnections, codeReadOnlyTransaction:
			return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
		case codeImmutable:
			return fmt.Errorf("%w: %w", driver.ErrImmutable, err)
		}
		if len(pgErr.Code) == 5 && pgErr.Code[:2] == "08" { // connection exception class
			return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
		}
		return err
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	return err
}
