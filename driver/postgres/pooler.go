package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver"
)

// PoolerTransaction is Config.Pooler's one value, and the value of the
// URL parameter PoolerParam: a pooler that hands each client transaction
// a server connection of its own choosing (PgBouncer, pool_mode =
// transaction).
const PoolerTransaction = "transaction"

// PoolerParam is the URL parameter that sets Config.Pooler
// (postgres://…?idem_pooler=transaction). Open takes it out of the URL: it
// is no server setting.
const PoolerParam = "idem_pooler"

// trackedParams are the startup parameters PgBouncer keeps per client and
// sets on whichever server connection the client's transaction gets (1.18:
// its track list). Every other setting a pooled connection needs travels in
// each transaction.
var trackedParams = []string{"application_name", "client_encoding", "datestyle", "standard_conforming_strings", "timezone"}

// pooler is what the driver does differently behind a transaction pooler,
// where a server session belongs to a client for one transaction only:
// nothing is left in the session. A session setting (lock_timeout,
// statement_timeout, idle_in_transaction_session_timeout, search_path, the
// URL's own) is sent with each transaction instead, as a transaction-local
// set_config in the statement that follows BEGIN, which travels in the
// transaction's first round trip; a statement outside a transaction (the
// reader's) is preceded by the same in its own pipeline, which PostgreSQL
// runs as one implicit transaction. Statements are unnamed (pgx's
// QueryExecModeExec) rather than prepared once per connection: a statement
// prepared on one server session does not exist on the next. The
// migration lock, a session advisory lock on a direct connection, is a
// transaction's advisory lock held open on a connection of its own.
//
// None of it costs a round trip: the settings ride with the first
// statement, and an unnamed statement is parsed in the round trip that
// runs it. The server parses and plans each statement anew instead.
type pooler struct {
	// names and values are the settings, in the order of opening's
	// parameters; lockAt is lock_timeout's index.
	names, values []string
	lockAt        int
	readOnly      bool
	// opening sets names to values, transaction-local; lazy also turns
	// synchronous_commit off.
	opening, lazy string
	// probeErr is the last new connection's failure to get a server
	// connection from the pooler, nil once one got it.
	probeErr atomic.Pointer[error]
	maxConns int32
}

// newPooler moves pcfg's session settings into per-transaction ones and
// makes its statements unnamed, unless the URL chose pgx's query mode
// itself (default_query_exec_mode).
func newPooler(pcfg *pgxpool.Config, cfg Config) *pooler {
	cc := pcfg.ConnConfig
	p := &pooler{readOnly: cfg.ReadOnly, maxConns: pcfg.MaxConns}
	for _, name := range slices.Sorted(maps.Keys(cc.RuntimeParams)) {
		if slices.Contains(trackedParams, strings.ToLower(name)) {
			continue
		}
		value := cc.RuntimeParams[name]
		delete(cc.RuntimeParams, name)
		if name == "default_transaction_read_only" {
			// A transaction-local default changes no transaction begun
			// already: BEGIN READ ONLY says it instead.
			p.readOnly = p.readOnly || value == "on" || value == "true" || value == "1"
			continue
		}
		if name == "lock_timeout" {
			p.lockAt = len(p.names)
		}
		p.names = append(p.names, name)
		p.values = append(p.values, value)
	}
	var calls []string
	for i := range p.names {
		calls = append(calls, fmt.Sprintf("set_config($%d, $%d, true)", 2*i+1, 2*i+2))
	}
	p.opening = "SELECT " + strings.Join(calls, ", ")
	p.lazy = "SELECT " + strings.Join(append(calls, `set_config('synchronous_commit', 'off', true)`), ", ")
	if !strings.Contains(cfg.URL, "default_query_exec_mode") {
		cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	validate := cc.ValidateConnect
	cc.ValidateConnect = func(ctx context.Context, c *pgconn.PgConn) error { return p.probe(ctx, c, validate) }
	return p
}

// args returns opening's parameters, with lock_timeout set to lockTimeout
// when it is not zero.
func (p *pooler) args(lockTimeout string) []any {
	args := make([]any, 0, 2*len(p.names))
	for i, name := range p.names {
		value := p.values[i]
		if i == p.lockAt && name == "lock_timeout" && lockTimeout != "" {
			value = lockTimeout
		}
		args = append(args, name, value)
	}
	return args
}

// with returns opening's parameters with each name in over set to its
// value instead (a migration's unbounded statements).
func (p *pooler) with(over map[string]string) []any {
	args := p.args("")
	for i := 0; i < len(args); i += 2 {
		if v, ok := over[args[i].(string)]; ok {
			args[i+1] = v
		}
	}
	return args
}

// probe runs when a connection to the pooler is made, before the pool
// uses it: the pooler must give it a server connection before the connect
// timeout. A pooler in session mode keeps a server connection for each
// client connection for as long as it lives, and with fewer server
// connections than idem's pool has clients, the rest wait, unseen, in its
// queue: each such connection fails here, saying so, instead of hanging
// every statement sent on it until its deadline.
//
// The probe's bound is the socket's deadline, not ctx: a context that ends
// mid-statement makes pgx send the pooler a cancel request, and PgBouncer
// before 1.21 (Debian 12's is 1.18) exits ("FATAL … bad client state")
// when a client it forwards a cancel request for disconnects first, as a
// probe given up would.
func (p *pooler) probe(ctx context.Context, c *pgconn.PgConn, validate pgconn.ValidateConnectFunc) error {
	if deadline, ok := ctx.Deadline(); ok {
		if err := c.Conn().SetDeadline(deadline); err != nil {
			return err
		}
		ctx = context.WithoutCancel(ctx)
	}
	var err error
	if validate != nil {
		err = validate(ctx, c)
	} else {
		err = c.Exec(ctx, "SELECT 1").Close()
	}
	if err == nil {
		p.probeErr.Store(nil)
		return c.Conn().SetDeadline(time.Time{})
	}
	if ctx.Err() == nil && !pgconn.Timeout(err) {
		return err
	}
	// The cause is told, not wrapped: pgconn replaces an error that wraps
	// a timeout by its own.
	err = fmt.Errorf("%w: %w: the pooler gave a new connection no server connection before the connect timeout: "+
		"its pool for idem's database and user is smaller than idem's (%d connections), and in session mode "+
		"(PgBouncer pool_mode = session) each client connection keeps a server connection for as long as it lives; "+
		"use pool_mode = transaction, a default_pool_size of at least %d, or a smaller pool_max_conns in the URL (%s)",
		driver.ErrUnavailable, driver.ErrPoolerExhausted, p.maxConns, p.maxConns, err)
	p.probeErr.Store(&err)
	return err
}

// failing returns the last probe's failure while no connection made since
// got a server connection: the pool is short of what it was sized for.
func (p *pooler) failing() error {
	if p == nil {
		return nil
	}
	if e := p.probeErr.Load(); e != nil {
		return *e
	}
	return nil
}

// poolerCheck is the readiness of a pool behind a pooler whose last new
// connection got no server connection (probe): a new connection, made
// and closed, must get one now. Its failure is ErrPoolerExhausted.
func (d *Driver) poolerCheck(ctx context.Context) error {
	short := d.pooler.failing()
	if short == nil {
		return nil
	}
	conn, err := pgx.ConnectConfig(ctx, d.connConfig)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller's bound ended before the connect timeout: no server
		// connection in that time either.
		return short
	case err != nil:
		return mapErr(err)
	}
	return conn.Close(ctx)
}

// settingQuerier runs each statement on q after the settings, in one
// pipeline: outside a transaction, PostgreSQL runs a pipeline as one
// implicit transaction, so transaction-local settings hold for the
// statement and go with it.
type settingQuerier struct {
	q    querier
	sql  string
	args []any
}

func (s settingQuerier) batch(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(s.sql, s.args...)
	b.Queue(sql, args...)
	return b
}

// send sends the settings and sql, and returns the batch at sql's result.
func (s settingQuerier) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	br := s.q.SendBatch(ctx, s.batch(sql, args))
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

func (s settingQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := s.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (s settingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := s.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &closingRows{Rows: rows, br: br}, nil
}

func (s settingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, err := s.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return closingRow{row: br.QueryRow(), br: br}
}

func (s settingQuerier) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	all := &pgx.Batch{}
	all.Queue(s.sql, s.args...)
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	br := s.q.SendBatch(ctx, all)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return errBatch{err}
	}
	return br
}

// closingRows closes the batch its rows came from with them.
type closingRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *closingRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *closingRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

func (r *closingRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

// closingRow closes the batch its row came from once scanned.
type closingRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r closingRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// reader is the driver's reader behind a pooler: each statement after the
// settings.
func (p *pooler) reader(pool *pgxpool.Pool) driver.Tx {
	sql, args := p.opening, p.args("")
	if p.readOnly {
		sql += `, set_config('transaction_read_only', 'on', true)`
	}
	return &pgTx{q: settingQuerier{q: pool, sql: sql, args: args}}
}

// migrationSettings lifts the serving deadlines for a migration's
// statements (see unbounded).
var migrationSettings = map[string]string{"statement_timeout": "0", "idle_in_transaction_session_timeout": "0"}

// lockMigrations takes the migration lock behind a pooler: a transaction on
// a connection of its own, not the pool's (a pool of one would wait for
// itself), that holds a transaction-level advisory lock until unlock ends
// it. A crashed migrator's connection closes, and the pooler rolls its
// transaction back. The lock is tried, not waited for: a waiting
// transaction would hold one of the pooler's server connections, which
// the migrator holding the lock may need for its own statements.
func (d *Driver) lockMigrations(ctx context.Context) (unlock func(), err error) {
	conn, err := pgx.ConnectConfig(ctx, d.connConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres: migration lock: %w", mapErr(err))
	}
	unlock = func() { _ = conn.Close(context.WithoutCancel(ctx)) }
	start, pause := time.Now(), 25*time.Millisecond
	for {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(d.pooler.opening, d.pooler.with(migrationSettings)...)
		b.Queue(`SELECT pg_try_advisory_xact_lock(hashtext(current_schema() || '.idem_migrations'))`)
		br := conn.SendBatch(ctx, b)
		var locked bool
		_, err := br.Exec()
		if err == nil {
			_, err = br.Exec()
		}
		if err == nil {
			err = br.QueryRow().Scan(&locked)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err == nil && !locked {
			_, err = conn.Exec(ctx, "ROLLBACK")
		}
		switch {
		case err != nil:
			unlock()
			return nil, fmt.Errorf("postgres: migration lock: %w", mapErr(err))
		case locked:
			return unlock, nil
		case time.Since(start) > d.migrateBudget:
			unlock()
			return nil, fmt.Errorf("postgres: migration lock: another migrator held it for %s", time.Since(start).Round(time.Second))
		}
		select {
		case <-time.After(pause/2 + rand.N(pause/2)):
		case <-ctx.Done():
			unlock()
			return nil, ctx.Err()
		}
		pause = min(2*pause, time.Second)
	}
}

// errPoolerSearchPath refuses a migration that must run outside a
// transaction when its search_path can travel only in one.
var errPoolerSearchPath = errors.New("it runs outside a transaction, where a search_path cannot be set through a transaction pooler: " +
	"run idem migrate on a direct URL, or make the schema the role's (ALTER ROLE … SET search_path) and leave search_path out of the URL")

// hasSetting reports whether the pooler sends the named setting.
func (p *pooler) hasSetting(name string) bool { return slices.Contains(p.names, name) }
