package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver"
)

// querier is what pgx.Tx, *pgxpool.Pool and *pgx.Conn have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
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

// poolTx runs each statement on its own, outside a transaction.
func poolTx(p *pgxpool.Pool) driver.Tx { return &pgTx{q: p} }

// PgxFromTx returns tx as a pgx.Tx, for code written against pgx (sqlc's
// generated queries, CopyFrom, SendBatch) to run in the transaction idem
// handed out: the one idemhttp.Tx returns to a guarded handler, the one the
// keeper's Do passes to its work. Statements sent through it are part of that
// transaction, so they commit with the key and its outcome or roll back with
// them. ok is false when tx is not a Postgres transaction of this package
// (nil, SQLite's, or the pool reader Driver.Reader, which is no transaction).
//
// The returned pgx.Tx is valid only while tx is: inside the handler or the
// work. Its owner is tx's owner, never the caller: Commit and Rollback on it
// return an error and do nothing (return an error from the work, or a 5xx
// from the handler, to roll back). Begin is not supported either (a
// savepoint is a statement away: SAVEPOINT, ROLLBACK TO SAVEPOINT), nor is
// LargeObjects. For a tx adapted by TxFromPgx, the caller's own pgx.Tx is
// returned as it is.
//
// Errors are pgx's own (pgx.ErrNoRows, *pgconn.PgError), not mapped to the
// driver's sentinels: the code using the pgx.Tx was written against pgx.
func PgxFromTx(tx driver.Tx) (pgx.Tx, bool) {
	switch t := driver.Underlying(tx).(type) {
	case *pgTx:
		ptx, ok := t.q.(pgx.Tx)
		return ptx, ok
	case *ownedTx:
		if t.done {
			return nil, false
		}
		return &borrowedTx{t: t}, true
	}
	return nil, false
}

// errNotOwner is what Commit and Rollback of a borrowed transaction return.
var errNotOwner = errors.New("postgres: this transaction is idem's: it commits or rolls back when the work returns")

// borrowedTx is an ownedTx seen as a pgx.Tx (PgxFromTx). Each statement
// first sends the transaction's opening if still unsent, so none runs
// outside the transaction, and then goes to the connection as pgx sends it.
type borrowedTx struct{ t *ownedTx }

// conn returns the transaction's connection once its opening was sent.
func (b *borrowedTx) conn(ctx context.Context) (*pgx.Conn, error) {
	if b.t.done {
		return nil, pgx.ErrTxClosed
	}
	if err := b.t.open(ctx); err != nil {
		return nil, err
	}
	return b.t.conn.Conn(), nil
}

func (b *borrowedTx) Begin(context.Context) (pgx.Tx, error) {
	return nil, errors.New("postgres: Begin on a transaction from PgxFromTx is not supported: use SAVEPOINT")
}

func (b *borrowedTx) Commit(context.Context) error   { return errNotOwner }
func (b *borrowedTx) Rollback(context.Context) error { return errNotOwner }

func (b *borrowedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	c, err := b.conn(ctx)
	if err != nil {
		return 0, err
	}
	return c.CopyFrom(ctx, table, columns, src)
}

func (b *borrowedTx) SendBatch(ctx context.Context, batch *pgx.Batch) pgx.BatchResults {
	c, err := b.conn(ctx)
	if err != nil {
		return errBatch{err}
	}
	return c.SendBatch(ctx, batch)
}

// LargeObjects is not supported: pgx builds them only over its own
// transactions. The zero value it returns fails on first use.
func (b *borrowedTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (b *borrowedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	c, err := b.conn(ctx)
	if err != nil {
		return nil, err
	}
	return c.Prepare(ctx, name, sql)
}

func (b *borrowedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := b.conn(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return c.Exec(ctx, sql, args...)
}

func (b *borrowedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := b.conn(ctx)
	if err != nil {
		return nil, err
	}
	return c.Query(ctx, sql, args...)
}

func (b *borrowedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := b.conn(ctx)
	if err != nil {
		return errRow{err}
	}
	return c.QueryRow(ctx, sql, args...)
}

// Conn is the transaction's connection. Statements sent on it directly,
// before any through the pgx.Tx, run ahead of the transaction's BEGIN when
// that is still pending: send them through the pgx.Tx.
func (b *borrowedTx) Conn() *pgx.Conn { return b.t.conn.Conn() }

var _ pgx.Tx = (*borrowedTx)(nil)

// errBatch is the pgx.BatchResults of a batch never sent.
type errBatch struct{ err error }

func (e errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, e.err }
func (e errBatch) Query() (pgx.Rows, error)         { return nil, e.err }
func (e errBatch) QueryRow() pgx.Row                { return errRow(e) }
func (e errBatch) Close() error                     { return e.err }
func (e errBatch) Tx() pgx.Tx                       { return nil }
