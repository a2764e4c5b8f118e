package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/driver"
)

// stdQuerier is what *sql.Tx, *sql.DB and *sql.Conn have in common.
type stdQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// TxFromStdSQL adapts a database/sql transaction on PostgreSQL (pgx's
// stdlib, github.com/jackc/pgx/v5/stdlib, or lib/pq), so the keeper, the
// ledger, the outbox and the inbox can write in it beside the caller's own
// statements (sqlx, GORM, bun, ent, sqlc): all of it commits or rolls back
// together. The caller still owns the transaction: those packages never
// commit or roll it back. It must be READ COMMITTED, PostgreSQL's default
// (see Driver.Begin). The driver they run on may be opened on a URL, a pgx
// pool or a *sql.DB: only the dialect must match.
//
// A nil tx gives a Tx that driver.CheckTx refuses (driver.ErrNoTx). A *sql.Tx
// of another database (SQLite, MySQL) is refused at its first statement
// with driver.ErrWrongDialect.
//
// Statements run one at a time: database/sql has no pipeline, so a call
// that the pgx path sends in one round trip costs one per statement here.
func TxFromStdSQL(tx *sql.Tx) driver.Tx {
	if tx == nil {
		return nil
	}
	return &stdTx{q: tx, tx: tx}
}

// StdSQLFromTx returns tx as a *sql.Tx, for code written against
// database/sql (sqlx, GORM, bun, ent, sqlc in database/sql mode) to run in
// the transaction idem handed out: the one idemhttp.Tx returns to a guarded
// handler, the one the keeper's Do passes to its work. Statements sent
// through it commit with the key and its outcome or roll back with them.
//
// ok is true for the transactions of a driver opened on a *sql.DB
// (Config.DB) and for a tx adapted by TxFromStdSQL (the caller's own
// *sql.Tx comes back). It is false for a transaction the driver began on a
// pgx pool: database/sql builds a *sql.Tx only over a connection of its
// own pool, so a transaction already open on a pgx connection cannot
// become one. Open the driver on a *sql.DB instead, or begin the
// transaction yourself and pass it in with TxFromStdSQL (Keeper.DoTx).
//
// The returned *sql.Tx is valid only while tx is. Its owner is tx's owner:
// do not call its Commit or Rollback inside the work or the handler
// (return an error from the work, or a 5xx from the handler, to roll back).
// Errors are database/sql's and the SQL driver's own, not mapped.
func StdSQLFromTx(tx driver.Tx) (*sql.Tx, bool) {
	switch t := driver.Underlying(tx).(type) {
	case *stdTx:
		return t.tx, t.tx != nil
	case *stdOwnedTx:
		if t.done {
			return nil, false
		}
		return t.tx, true
	}
	return nil, false
}

// stdTx adapts a database/sql querier to driver.Tx: it converts idem's
// array arguments for drivers that take none (lib/pq) and maps errors to
// the driver's sentinels.
type stdTx struct {
	q  stdQuerier
	tx *sql.Tx // q as a transaction; nil for a *sql.DB

	// probe checks, once, that the database behind q is PostgreSQL, after
	// the first error that carried no SQLSTATE; probeErr is its refusal.
	probe    sync.Once
	probeErr error
}

func (t *stdTx) Dialect() string { return dialect }

func (t *stdTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.q.ExecContext(ctx, query, stdArgs(args)...)
	if err != nil {
		return 0, t.mapErr(ctx, err)
	}
	n, err := res.RowsAffected()
	return n, t.mapErr(ctx, err)
}

func (t *stdTx) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := t.q.QueryContext(ctx, query, stdArgs(args)...)
	if err != nil {
		return nil, t.mapErr(ctx, err)
	}
	return stdRows{rows}, nil
}

func (t *stdTx) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return stdRow{t: t, ctx: ctx, row: t.q.QueryRowContext(ctx, query, stdArgs(args)...)}
}

// mapErr maps err to the driver's sentinels. An error that is no
// PostgreSQL server error, no connection fault and no client-side refusal
// of database/sql's may come from a transaction of another database: the
// first such error checks (once) that the database is PostgreSQL, and
// refuses with driver.ErrWrongDialect if it is not.
func (t *stdTx) mapErr(ctx context.Context, err error) error {
	mapped := mapStdErr(err)
	if mapped == nil || mapped != err || !t.mayBeForeign(err) {
		return mapped
	}
	t.probe.Do(func() {
		var version string
		perr := t.q.QueryRowContext(ctx, sqlServerVersion).Scan(&version)
		switch {
		case perr != nil:
			t.probeErr = fmt.Errorf("%w: the *sql.Tx given to postgres.TxFromStdSQL is not on PostgreSQL (SELECT version(): %v): %w", driver.ErrWrongDialect, perr, err)
		case !strings.HasPrefix(version, "PostgreSQL"):
			t.probeErr = fmt.Errorf("%w: the *sql.Tx given to postgres.TxFromStdSQL is on %q, not PostgreSQL: %w", driver.ErrWrongDialect, version, err)
		}
	})
	if t.probeErr != nil {
		return t.probeErr
	}
	return err
}

// mayBeForeign reports an error that a database other than PostgreSQL
// could have raised.
func (t *stdTx) mayBeForeign(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, sql.ErrTxDone) || errors.Is(err, sql.ErrConnDone) {
		return false
	}
	var coded interface{ SQLState() string }
	return !errors.As(err, &coded)
}

// sqlServerVersion names the server; on PostgreSQL it begins "PostgreSQL".
const sqlServerVersion = `SELECT version()`

type stdRows struct{ rows *sql.Rows }

func (r stdRows) Next() bool             { return r.rows.Next() }
func (r stdRows) Scan(dest ...any) error { return mapStdErr(r.rows.Scan(dest...)) }
func (r stdRows) Err() error             { return mapStdErr(r.rows.Err()) }
func (r stdRows) Close()                 { _ = r.rows.Close() }

type stdRow struct {
	t   *stdTx
	ctx context.Context
	row *sql.Row
}

func (r stdRow) Scan(dest ...any) error { return r.t.mapErr(r.ctx, r.row.Scan(dest...)) }

// stdOwnedTx is a transaction a driver opened on a *sql.DB began; it also
// commits and rolls back.
type stdOwnedTx struct {
	*stdTx
	done bool
}

func (t *stdOwnedTx) Commit(ctx context.Context) error {
	if t.done {
		return mapStdErr(sql.ErrTxDone)
	}
	t.done = true
	return commitErr(t.tx.Commit(), mapStdErr)
}

func (t *stdOwnedTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return mapStdErr(err)
	}
	return nil
}

var _ driver.TxCloser = (*stdOwnedTx)(nil)

// mapStdErr wraps err with the driver sentinel it corresponds to, for
// errors of database/sql and of any PostgreSQL driver under it: both pgx's
// *pgconn.PgError and lib/pq's *pq.Error name their SQLSTATE with a
// SQLState method. The original error stays reachable with errors.As.
func mapStdErr(err error) error {
	if m, ok := driver.MapCommon(err, sql.ErrNoRows); ok {
		return m
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		if s := codeSentinel(coded.SQLState()); s != nil {
			return fmt.Errorf("%w: %w", s, err)
		}
		return err
	}
	var netErr net.Error
	if errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	return mapErr(err) // pgx's own, through its stdlib
}

// codeSentinel is the driver sentinel of a SQLSTATE, or nil.
func codeSentinel(code string) error {
	switch code {
	case codeUniqueViolation:
		return driver.ErrUniqueViolation
	case codeLockNotAvailable:
		return driver.ErrLockTimeout
	case codeSerializationFailure, codeDeadlockDetected:
		return driver.ErrSerialization
	case codeQueryCanceled:
		return driver.ErrStatementTimeout
	case codeReadOnlyTransaction:
		return driver.ErrReadOnlyTransaction
	case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeTooManyConnections:
		return driver.ErrUnavailable
	case codeImmutable:
		return driver.ErrImmutable
	case codeClaimNotFirst:
		return driver.ErrClaimNotFirst
	}
	if strings.HasPrefix(code, "08") { // connection exception class
		return driver.ErrUnavailable
	}
	return nil
}

// stdArgs gives idem's array arguments as PostgreSQL array literals, which
// every database/sql driver on PostgreSQL sends as text for the server to
// cast: lib/pq takes no Go slice, and pgx's stdlib encodes a string in text
// format for any parameter type. Other arguments pass as they are.
func stdArgs(args []any) []any {
	var out []any
	for i, a := range args {
		lit, ok := arrayLiteral(a)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = lit
	}
	if out == nil {
		return args
	}
	return out
}

// arrayLiteral writes a slice argument as a PostgreSQL array literal; a nil
// slice is NULL, as pgx sends it.
func arrayLiteral(a any) (any, bool) {
	switch v := a.(type) {
	case []string:
		if v == nil {
			return nil, true
		}
		return joinArray(len(v), func(b *strings.Builder, i int) { quoteElem(b, v[i]) }), true
	case [][]byte:
		if v == nil {
			return nil, true
		}
		return joinArray(len(v), func(b *strings.Builder, i int) {
			if v[i] == nil {
				b.WriteString("NULL")
				return
			}
			// bytea's hex form, its backslash doubled inside the quotes.
			b.WriteString(`"\\x`)
			const hex = "0123456789abcdef"
			for _, c := range v[i] {
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			}
			b.WriteByte('"')
		}), true
	case []int64:
		if v == nil {
			return nil, true
		}
		return joinArray(len(v), func(b *strings.Builder, i int) { b.WriteString(strconv.FormatInt(v[i], 10)) }), true
	case []int32:
		if v == nil {
			return nil, true
		}
		return joinArray(len(v), func(b *strings.Builder, i int) { b.WriteString(strconv.FormatInt(int64(v[i]), 10)) }), true
	case []int:
		if v == nil {
			return nil, true
		}
		return joinArray(len(v), func(b *strings.Builder, i int) { b.WriteString(strconv.Itoa(v[i])) }), true
	case []bool:
		if v == nil {
			return nil, true
		}
		return joinArray(len(v), func(b *strings.Builder, i int) { b.WriteString(strconv.FormatBool(v[i])) }), true
	case []time.Time:
		if v == nil {
			return nil, true
		}
		return joinArray(len(v), func(b *strings.Builder, i int) {
			b.WriteByte('"')
			b.WriteString(v[i].Format(time.RFC3339Nano))
			b.WriteByte('"')
		}), true
	}
	return nil, false
}

func joinArray(n int, elem func(b *strings.Builder, i int)) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		elem(&b, i)
	}
	b.WriteByte('}')
	return b.String()
}

// quoteElem writes s as a quoted array element: always quoted, so that an
// empty string, NULL, or one with commas, braces or spaces reads back as is.
func quoteElem(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
}
