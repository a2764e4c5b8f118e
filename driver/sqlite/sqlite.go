// Package sqlite is idem's embedded SQLite driver (modernc.org/sqlite, no
// cgo): the zero-set-up default. The database runs in WAL mode with one
// writer connection, whose transactions begin IMMEDIATE (a deferred
// transaction that upgrades to a write fails with SQLITE_BUSY whatever the
// busy timeout), and a small pool of read-only connections beside it.
package sqlite

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/idemhq/idem/driver"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Config configures Open.
type Config struct {
	// Path is the database file. Its directory is created when missing.
	// Required.
	Path string
	// BusyTimeout bounds how long a writer waits for another process's write
	// lock. Default 5s; bound 1ms..10m.
	BusyTimeout time.Duration
	// ReadConns bounds the read-only pool. Default 4; bound 1..64.
	ReadConns int
	// ReadOnly opens an existing database for reading only (SQLite's
	// mode=ro), for operator commands: neither the file nor its directory
	// is created (a missing file fails Open with an error wrapping
	// fs.ErrNotExist), and every write, Migrate's included, fails. Default
	// false.
	ReadOnly bool
}

func (c Config) withDefaults() Config {
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 5 * time.Second
	}
	if c.ReadConns == 0 {
		c.ReadConns = 4
	}
	return c
}

func (c Config) validate() error {
	if c.Path == "" {
		return errors.New("sqlite: Path is required")
	}
	if c.BusyTimeout < time.Millisecond || c.BusyTimeout > 10*time.Minute {
		return fmt.Errorf("sqlite: BusyTimeout %s is outside 1ms..10m", c.BusyTimeout)
	}
	if c.ReadConns < 1 || c.ReadConns > 64 {
		return fmt.Errorf("sqlite: ReadConns %d is outside 1..64", c.ReadConns)
	}
	return nil
}

// The write-ahead log's bounds (Open): 10,000 pages of 4 KiB, about 40 MiB,
// before a commit checkpoints; 64 MiB of file kept after a checkpoint.
const (
	walCheckpointPages = 10_000
	walSizeLimit       = 64 << 20
)

// Driver is the SQLite implementation of driver.Driver.
type Driver struct {
	write      *sql.DB // one connection: SQLite has one writer at a time
	read       *sql.DB
	writeStmts *stmtCache // the pools' prepared statements (stmt.go)
	readStmts  *stmtCache
	migrations []driver.Migration
}

var (
	_ driver.Driver      = (*Driver)(nil)
	_ driver.KeyBatcher  = (*Driver)(nil)
	_ driver.WriterBound = (*Driver)(nil)
)

// Open opens (creating when missing, unless ReadOnly) the database file. It
// does not migrate.
func Open(ctx context.Context, cfg Config) (*Driver, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ms, err := driver.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if cfg.ReadOnly {
		// mode=ro alone refuses a missing file too, but with SQLite's
		// "unable to open database file": say which file.
		if _, err := os.Stat(cfg.Path); err != nil {
			return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
		}
		q.Set("mode", "ro")
	} else if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: create directory: %w", err)
	}
	q.Set("_busy_timeout", strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10))
	if !cfg.ReadOnly {
		// Setting WAL writes the file; a database idem created is in WAL
		// mode already.
		q.Set("_journal_mode", "WAL")
	}
	q.Set("_synchronous", "FULL") // a committed outcome survives power loss
	q.Set("_foreign_keys", "on")
	q.Set("_txlock", "immediate")
	// Temporary files, the statement journals among them (a statement's
	// undo within its transaction), stay in memory: they are no part of
	// recovery after a crash, which the WAL does, and writing them to a
	// file cost the writer a system call per page its statements change.
	q.Add("_pragma", "temp_store(memory)")
	// The writer's commits copy the log back into the database (a
	// checkpoint, with a flush of the file) once it holds walCheckpointPages
	// pages rather than SQLite's 1,000: each page is copied once however
	// often the log holds it, and a busy ledger's commits hold the same
	// account and index pages again and again. The log file is cut back to
	// walSizeLimit when it is rewound, should a long reader have let it grow.
	q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", walCheckpointPages))
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	write, err := sql.Open("sqlite", "file:"+cfg.Path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	// Open the writer first so WAL mode is set before readers attach.
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, mapErr(err))
	}
	q.Del("_txlock")
	q.Del("_journal_mode")
	q.Set("_query_only", "on")
	read, err := sql.Open("sqlite", "file:"+cfg.Path+"?"+q.Encode())
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite: open reader: %w", err)
	}
	read.SetMaxOpenConns(cfg.ReadConns)
	read.SetMaxIdleConns(cfg.ReadConns)
	return &Driver{write: write, read: read, writeStmts: newStmtCache(write), readStmts: newStmtCache(read),
		migrations: ms}, nil
}

// DB is the writer pool (one connection, IMMEDIATE transactions), for users
// who begin their own transactions and pass them in with TxFromStdSQL.
func (d *Driver) DB() *sql.DB { return d.write }

func (d *Driver) Dialect() string { return dialect }

func (d *Driver) Reader() driver.Tx { return &sqlTx{q: d.read, cache: d.readStmts} }

func (d *Driver) Ping(ctx context.Context) error { return mapErr(d.read.PingContext(ctx)) }

func (d *Driver) Close() error {
	d.readStmts.close()
	d.writeStmts.close()
	return errors.Join(d.read.Close(), d.write.Close())
}

// Begin starts an IMMEDIATE write transaction on the single writer, or a
// deferred read-only one on the reader pool. LockTimeout is ignored: writers
// queue for the one connection, bounded by the caller's context.
func (d *Driver) Begin(ctx context.Context, opts driver.BeginOptions) (driver.TxCloser, error) {
	db, stmts := d.write, d.writeStmts
	if opts.ReadOnly {
		db, stmts = d.read, d.readStmts
	}
	// Before the transaction takes the connection (stmt.go).
	stmts.prepareNoted(ctx)
	if opts.LazyCommit && !opts.ReadOnly {
		return d.beginLazy(ctx)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: opts.ReadOnly})
	if err != nil {
		return nil, mapErr(err)
	}
	return &ownedTx{sqlTx: sqlTx{q: tx, tx: tx, cache: stmts}}, nil
}

// SQLite refuses to change its safety level inside a transaction, so a
// lazy one holds the writer from before its BEGIN until after its end.
const (
	sqlSyncLazy    = `PRAGMA synchronous = NORMAL`
	sqlSyncDurable = `PRAGMA synchronous = FULL`
)

// beginLazy begins a write transaction whose commit writes the log without
// flushing it: in WAL mode, a commit under synchronous=NORMAL survives the
// process's death but not the machine's, until the next FULL commit's
// flush, which covers the whole log. The writer is back at FULL before any
// other transaction can have it (ownedTx.end).
func (d *Driver) beginLazy(ctx context.Context) (driver.TxCloser, error) {
	conn, err := d.write.Conn(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	if _, err := conn.ExecContext(ctx, sqlSyncLazy); err != nil {
		restoreSync(conn)
		return nil, mapErr(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		restoreSync(conn)
		return nil, mapErr(err)
	}
	return &ownedTx{sqlTx: sqlTx{q: tx, tx: tx, cache: d.writeStmts}, lazy: conn}, nil
}

// restoreSync sets the writer's connection back to FULL and releases it.
// A connection that cannot be set back is closed rather than reused: the
// next opened has FULL from its DSN.
func restoreSync(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, sqlSyncDurable); err != nil {
		_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
	_ = conn.Close()
}

// Migrate applies pending migrations in one IMMEDIATE transaction: SQLite's
// single writer lock keeps concurrent starts apart. idem:no-transaction
// means nothing here (SQLite builds an index under its write lock anyway).
func (d *Driver) Migrate(ctx context.Context) error {
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sqlMigrationsTable); err != nil {
		return fmt.Errorf("sqlite: migrations table: %w", err)
	}
	var hasFloor int
	if err := tx.QueryRow(ctx, sqlMigrationsHasFloor).Scan(&hasFloor); err != nil {
		return fmt.Errorf("sqlite: migrations table: %w", err)
	}
	if hasFloor == 0 {
		if _, err := tx.Exec(ctx, sqlMigrationsAddFloor); err != nil {
			return fmt.Errorf("sqlite: migrations table: %w", err)
		}
	}
	st, err := d.status(ctx, tx)
	if err != nil {
		return err
	}
	if st.TooNew() {
		return fmt.Errorf("sqlite: %w", st.Err())
	}
	for _, m := range driver.PendingOf(d.migrations, st) {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("sqlite: migration %d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, sqlMigrationInsert, m.Version, m.Name, toMicros(time.Now()), m.CompatibleFrom); err != nil {
			return fmt.Errorf("sqlite: record migration %d: %w", m.Version, err)
		}
	}
	return tx.Commit(ctx)
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
	var n int
	if err := d.Reader().QueryRow(ctx, sqlMigrationsTableExists).Scan(&n); err != nil {
		return driver.SchemaStatus{}, err
	}
	if n == 0 {
		return driver.SchemaStatus{Latest: len(d.migrations)}, nil
	}
	return d.status(ctx, d.Reader())
}

func (d *Driver) status(ctx context.Context, q driver.Tx) (driver.SchemaStatus, error) {
	st := driver.SchemaStatus{Latest: len(d.migrations)}
	var hasFloor int
	if err := q.QueryRow(ctx, sqlMigrationsHasFloor).Scan(&hasFloor); err != nil {
		return st, fmt.Errorf("sqlite: read migration version: %w", err)
	}
	query := sqlMigrationVersionNoFloor
	if hasFloor > 0 {
		query = sqlMigrationVersion
	}
	if err := q.QueryRow(ctx, query).Scan(&st.Applied, &st.Required); err != nil {
		return st, fmt.Errorf("sqlite: read migration version: %w", err)
	}
	return st, nil
}

// The migrations table's compatible_from came after it: a database made
// before it lacks the column until Migrate adds it, and has NULLs there,
// read as each migration's own version.
const (
	sqlMigrationsTable         = `CREATE TABLE IF NOT EXISTS idem_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`
	sqlMigrationsHasFloor      = `SELECT count(*) FROM pragma_table_info('idem_migrations') WHERE name = 'compatible_from'`
	sqlMigrationsAddFloor      = `ALTER TABLE idem_migrations ADD COLUMN compatible_from INTEGER`
	sqlMigrationsTableExists   = `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'idem_migrations'`
	sqlMigrationVersion        = `SELECT coalesce(max(version), 0), coalesce(max(coalesce(compatible_from, version)), 0) FROM idem_migrations`
	sqlMigrationVersionNoFloor = `SELECT coalesce(max(version), 0), coalesce(max(version), 0) FROM idem_migrations`
	sqlMigrationInsert         = `INSERT INTO idem_migrations (version, name, applied_at, compatible_from) VALUES (?1, ?2, ?3, ?4)`
)

// Times are stored as integer microseconds since the Unix epoch, UTC.
func toMicros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// PoolStats adds up the writer's and the readers' database/sql pools.
func (d *Driver) PoolStats() driver.PoolStats {
	w, r := d.write.Stats(), d.read.Stats()
	return driver.PoolStats{
		MaxConns: w.MaxOpenConnections + r.MaxOpenConnections,
		InUse:    w.InUse + r.InUse,
		Idle:     w.Idle + r.Idle,
		Waits:    w.WaitCount + r.WaitCount,
		WaitTime: w.WaitDuration + r.WaitDuration,
	}
}
