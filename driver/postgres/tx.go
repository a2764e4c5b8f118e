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
type ownedTx struct {
	pgTx
	tx pgx.Tx
}

func (t *ownedTx) Commit(ctx context.Context) error { return mapErr(t.tx.Commit(ctx)) }
func (t *ownedTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return mapErr(err)
}

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
