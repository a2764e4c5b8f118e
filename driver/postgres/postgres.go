// Package postgres is idem's PostgreSQL driver, on a pgx/v5 pool. It is the
// production store: many idem processes may share one database, and the
// database's unique constraints and row locks decide every race between them.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Config configures Open. Exactly one of URL, Pool and DB names the
// database.
type Config struct {
	// URL is a postgres:// connection string: Open builds a pgx pool on it
	// and Close closes that pool.
	URL string
	// Pool is a pgx pool the caller built (RDS IAM auth, a Cloud SQL
	// connector, otelpgx) and owns: Close leaves it open. MaxConns,
	// SearchPath, ReadOnly, StatementTimeout and IdleInTransactionTimeout
	// must be unset (the pool's own config decides; an unreplicated commit
	// is detected only on pools Open builds), and LockTimeout is set in each transaction idem begins instead of as
	// a session default.
	Pool *pgxpool.Pool
	// DB is a database/sql pool on PostgreSQL (pgx's stdlib or lib/pq) the
	// caller built and owns: Close leaves it open. Every transaction idem
	// begins is then a *sql.Tx, which StdSQLFromTx hands to the caller's
	// own code (sqlx, GORM, bun, ent, sqlc). Statements run one at a time
	// (database/sql has no pipeline), and Migrate needs pgx's stdlib under
	// it. The same fields as for Pool must be unset.
	DB *sql.DB
	// MaxConns bounds the pool. Default 16, or the URL's pool_max_conns
	// when it names one; bound 1..1000. Durable commits wait on the disk, so
	// throughput grows with the commits in flight (group commit): pgx's own
	// default of 4 leaves most of it unused.
	MaxConns int32
	// LockTimeout is the default bound on any wait for a row lock held by
	// another transaction (Postgres lock_timeout). Default 5s; bound
	// 1ms..10m. Begin may set a different one per transaction.
	LockTimeout time.Duration
	// SearchPath, when set, is the schema search path of every connection
	// (tests use a schema each). Default: the server's.
	SearchPath string
	// ReadOnly makes every transaction read-only unless it asks otherwise
	// (default_transaction_read_only), for operator commands that must
	// not write. Default false.
	ReadOnly bool
	// StatementTimeout bounds each statement on the server
	// (statement_timeout). The server does not apply it to a commit's wait
	// for synchronous standbys: the caller's context bounds that one (the
	// driver asks the server to cancel when the context ends). Default 0:
	// the server's setting (or the URL's options); bound 0 or 1ms..1h.
	// Migrate's statements are exempt.
	StatementTimeout time.Duration
	// IdleInTransactionTimeout ends a session whose transaction waits on
	// its client longer than this (idle_in_transaction_session_timeout):
	// a client cut off by a network that drops instead of refusing leaves
	// no transaction holding its locks (a key's claim) behind. Default 0:
	// the server's setting; bound 0 or 1ms..1h.
	IdleInTransactionTimeout time.Duration
	// ConnectTimeout bounds a connection attempt to each host of the URL,
	// after which the next host is tried. Default 10s, or the URL's
	// connect_timeout when it names one; bound 1ms..10m.
	ConnectTimeout time.Duration
	// NetTimeout is how long a connection may go without a sign of life
	// from the server before the kernel breaks it: data sent and not
	// acknowledged (TCP_USER_TIMEOUT, on Linux), or, idle, no answer to
	// TCP keepalives sent every NetTimeout/4. Default 30s; bound 1s..1h.
	NetTimeout time.Duration
	// Logger receives one error line per commit the server reported as
	// not replicated (ErrUnreplicated). Default slog.Default().
	Logger *slog.Logger
	// Pooler is PoolerTransaction when a pooler that shares server
	// connections between clients' transactions stands between idem and
	// PostgreSQL (PgBouncer with pool_mode = transaction; a pooler in
	// session mode works with it too): idem then keeps no state in a
	// session (see pooler), and every setting above still holds. The URL's
	// idem_pooler=transaction sets it too. Default "": a direct connection,
	// or a pooler in session mode. Only for a pool Open builds from URL.
	Pooler string
}

func (c Config) withDefaults() Config {
	if c.LockTimeout == 0 {
		c.LockTimeout = 5 * time.Second
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.NetTimeout == 0 {
		c.NetTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	named := 0
	for _, set := range []bool{c.URL != "", c.Pool != nil, c.DB != nil} {
		if set {
			named++
		}
	}
	switch {
	case named == 0:
		return errors.New("postgres: URL is required (or a Pool or DB of your own)")
	case named > 1:
		return errors.New("postgres: set one of URL, Pool and DB")
	case c.URL == "" && (c.MaxConns != 0 || c.SearchPath != "" || c.ReadOnly):
		return errors.New("postgres: MaxConns, SearchPath and ReadOnly configure a pool Open builds from URL; set them on your own Pool or DB")
	case c.Pooler != "" && c.Pooler != PoolerTransaction:
		return fmt.Errorf("postgres: Pooler %q: want %q or nothing", c.Pooler, PoolerTransaction)
	case c.URL == "" && c.Pooler != "":
		return errors.New("postgres: Pooler configures a pool Open builds from URL")
	case c.URL == "" && (c.StatementTimeout != 0 || c.IdleInTransactionTimeout != 0):
		return errors.New("postgres: StatementTimeout and IdleInTransactionTimeout configure a pool Open builds from URL; set statement_timeout and idle_in_transaction_session_timeout on your own Pool or DB")
	}
	if c.MaxConns < 0 || c.MaxConns > 1000 {
		return fmt.Errorf("postgres: MaxConns %d is outside 1..1000", c.MaxConns)
	}
	if c.LockTimeout < time.Millisecond || c.LockTimeout > 10*time.Minute {
		return fmt.Errorf("postgres: LockTimeout %s is outside 1ms..10m", c.LockTimeout)
	}
	return c.validateLimits()
}

const defaultMaxConns = 16

// Driver is the PostgreSQL implementation of driver.Driver.
type Driver struct {
	pool *pgxpool.Pool // nil when opened on a DB
	db   *sql.DB       // set when opened on a DB
	// callers: the pool or DB is the caller's (Config.Pool, Config.DB), so
	// Close leaves it open and lock_timeout, which is no session default of
	// its connections, is set in each transaction.
	callers       bool
	lockTimeout   time.Duration
	migrations    []driver.Migration
	migrateBudget time.Duration // migrationLockBudget; shorter in tests
	replication   *replicationWatch
	// pooler is set behind a transaction pooler. connConfig is the
	// pool's when the driver built it, for the connections of its own a
	// migration takes (its lock behind a pooler, its statements else).
	pooler     *pooler
	connConfig *pgx.ConnConfig
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.KeyBatcher     = (*Driver)(nil)
	_ driver.KeyReadBatcher = (*Driver)(nil)
)

// Open connects a pool, or adopts the caller's (Config.Pool, Config.DB).
// It does not migrate: call Migrate.
func Open(ctx context.Context, cfg Config) (*Driver, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ms, err := driver.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	if cfg.Pool != nil || cfg.DB != nil {
		return &Driver{pool: cfg.Pool, db: cfg.DB, callers: true, lockTimeout: cfg.LockTimeout, migrations: ms, migrateBudget: migrationLockBudget}, nil
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse URL: %w", err)
	}
	if v, ok := pcfg.ConnConfig.RuntimeParams[PoolerParam]; ok {
		delete(pcfg.ConnConfig.RuntimeParams, PoolerParam)
		if cfg.Pooler == "" {
			cfg.Pooler = v
		}
		if err := cfg.validate(); err != nil {
			return nil, fmt.Errorf("%w (the URL's %s)", err, PoolerParam)
		}
	}
	switch {
	case cfg.MaxConns > 0:
		pcfg.MaxConns = cfg.MaxConns
	case !strings.Contains(cfg.URL, "pool_max_conns"):
		pcfg.MaxConns = defaultMaxConns
	}
	// lock_timeout as a session default bounds every lock wait, including
	// ones outside the keeper, without a round trip per transaction.
	pcfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(cfg.LockTimeout.Milliseconds(), 10)
	if cfg.SearchPath != "" {
		pcfg.ConnConfig.RuntimeParams["search_path"] = cfg.SearchPath
	}
	if cfg.ReadOnly {
		pcfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	watch := applyLimits(pcfg, cfg)
	var pooled *pooler
	if cfg.Pooler == PoolerTransaction {
		pooled = newPooler(pcfg, cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, mapErr(err)
	}
	return &Driver{pool: pool, lockTimeout: cfg.LockTimeout, migrations: ms, migrateBudget: migrationLockBudget,
		replication: watch, pooler: pooled, connConfig: pcfg.ConnConfig}, nil
}

// Pool is the underlying pgx pool, for users who begin their own
// transactions and pass them in with TxFromPgx; nil for a driver opened on
// a DB.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// DB is the database/sql pool the driver was opened on (Config.DB), or nil.
func (d *Driver) DB() *sql.DB { return d.db }

func (d *Driver) Dialect() string { return dialect }

func (d *Driver) Reader() driver.Tx {
	if d.db != nil {
		return &stdTx{q: d.db}
	}
	if d.pooler != nil {
		return d.pooler.reader(d.pool)
	}
	return poolTx(d.pool)
}

func (d *Driver) Ping(ctx context.Context) error {
	if d.db != nil {
		return mapStdErr(d.db.PingContext(ctx))
	}
	if err := d.poolerCheck(ctx); err != nil {
		return err
	}
	return mapErr(d.pool.Ping(ctx))
}

// Close closes the pool Open built from a URL. A pool or DB of the
// caller's stays open: its owner closes it.
func (d *Driver) Close() error {
	if !d.callers {
		d.pool.Close()
	}
	return nil
}

// Begin starts a READ COMMITTED transaction. Under REPEATABLE READ or
// SERIALIZABLE a key claim that meets a concurrent twin raises a
// serialization error instead of waiting for the twin's outcome, so the
// isolation level is part of the keeper's contract, not a tuning knob.
func (d *Driver) Begin(ctx context.Context, opts driver.BeginOptions) (driver.TxCloser, error) {
	var set settings
	var args []any
	lockTimeout := opts.LockTimeout
	if lockTimeout == 0 && d.callers {
		// A pool of the caller's has no session default of idem's.
		lockTimeout = d.lockTimeout
	}
	if lockTimeout > 0 && (lockTimeout != d.lockTimeout || d.callers || d.pooler != nil) {
		// A parameter, not a value in the text: every text is a statement
		// pgx prepares (a round trip of its own) and caches per connection.
		set |= setLockTimeout
		args = []any{strconv.FormatInt(max(lockTimeout.Milliseconds(), 1), 10)}
	}
	if opts.LazyCommit {
		set |= setLazyCommit
	}
	if d.db != nil {
		return d.beginStd(ctx, opts.ReadOnly, set, args)
	}
	begin := "BEGIN ISOLATION LEVEL READ COMMITTED"
	if opts.ReadOnly || (d.pooler != nil && d.pooler.readOnly) {
		begin += " READ ONLY"
	}
	stmts := []queuedStmt{{sql: begin}}
	switch {
	case d.pooler != nil:
		// Every session setting, in the statement that follows BEGIN.
		sql, lock := d.pooler.opening, ""
		if set&setLazyCommit != 0 {
			sql = d.pooler.lazy
		}
		if set&setLockTimeout != 0 {
			lock = args[0].(string)
		}
		stmts = append(stmts, queuedStmt{sql: sql, args: d.pooler.args(lock)})
	case set != 0:
		stmts = append(stmts, queuedStmt{sql: settingsSQL[set], args: args})
	}
	tx, err := d.beginWith(ctx, stmts...)
	if err != nil {
		return nil, err // not a nil *ownedTx in a non-nil interface
	}
	return tx, nil
}

// settings are a transaction's own settings, applied by one statement (each
// statement costs the server more than its work here).
type settings uint8

const (
	setLockTimeout settings = 1 << iota // lock_timeout, $1 in milliseconds
	setLazyCommit                       // synchronous_commit off: the commit returns before its log record is flushed
)

// settingsSQL is the statement for each combination of settings but none.
var settingsSQL = func() (sql [4]string) {
	for set := settings(1); int(set) < len(sql); set++ {
		var calls []string
		if set&setLockTimeout != 0 {
			calls = append(calls, `set_config('lock_timeout', $1, true)`)
		}
		if set&setLazyCommit != 0 {
			calls = append(calls, `set_config('synchronous_commit', 'off', true)`)
		}
		sql[set] = "SELECT " + strings.Join(calls, ", ")
	}
	return sql
}()

// beginStd begins a *sql.Tx on the driver's DB and applies its settings,
// a round trip of their own: database/sql sends BEGIN alone.
func (d *Driver) beginStd(ctx context.Context, readOnly bool, set settings, args []any) (driver.TxCloser, error) {
	stx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: readOnly})
	if err != nil {
		return nil, fmt.Errorf("postgres: begin: %w", mapStdErr(err))
	}
	tx := &stdOwnedTx{stdTx: &stdTx{q: stx, tx: stx}}
	if set != 0 {
		if _, err := tx.Exec(ctx, settingsSQL[set], args...); err != nil {
			_ = stx.Rollback()
			return nil, fmt.Errorf("postgres: begin: %w", err)
		}
	}
	return tx, nil
}

// beginWith takes a connection for a transaction that the statements open,
// sent with its first statement.
func (d *Driver) beginWith(ctx context.Context, stmts ...queuedStmt) (*ownedTx, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	return &ownedTx{conn: conn, opening: stmts}, nil
}

// Migrate applies pending migrations on one connection that holds a
// session advisory lock scoped to the current schema, so that concurrent
// starts queue (and a crashed migrator's lock ends with its session). Each
// migration commits with its record in one transaction, except those marked
// idem:no-transaction, whose statements run alone (CREATE INDEX
// CONCURRENTLY) before the record is written.
//
// Serving processes keep writing while a migration runs (a rolling
// upgrade), so a migration yields to them: each of its lock waits is short
// (migrationLockWait, and under half the server's deadlock_timeout), and a
// migration whose wait runs out, or that deadlocks with a request, is
// rolled back and tried again a moment later, for up to
// migrationLockBudget. A request queues behind a migration's lock request
// for that short wait at most, and in a deadlock between the two it is the
// migration that gives up: its wait ends before the database looks for
// deadlocks, as long as it asks for its next lock soon after taking the
// previous one (a migration on busy tables takes them all in its first
// statement, LOCK TABLE, in one order).
func (d *Driver) Migrate(ctx context.Context) error {
	if d.db != nil {
		conn, err := d.db.Conn(ctx)
		if err != nil {
			return mapStdErr(err)
		}
		defer conn.Close()
		return conn.Raw(func(dc any) error {
			pc, ok := dc.(interface{ Conn() *pgx.Conn })
			if !ok {
				return fmt.Errorf("postgres: Migrate on a DB needs pgx's stdlib under it, not %T: run `idem migrate` or open a driver on the URL to migrate", dc)
			}
			return d.migrateLifted(ctx, pc.Conn())
		})
	}
	if d.pooler != nil {
		unlock, err := d.lockMigrations(ctx)
		if err != nil {
			return err
		}
		defer unlock()
	} else if d.connConfig != nil {
		// A pool of the driver's own: the migration runs on a connection
		// that starts unbounded, so that no statement of it, not even the
		// one lifting the bounds, runs under StatementTimeout.
		cc := d.connConfig.Copy()
		maps.Copy(cc.RuntimeParams, migrationSettings)
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return mapErr(err)
		}
		defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // the migration's error matters
		return d.migrateOn(ctx, conn)
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return mapErr(err)
	}
	defer conn.Release()
	if d.pooler != nil {
		return d.migrateOn(ctx, conn.Conn())
	}
	return d.migrateLifted(ctx, conn.Conn())
}

// migrateLifted is migrateOn on a connection of the caller's pool or DB,
// with its serving deadlines lifted for the migration's duration.
func (d *Driver) migrateLifted(ctx context.Context, conn *pgx.Conn) error {
	if err := unbounded(ctx, conn); err != nil {
		return err
	}
	defer restoreBounds(ctx, conn)
	return d.migrateOn(ctx, conn)
}

// migrateOn is Migrate on one connection whose serving deadlines are
// lifted. Behind a pooler the lock is held already (lockMigrations) and
// each statement carries its settings.
func (d *Driver) migrateOn(ctx context.Context, conn *pgx.Conn) error {
	var q querier = conn
	if d.pooler != nil {
		q = settingQuerier{q: conn, sql: d.pooler.opening, args: d.pooler.with(migrationSettings)}
	} else {
		if _, err := conn.Exec(ctx, sqlMigrateLock); err != nil {
			return fmt.Errorf("postgres: migration lock: %w", mapErr(err))
		}
		defer func() {
			// A connection whose unlock failed must not return to the pool
			// still holding the lock.
			if _, err := conn.Exec(context.WithoutCancel(ctx), sqlMigrateUnlock); err != nil {
				_ = conn.Close(context.WithoutCancel(ctx))
			}
		}()
	}
	// One statement at a time: behind a pooler each travels with the
	// settings in a pipeline, which takes one statement per message.
	for _, stmt := range sqlMigrationsTable {
		if _, err := q.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("postgres: migrations table: %w", mapErr(err))
		}
	}
	st, err := d.status(ctx, &pgTx{q: q})
	if err != nil {
		return err
	}
	if st.TooNew() {
		return fmt.Errorf("postgres: %w", st.Err())
	}
	pending := driver.PendingOf(d.migrations, st)
	if len(pending) == 0 {
		return nil
	}
	var deadlockMS int64
	if err := q.QueryRow(ctx, sqlDeadlockTimeout).Scan(&deadlockMS); err != nil {
		return fmt.Errorf("postgres: read deadlock_timeout: %w", mapErr(err))
	}
	wait := min(migrationLockWait, time.Duration(deadlockMS)*time.Millisecond/2)
	for _, m := range pending {
		if err := d.applyMigration(ctx, conn, m, wait); err != nil {
			return fmt.Errorf("postgres: migration %d_%s: %w", m.Version, m.Name, mapErr(err))
		}
	}
	return nil
}

const (
	// migrationLockWait bounds each lock wait of a migration (see Migrate).
	migrationLockWait = 200 * time.Millisecond
	// migrationLockBudget is how long a migration is tried again while
	// requests hold the locks it needs.
	migrationLockBudget = time.Minute
)

func (d *Driver) applyMigration(ctx context.Context, conn *pgx.Conn, m driver.Migration, wait time.Duration) error {
	var opening *queuedStmt
	var q querier = conn
	if d.pooler != nil {
		opening = &queuedStmt{sql: d.pooler.opening, args: d.pooler.with(migrationSettings)}
		q = settingQuerier{q: conn, sql: opening.sql, args: opening.args}
	}
	if m.NoTransaction {
		// No setting can travel with a statement that must run alone (not
		// even in a pipeline): behind a pooler it runs with the server's.
		if d.pooler != nil && d.pooler.hasSetting("search_path") {
			return errPoolerSearchPath
		}
		for _, stmt := range m.Statements() {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		_, err := q.Exec(ctx, sqlMigrationInsert, m.Version, m.Name, m.CompatibleFrom)
		return err
	}
	start := time.Now()
	pause := 25 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := applyInTx(ctx, conn, opening, m, wait)
		if err == nil || !lockLost(err) {
			return err
		}
		if time.Since(start) > d.migrateBudget {
			return fmt.Errorf("requests held the locks it needs through %d attempts over %s, each waiting %s at most; try again when the tables are less busy%s: %w",
				attempt, time.Since(start).Round(time.Second), wait, lockHolders(ctx, q), err)
		}
		// Jittered, so that two migrators never meet in step.
		select {
		case <-time.After(pause/2 + rand.N(pause/2)):
		case <-ctx.Done():
			return ctx.Err()
		}
		pause = min(2*pause, time.Second)
	}
}

// applyInTx runs a migration and writes its record in one transaction whose
// lock waits end after wait, after opening's settings when set.
func applyInTx(ctx context.Context, conn *pgx.Conn, opening *queuedStmt, m driver.Migration, wait time.Duration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if opening != nil {
		if _, err := tx.Exec(ctx, opening.sql, opening.args...); err != nil {
			return err
		}
	}
	setWait := fmt.Sprintf("SET LOCAL lock_timeout = %d;\n", max(wait.Milliseconds(), 1))
	if _, err := tx.Exec(ctx, setWait+m.SQL); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sqlMigrationInsert, m.Version, m.Name, m.CompatibleFrom); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// lockHolders names, for an operator whose migration gave up, the sessions
// that hold locks on the schema's tables now, the longest-open first: a
// transaction left open (a psql session idle in transaction, a report) is
// what usually keeps a migration out, and its pid is what ends it. It is
// best effort: a failed read names nobody.
func lockHolders(ctx context.Context, conn querier) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	rows, err := conn.Query(ctx, sqlLockHolders)
	if err != nil {
		return ""
	}
	defer rows.Close()
	var (
		held  []string
		total int
	)
	for rows.Next() {
		var (
			pid        int32
			app, state string
			open       float64
			tables     string
		)
		if err := rows.Scan(&pid, &app, &state, &open, &tables, &total); err != nil {
			return ""
		}
		age := time.Duration(open * float64(time.Second))
		if age >= 10*time.Second {
			age = age.Round(time.Second)
		} else {
			age = age.Round(time.Millisecond)
		}
		held = append(held, fmt.Sprintf("pid %d (%s, %s, its transaction open %s) on %s", pid, app, state, age, tables))
	}
	if rows.Err() != nil || len(held) == 0 {
		return ""
	}
	more := ""
	if total > len(held) {
		more = fmt.Sprintf(", and %d more", total-len(held))
	}
	return "; holding locks on its tables now: " + strings.Join(held, "; ") + more
}

// lockLost reports an attempt that ended waiting for a lock: its wait ran
// out, or the database broke a deadlock by ending it.
func lockLost(err error) bool {
	err = mapErr(err)
	return errors.Is(err, driver.ErrLockTimeout) || errors.Is(err, driver.ErrSerialization)
}

// PendingMigrations lists the embedded migrations the database lacks.
func (d *Driver) PendingMigrations(ctx context.Context) ([]driver.Migration, error) {
	st, err := d.MigrationStatus(ctx)
	if err != nil {
		return nil, err
	}
	return driver.PendingOf(d.migrations, st), nil
}

// MigrationStatus compares the database's schema with the binary's.
func (d *Driver) MigrationStatus(ctx context.Context) (driver.SchemaStatus, error) {
	if err := d.poolerCheck(ctx); err != nil {
		return driver.SchemaStatus{}, err
	}
	var exists bool
	if err := d.Reader().QueryRow(ctx, sqlMigrationsTableExists).Scan(&exists); err != nil {
		return driver.SchemaStatus{}, err
	}
	if !exists {
		return driver.SchemaStatus{Latest: len(d.migrations)}, nil
	}
	return d.status(ctx, d.Reader())
}

func (d *Driver) status(ctx context.Context, q driver.Tx) (driver.SchemaStatus, error) {
	st := driver.SchemaStatus{Latest: len(d.migrations)}
	if err := q.QueryRow(ctx, sqlMigrationVersion).Scan(&st.Applied, &st.Required); err != nil {
		return st, fmt.Errorf("postgres: read migration version: %w", err)
	}
	return st, nil
}

// The migrations table's compatible_from came after it: a database made
// before it has NULLs there, read as each migration's own version.
const (
	sqlMigrateLock           = `SELECT pg_advisory_lock(hashtext(current_schema() || '.idem_migrations'))`
	sqlMigrateUnlock         = `SELECT pg_advisory_unlock(hashtext(current_schema() || '.idem_migrations'))`
	sqlMigrationsTableExists = `SELECT to_regclass('idem_migrations') IS NOT NULL`
	// Read through to_jsonb so that it also answers before Migrate added
	// the column (a binary started with migrations off).
	sqlMigrationVersion = `
SELECT coalesce(max(version), 0), coalesce(max(coalesce((to_jsonb(m) ->> 'compatible_from')::int, version)), 0)
  FROM idem_migrations m`
	sqlMigrationInsert = `INSERT INTO idem_migrations (version, name, compatible_from) VALUES ($1, $2, $3)`
	sqlDeadlockTimeout = `SELECT setting::bigint FROM pg_settings WHERE name = 'deadlock_timeout'`
	// The three longest-open sessions holding a lock on a table of the
	// current schema, and how many hold one. A role without
	// pg_read_all_stats sees other roles' sessions without their state.
	sqlLockHolders = `
SELECT a.pid, coalesce(nullif(a.application_name, ''), 'no application name'),
       coalesce(a.state, 'state not visible'),
       coalesce(extract(epoch FROM now() - a.xact_start), 0)::float8,
       string_agg(DISTINCT c.relname, ', ' ORDER BY c.relname),
       count(*) OVER ()::int
  FROM pg_locks l
  JOIN pg_class c ON c.oid = l.relation
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.granted AND l.pid <> pg_backend_pid() AND c.relkind IN ('r', 'p')
   AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
 GROUP BY a.pid, a.application_name, a.state, a.xact_start
 ORDER BY a.xact_start NULLS LAST
 LIMIT 3`
)

var sqlMigrationsTable = []string{
	`CREATE TABLE IF NOT EXISTS idem_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
	`ALTER TABLE idem_migrations ADD COLUMN IF NOT EXISTS compatible_from integer`,
}

// PoolStats reads the pgx pool's counters.
func (d *Driver) PoolStats() driver.PoolStats {
	if d.db != nil {
		s := d.db.Stats()
		return driver.PoolStats{MaxConns: s.MaxOpenConnections, InUse: s.InUse, Idle: s.Idle, Waits: s.WaitCount, WaitTime: s.WaitDuration}
	}
	s := d.pool.Stat()
	return driver.PoolStats{
		MaxConns: int(s.MaxConns()),
		InUse:    int(s.AcquiredConns()),
		Idle:     int(s.IdleConns()),
		Waits:    s.EmptyAcquireCount(),
		WaitTime: s.EmptyAcquireWaitTime(),

		Unreplicated: d.replication.count.Load(),
	}
}
