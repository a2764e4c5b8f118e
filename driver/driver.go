// Package driver is the storage seam between idem's business packages (the
// keeper, ledger, outbox, inbox) and the databases they run on.
//
// Business packages hold no dialect-specific SQL. They take the caller's
// transaction as a Tx and call a Driver method with a params struct; the
// driver (driver/postgres, driver/sqlite) owns the SQL and maps its errors to
// the sentinels below. The seam is internal and unstable: its methods change
// with the packages that use it. Users touch only Open, the Tx adapters
// (postgres.TxFromPgx, postgres.TxFromStdSQL, sqlite.TxFromStdSQL) and their
// inverses (postgres.PgxFromTx, postgres.StdSQLFromTx, sqlite.StdSQLFromTx),
// CheckTx and the sentinels.
package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors every driver maps its own errors to, so that business code
// never inspects a SQLSTATE or a SQLite result code.
var (
	// ErrNotFound: the row asked for does not exist.
	ErrNotFound = errors.New("idem/driver: not found")
	// ErrUniqueViolation: a unique constraint refused the write.
	ErrUniqueViolation = errors.New("idem/driver: unique violation")
	// ErrUnavailable: the database could not be reached or refused service
	// (connection refused, shutdown, too many connections). Retryable.
	ErrUnavailable = errors.New("idem/driver: database unavailable")
	// ErrLockTimeout: a wait for a row another transaction holds passed its
	// bound. Retryable later; the other transaction is still running.
	ErrLockTimeout = errors.New("idem/driver: lock wait timed out")
	// ErrSerialization: the transaction lost a serialization or deadlock
	// check and was rolled back by the database. Retryable.
	ErrSerialization = errors.New("idem/driver: serialization failure")
	// ErrStatementTimeout: the server canceled a statement that ran
	// longer than its statement_timeout, or on a cancel request (which
	// the driver sends when a statement's context ends), and with it the
	// transaction. One request's slow work may cause it, so a
	// batch that meets it splits and only the slow request fails.
	// Retryable: nothing was committed.
	ErrStatementTimeout = errors.New("idem/driver: statement canceled: it ran past statement_timeout")
	// ErrReadOnlyTransaction: the server refused a write because the
	// transaction is read-only (PostgreSQL's SQLSTATE 25006): one begun
	// READ ONLY, or a session on a server that stopped taking writes
	// after it connected (a primary a failover demoted, or
	// default_transaction_read_only turned on). Nothing was committed. It
	// is not ErrUnavailable and not IsRetryable: on the same connection
	// every write fails alike. The postgres driver closes a connection
	// that meets it while its server reports itself read-only, so the
	// pool's next connection reaches the primary the URL leads to
	// (target_session_attrs) or fails to connect saying so
	// (ErrReadOnlyServer): after a failover, send the request again once
	// the URL leads to the new primary; if it persists, the URL names a
	// standby.
	ErrReadOnlyTransaction = errors.New("idem/driver: the server refused a write: the transaction is read-only")
	// ErrClaimNotFirst: a claim in the caller's own transaction found it
	// unfit: not READ COMMITTED, or it wrote before its first claim (see
	// ClaimGuard). Nothing was claimed; the transaction is to be rolled
	// back.
	ErrClaimNotFirst = errors.New("idem/driver: the claim must come before the transaction's first write, in a READ COMMITTED transaction")
	// ErrTombstoned: a claim found, after its insert, that the key had
	// just become a tombstone (KeyClaim); the transaction must roll back.
	ErrTombstoned = errors.New("idem/driver: key is remembered by its tombstone")
	// ErrImmutable: the database refused an UPDATE or DELETE of an
	// append-only row.
	ErrImmutable = errors.New("idem/driver: row is immutable")
	// ErrReadOnly: the method must lock or write and was given a read-only
	// transaction. Nothing was run: the transaction is still usable.
	ErrReadOnly = errors.New("idem/driver: read-only transaction")
	// ErrNoTx: a method that writes in the caller's transaction was given
	// a nil one.
	ErrNoTx = errors.New("idem/driver: transaction is nil")
	// ErrWrongDialect: a method was given a transaction of another database
	// than its driver's (a SQLite transaction to a keeper on Postgres).
	ErrWrongDialect = errors.New("idem/driver: transaction of another database")
	// ErrUnreplicated: the commit is durable on the server that took it,
	// but the server gave up waiting for the synchronous standbys its
	// configuration requires (PostgreSQL's "canceling wait for synchronous
	// replication" warning, after a deadline or a cancel): a failover may
	// lose it. The transaction is not to be acknowledged as done. It is
	// not IsRetryable (something was committed), but the same keyed
	// request may be sent again: it replays what the server holds, or,
	// after a failover that lost the commit, does the work once.
	ErrUnreplicated = errors.New("idem/driver: commit not confirmed replicated")
	// ErrCommitUnknown: COMMIT was sent and its answer never came (the
	// connection broke, or the context ended, while it was awaited): the
	// transaction may have committed or not, and nobody can tell from
	// here. It is not ErrUnavailable and not IsRetryable, which promise
	// that nothing was committed; like ErrUnreplicated it is not to be
	// acknowledged as done, and a keyed request may be sent again with
	// the same key: it replays what committed, or does the work once.
	ErrCommitUnknown = errors.New("idem/driver: commit outcome unknown: the database's answer was lost")
	// ErrReadOnlyServer: the server takes no writes (a standby, or
	// default_transaction_read_only on), so no connection to it was kept.
	// Always with ErrUnavailable.
	ErrReadOnlyServer = errors.New("idem/driver: the database server is read-only (a standby?)")
	// ErrTooManyConnections: the server or a pooler refused a connection,
	// its limit reached. Always with ErrUnavailable.
	ErrTooManyConnections = errors.New("idem/driver: the database refused a connection: too many connections")
	// ErrPoolerExhausted: a connection pooler between idem and the
	// database (PgBouncer) gave a new connection no server connection in
	// time: its pool is smaller than idem's, and in session mode each
	// client connection keeps one. Always with ErrUnavailable.
	ErrPoolerExhausted = errors.New("idem/driver: the connection pooler has no server connection free for idem")
)

// CheckTx refuses a transaction that d cannot run statements in: a nil one
// (ErrNoTx) or one of another dialect (ErrWrongDialect), which would
// otherwise fail later with an obscure syntax error or a nil dereference.
// Every business package calls it first in each method that takes the
// caller's Tx, so the refusal reads the same everywhere.
func CheckTx(d Driver, tx Tx) error {
	if tx == nil {
		return ErrNoTx
	}
	if got, want := tx.Dialect(), d.Dialect(); got != want {
		return fmt.Errorf("%w: a %s transaction, the driver is on %s", ErrWrongDialect, got, want)
	}
	return nil
}

// IsRetryable reports whether err is a transient database fault after which
// the same work may be tried again: nothing was committed.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLockTimeout) ||
		errors.Is(err, ErrSerialization) || errors.Is(err, ErrStatementTimeout)
}

// Tx is a database transaction as business packages see it: execute, query,
// query one row. A pgx.Tx and a *sql.Tx both adapt to it (postgres.TxFromPgx,
// postgres.TxFromStdSQL, sqlite.TxFromStdSQL), and a transaction a driver
// began unwraps to one (postgres.PgxFromTx, postgres.StdSQLFromTx,
// sqlite.StdSQLFromTx). Packages that take a Tx never
// begin, commit or roll it back: its owner does; they check it first with
// CheckTx.
//
// Errors returned by a Tx, its Rows and its Row are already mapped to the
// sentinels of this package (wrapped, so the original stays reachable).
type Tx interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// Query runs a statement that returns rows. The caller closes them.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// QueryRow runs a statement expected to return at most one row. Scan
	// returns ErrNotFound when it returned none.
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// Dialect names the database the transaction belongs to ("postgres" or
	// "sqlite"), so a driver can refuse a transaction of another dialect.
	Dialect() string
}

// Rows is the result of Tx.Query.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is the result of Tx.QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// Wrapper is a Tx that wraps another (the service's write gate wraps
// the transactions it admits). Drivers look through it with Underlying
// for a transaction of their own, whose fast paths (Postgres sends a
// transaction's statements in one round trip) need it.
type Wrapper interface {
	Unwrap() Tx
}

// DriverWrapper is a driver that wraps another (the service's per-tenant
// write gate). The optional interfaces a driver may add (KeyBatcher,
// KeyReadBatcher, WriterBound) are found through it by Optional: a
// wrapper that hid them would turn every fast path off.
type DriverWrapper interface {
	Unwrap() Driver
}

// Optional returns d as T, an optional interface, looking through every
// DriverWrapper around d.
func Optional[T any](d any) (T, bool) {
	for {
		if t, ok := d.(T); ok {
			return t, true
		}
		w, ok := d.(DriverWrapper)
		if !ok {
			var zero T
			return zero, false
		}
		d = w.Unwrap()
	}
}

// Later marks tx so that the writes that return nothing (LedgerWrite,
// OutboxInsert, OutboxMarkSent) travel with the transaction's next round trip, usually its
// commit's, instead of taking one of their own. Each still answers its own
// error, named ("postgres: ledger write: ..."), from the call that sends
// it. A driver with no round trips to share, or a transaction it did not
// begin, runs them at once. Mark a transaction only where a write's
// failure is an error, never an answer: the caller learns of it later.
func Later(tx Tx) Tx { return laterTx{tx} }

type laterTx struct{ Tx }

func (t laterTx) Unwrap() Tx { return t.Tx }

// IsLater reports whether tx, or a transaction it wraps, was marked by
// Later.
func IsLater(tx Tx) bool {
	for {
		if _, ok := tx.(laterTx); ok {
			return true
		}
		w, ok := tx.(Wrapper)
		if !ok {
			return false
		}
		tx = w.Unwrap()
	}
}

// Underlying is tx with every Wrapper around it removed.
func Underlying(tx Tx) Tx {
	for {
		w, ok := tx.(Wrapper)
		if !ok {
			return tx
		}
		tx = w.Unwrap()
	}
}

// TxCloser is a transaction the driver began for a convenience entry point
// (the keeper's Do, the service). Its owner commits or rolls it back.
type TxCloser interface {
	Tx
	Commit(ctx context.Context) error
	// Rollback is safe to call after Commit; it is then a no-op. It runs
	// even when ctx has ended (on ctx's values, under a short bound of the
	// driver's), since a caller that gave up is the usual reason to roll
	// back: the connection then returns to its pool instead of being
	// destroyed.
	Rollback(ctx context.Context) error
}

// BeginOptions tune a transaction the driver begins.
type BeginOptions struct {
	// LockTimeout bounds how long any statement of the transaction waits for
	// a row lock another transaction holds (Postgres: SET LOCAL lock_timeout).
	// Zero means the driver's default. SQLite serializes writers and ignores
	// it (its busy timeout plays that role).
	LockTimeout time.Duration
	// ReadOnly begins a transaction that writes nothing. SQLite serves it from
	// its reader pool, so it does not queue behind the single writer.
	ReadOnly bool
	// LazyCommit lets the commit return before it is durable: a crash may
	// lose it until a later durable commit on the database, which makes it
	// durable with its own. Only for a transaction whose loss costs no more
	// than its repeat, as the relay's marks of what it published (a lost
	// mark is a republish the broker's deduplication drops; docs/outbox.md).
	// Postgres sets synchronous_commit off for the transaction (a crash of
	// the server may lose it); SQLite runs it with synchronous=NORMAL on the
	// writer, then restores FULL (only a crash of the machine may lose it:
	// the commit has written the log, not flushed it).
	LazyCommit bool
}

// PoolStats is a connection pool's state at one moment. Counters grow for
// the life of the pool; a driver with several pools (SQLite's writer and
// readers) adds them up.
type PoolStats struct {
	// MaxConns bounds the connections the pool may open.
	MaxConns int
	// InUse and Idle are the open connections acquired and waiting.
	InUse, Idle int
	// Waits counts the acquires that found no idle connection and waited
	// for one; WaitTime is the time they spent waiting.
	Waits    int64
	WaitTime time.Duration
	// Unreplicated counts the commits that returned ErrUnreplicated.
	Unreplicated int64
}

// Driver is one database behind idem. Each business area adds its own
// methods through an interface of its own (see keeper.go), so that the areas
// stay apart; Driver embeds them all.
type Driver interface {
	// Dialect is "postgres" or "sqlite".
	Dialect() string
	// Begin starts a read-committed (Postgres) or immediate (SQLite) write
	// transaction, or a read-only one.
	Begin(ctx context.Context, opts BeginOptions) (TxCloser, error)
	// Migrate applies every embedded migration not yet applied, in order,
	// under a lock so concurrent starts do not race. On a schema newer than
	// the binary it does nothing when the binary can still run there
	// (SchemaStatus.TooNew is false) and fails otherwise.
	Migrate(ctx context.Context) error
	// PendingMigrations lists the embedded migrations the database lacks,
	// in order, without applying them.
	PendingMigrations(ctx context.Context) ([]Migration, error)
	// MigrationStatus compares the database's schema with the binary's.
	MigrationStatus(ctx context.Context) (SchemaStatus, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close releases the pool.
	Close() error
	// PoolStats reports the connection pool's state, for metrics.
	PoolStats() PoolStats

	KeeperDriver
	LedgerDriver
	OutboxDriver
	InboxDriver
	InspectDriver
	OutboxInspectDriver
	WebhookOutDriver
	DataKeyDriver
}
