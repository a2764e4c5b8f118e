package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver"
)

// dialect is the name Tx.Dialect reports for Postgres transactions.
const dialect = "postgres"

// ownedTx is a transaction the driver began; it also commits and rolls back.
//
// Every statement is sent when it is called and returns its own error. The
// one statement that waits is the opening (BEGIN and the transaction's
// settings): it travels in the first statement's round trip, and its
// failure is returned wrapped as the opening's ("postgres: begin: ..."),
// never as that statement's. The connection is the transaction's until
// Commit or Rollback returns it to the pool; the pool destroys a connection
// it gets back inside a transaction.
//
// Writes made through a transaction marked by driver.Later wait too: they
// travel with the next round trip, after the opening and before what
// that round trip was sent for, and a failure among them is returned from
// that call wrapped as the write's own ("postgres: ledger write: ...").
type ownedTx struct {
	conn      *pgxpool.Conn
	opening   []queuedStmt // BEGIN and its settings until the first statement sends them
	later     []laterWrite // writes waiting for the next round trip, in order
	done      bool
	committed bool     // by commitAfter: Commit then answers nil
	mode      execMode // the connection's, once asked (describes)
}

// laterWrite is a write made through driver.Later, waiting to be sent.
type laterWrite struct {
	name  string
	steps []step
}

// queuedStmt is an opening statement waiting for the first round trip.
type queuedStmt struct {
	sql  string
	args []any
}

func (t *ownedTx) Dialect() string { return dialect }

// send sends the opening statements and the later writes, if still
// unsent, and then b's in one round trip, and returns the batch at b's
// first result.
func (t *ownedTx) send(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	if t.done {
		return nil, mapErr(pgx.ErrTxClosed)
	}
	if len(t.opening) == 0 && len(t.later) == 0 {
		return t.conn.SendBatch(ctx, b), nil
	}
	all, opening, later := t.queued(len(b.QueuedQueries))
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	br := t.conn.SendBatch(ctx, all)
	if err := readQueued(br, opening, later, mapErr); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// queued empties the transaction's waiting statements into a batch with
// room for n more, and returns them for readQueued.
func (t *ownedTx) queued(n int) (*pgx.Batch, []queuedStmt, []laterWrite) {
	opening, later := t.opening, t.later
	t.opening, t.later = nil, nil
	for _, w := range later {
		n += len(w.steps)
	}
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(opening)+n)}
	for _, q := range opening {
		queue(b, t, q.sql, q.args)
	}
	for _, w := range later {
		for _, s := range w.steps {
			queue(b, t, s.sql, s.args)
		}
	}
	return b, opening, later
}

// readQueued reads the results of what queued put first in br: the first
// failure is the opening's or that write's, mapped by mapped.
func readQueued(br pgx.BatchResults, opening []queuedStmt, later []laterWrite, mapped func(error) error) error {
	for range opening {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("postgres: begin: %w", mapped(err))
		}
	}
	for _, w := range later {
		if err := readSteps(br, w.steps, mapped); err != nil {
			return fmt.Errorf("postgres: %s: %w", w.name, err)
		}
	}
	return nil
}

// readSteps gives each step its rows from br, in order, and returns the
// first failure mapped by mapped.
func readSteps(br pgx.BatchResults, steps []step, mapped func(error) error) error {
	for _, s := range steps {
		rows, err := br.Query()
		if err == nil {
			err = s.read(rows) // pgx's own rows: their errors unmapped, for mapped
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			return mapped(err)
		}
	}
	return nil
}

// write runs steps, which return no rows the caller reads, as pipeline
// does; when tx is this driver's and marked by driver.Later, it queues
// them for the transaction's next round trip instead (ownedTx).
func write(ctx context.Context, tx driver.Tx, name string, steps ...step) error {
	if driver.IsLater(tx) {
		if t, ok := driver.Underlying(tx).(*ownedTx); ok {
			if t.done {
				return mapErr(pgx.ErrTxClosed)
			}
			t.later = append(t.later, laterWrite{name: name, steps: steps})
			return nil
		}
	}
	return pipeline(ctx, tx, steps...)
}

// open sends the opening statements and later writes alone, for
// statements that cannot travel with them (those sent through PgxFromTx).
func (t *ownedTx) open(ctx context.Context) error {
	if len(t.opening) == 0 && len(t.later) == 0 {
		return nil
	}
	br, err := t.send(ctx, &pgx.Batch{})
	if err != nil {
		return err
	}
	return mapErr(br.Close())
}

// sendOne sends sql as send does and returns the batch at its result.
func (t *ownedTx) sendOne(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...) // the caller's own statement: its arguments as given
	return t.send(ctx, b)
}

func (t *ownedTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	br, err := t.sendOne(ctx, sql, args)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag.RowsAffected(), mapErr(err)
}

func (t *ownedTx) Query(ctx context.Context, sql string, args ...any) (driver.Rows, error) {
	br, err := t.sendOne(ctx, sql, args)
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
	br, err := t.sendOne(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br.QueryRow(), br}
}

// step is one statement of a pipeline and what reads its rows.
type step struct {
	sql  string
	args []any
	read func(driver.Rows) error
	plan bool // a plan setting (generic): sent only in a pipeline
}

// unread is a step whose rows nobody reads: a lock taken, a setting made.
func unread(sql string, args ...any) step {
	return step{sql: sql, args: args, read: func(driver.Rows) error { return nil }}
}

// idem's statements over arrays (one element per request of a batch) run
// under a generic plan: a plan made for each batch's arrays cost more than
// running it (docs/architecture.md, "Generic plans"). generic wraps them in
// two statements of the same round trip, one that sets plan_cache_mode and
// one that restores the transaction's own, so that the statements around
// them, the user's among them, are planned as the user's session says.
func generic(steps ...step) []step { return planned(sqlGenericOn, sqlGenericOff, steps) }

// custom wraps steps as generic does, under plans made for their
// arguments each time that read tables through their indexes only: for
// statements that each want a few rows, by key or in the order of an index
// up to a LIMIT (the deliverer's step), whatever the planner's statistics
// say. A plan made from a small table's statistics, or none, read a whole
// backlog by a sequential or bitmap scan, and sorted it, in every step.
// Planning costs little beside such a statement's run.
func custom(steps ...step) []step { return planned(sqlCustomOn, sqlCustomOff, steps) }

// planned wraps steps between on, which sets the planner's settings, and
// off, which restores the transaction's own.
func planned(on, off string, steps []step) []step {
	set, reset := unread(on), unread(off)
	set.plan, reset.plan = true, true
	out := make([]step, 0, len(steps)+2)
	out = append(out, set)
	out = append(out, steps...)
	return append(out, reset)
}

const (
	sqlGenericOn = `SELECT set_config('idem.plan_cache_mode', current_setting('plan_cache_mode'), true),
       set_config('plan_cache_mode', 'force_generic_plan', true)`
	sqlGenericOff = `SELECT set_config('plan_cache_mode', current_setting('idem.plan_cache_mode'), true)`
	sqlCustomOn   = `SELECT set_config('idem.plan_cache_mode', current_setting('plan_cache_mode'), true),
       set_config('plan_cache_mode', 'force_custom_plan', true),
       set_config('idem.enable_seqscan', current_setting('enable_seqscan'), true),
       set_config('enable_seqscan', 'off', true),
       set_config('idem.enable_bitmapscan', current_setting('enable_bitmapscan'), true),
       set_config('enable_bitmapscan', 'off', true)`
	sqlCustomOff = `SELECT set_config('plan_cache_mode', current_setting('idem.plan_cache_mode'), true),
       set_config('enable_seqscan', current_setting('idem.enable_seqscan'), true),
       set_config('enable_bitmapscan', current_setting('idem.enable_bitmapscan'), true)`
)

// pipeline runs steps in order in tx and gives each its rows: in one round
// trip when tx is this driver's (with an ownedTx's opening, if unsent),
// else one statement at a time, without plan settings. The first step that fails ends it, and its
// error is that step's: the server skips the steps behind it.
func pipeline(ctx context.Context, tx driver.Tx, steps ...step) error {
	b := &pgx.Batch{}
	var br pgx.BatchResults
	switch t := driver.Underlying(tx).(type) {
	case *ownedTx:
		for _, s := range steps {
			queue(b, t, s.sql, s.args)
		}
		var err error
		if br, err = t.send(ctx, b); err != nil {
			return err
		}
	case *pgTx:
		for _, s := range steps {
			b.Queue(s.sql, s.args...)
		}
		br = t.q.SendBatch(ctx, b)
	default:
		for _, s := range steps {
			if s.plan {
				continue // a round trip of its own would cost more than the plan
			}
			rows, err := tx.Query(ctx, s.sql, s.args...)
			if err != nil {
				return err
			}
			if err := readAll(rows, s.read); err != nil {
				return err
			}
		}
		return nil
	}
	for _, s := range steps {
		rows, err := br.Query()
		if err == nil {
			err = readAll(pgRows{rows}, s.read)
		}
		if err != nil {
			_ = br.Close()
			return mapErr(err)
		}
	}
	return mapErr(br.Close())
}

// readAll gives rows to read and closes them.
func readAll(rows driver.Rows, read func(driver.Rows) error) error {
	err := read(rows)
	rows.Close()
	if err != nil {
		return err
	}
	return rows.Err()
}

func (t *ownedTx) Commit(ctx context.Context) (err error) {
	if t.committed {
		return nil
	}
	if t.done {
		return mapErr(pgx.ErrTxClosed)
	}
	if len(t.later) > 0 {
		return t.commitAfter(ctx)
	}
	t.done = true
	defer t.conn.Release()
	defer checkReplicated(t.conn)(&err)
	if len(t.opening) > 0 {
		return nil // nothing was sent: there is nothing to commit
	}
	// Refused before anything is sent, the transaction ends with the
	// connection (the rollback closes or releases it): nothing committed.
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.conn.Conn().IsClosed() {
		return mapErr(pgconn.ErrConnClosed)
	}
	tag, err := t.conn.Exec(ctx, "COMMIT")
	if err != nil {
		return commitErr(err, mapErr)
	}
	if tag.String() == "ROLLBACK" { // a statement failed and aborted it
		return mapErr(pgx.ErrTxCommitRollback)
	}
	return nil
}

// commitAfter sends the later writes, steps and COMMIT in one round trip
// (with the opening, if unsent). Each answers its own error; when one
// fails the server skips COMMIT, and t stays open (aborted) for Rollback
// to end. Once the round trip is sent COMMIT may have run: a failure
// without an SQLSTATE is driver.ErrCommitUnknown (commitErr). Once COMMIT
// ran, t is done, and Commit answers nil, so that the wrappers around t
// see their Commit.
func (t *ownedTx) commitAfter(ctx context.Context, steps ...step) (err error) {
	if t.done {
		return mapErr(pgx.ErrTxClosed)
	}
	if len(t.opening) > 0 && len(t.later) == 0 && len(steps) == 0 {
		return t.Commit(ctx) // nothing was sent: there is nothing to commit
	}
	// Refused before anything is sent: nothing committed.
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.conn.Conn().IsClosed() {
		return mapErr(pgconn.ErrConnClosed)
	}
	b, opening, later := t.queued(len(steps) + 1)
	for _, s := range steps {
		queue(b, t, s.sql, s.args)
	}
	b.Queue("COMMIT")
	mapped := func(err error) error { return commitErr(err, mapErr) }
	replicated := checkReplicated(t.conn)
	br := t.conn.SendBatch(ctx, b)
	if err := readQueued(br, opening, later, mapped); err != nil {
		_ = br.Close()
		return err
	}
	if err := readSteps(br, steps, mapped); err != nil {
		_ = br.Close()
		return err
	}
	t.done = true
	defer t.conn.Release()
	defer replicated(&err)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return commitErr(err, mapErr)
	}
	if tag.String() == "ROLLBACK" {
		return mapErr(pgx.ErrTxCommitRollback)
	}
	t.committed = true
	return nil
}

func (t *ownedTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	defer t.conn.Release()
	if len(t.opening) > 0 {
		return nil // nothing was sent: nothing to undo
	}
	ctx, cancel := rollbackContext(ctx)
	defer cancel()
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return mapErr(err)
}

// rollbackTimeout bounds a ROLLBACK: the server answers one at once
// unless it is out of reach, and then the connection is lost anyway.
const rollbackTimeout = 2 * time.Second

// rollbackContext is the context a rollback runs on: ctx's values without
// its end, bounded by rollbackTimeout. A transaction is rolled back most
// often because its caller gave up (a client gone, a deadline passed);
// on the caller's ended context pgx would send no ROLLBACK, and the pool
// would destroy the connection it got back inside a transaction, so every
// abandoned request would cost a new connection.
func rollbackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
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
