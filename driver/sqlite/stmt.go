package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// modernc.org/sqlite parses a statement anew for every Exec and Query; on
// the write path that was a fifth of the writer's time. So the driver keeps
// its hot statements (hotSQL) prepared, one *sql.Stmt per pool, which
// database/sql prepares once on each connection and reuses.
//
// The writer has one connection, and preparing a *sql.Stmt takes a
// connection from the pool: prepared from inside a transaction, which holds
// that one connection, it would wait forever. So a transaction never
// prepares on the pool. A hot statement it runs that is not prepared yet
// runs parsed, as before, and is noted; Begin prepares the noted statements
// before it begins the next transaction, while it holds no connection. One
// whose table does not exist yet (a new database, before Migrate) fails to
// prepare and is dropped, to be noted again. A transaction runs a prepared
// statement through Tx.StmtContext, on its own connection, where
// database/sql finds it prepared already (or prepares it again there,
// after a lost connection).
//
// SQLite prepares a statement again, by itself, when the schema changed (a
// migration) since it was prepared. One prepared statement cannot serve two
// open result sets at once: a statement whose rows are still open in the
// transaction runs parsed instead.

// hotSQL is what the cache keeps prepared: the statements of a batch of
// first arrivals, of a replay's read, of the relay's cycle and of the
// webhook deliverer's. Any other statement, the driver's or a user's
// through the transaction, is parsed each time it runs.
var hotSQL = func() map[string]bool {
	m := map[string]bool{}
	for _, q := range []string{
		sqlKeyClaim, sqlKeyGet, sqlKeyRecord, sqlKeyRelease,
		sqlLedgerAccountsInsert, sqlLedgerAccountsByKeys, sqlLedgerTransfersFind,
		sqlOutboxFetch, sqlOutboxMarkSent, sqlOutboxHeartbeat, sqlOutboxForgetRelays, sqlOutboxCountRelays,
		sqlOutboxShardAcquire, sqlOutboxShardRenew,
		sqlWebhookDeliveryInsert, sqlWebhookDeliveryClaimRead, sqlWebhookDeliveryClaim, sqlWebhookDeliveryFinish,
		sqlWebhookAttemptInsert, sqlWebhookEndpointHealth,
	} {
		m[q] = true
	}
	for _, s := range []*rowsStmt{&sqlKeyClaimRows, &sqlKeyRecordRows, &sqlOutboxInsert,
		&sqlLedgerTransfersInsert, &sqlLedgerEntriesInsert, &sqlLedgerAccountsMove, &sqlLedgerReversedAdd} {
		for _, q := range s {
			m[q] = true
		}
	}
	return m
}()

// stmtCache holds a pool's prepared statements.
type stmtCache struct {
	db     *sql.DB
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	noted  map[string]bool // run unprepared in a transaction: Begin prepares them
	nNoted atomic.Int32    // len(noted), read by Begin without the lock
	closed bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: map[string]*sql.Stmt{}, noted: map[string]bool{}}
}

// get returns query's prepared statement, or nil, noting a hot one for
// Begin to prepare.
func (c *stmtCache) get(query string) *sql.Stmt {
	if !hotSQL[query] {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stmts[query]
	if s == nil && !c.noted[query] && !c.closed {
		c.noted[query] = true
		c.nNoted.Add(1)
	}
	return s
}

// prepareNoted prepares the statements transactions noted. The caller
// holds none of the pool's connections. A statement that fails to prepare
// (its table gone) is dropped: it is noted again when it next runs.
func (c *stmtCache) prepareNoted(ctx context.Context) {
	if c.nNoted.Load() == 0 {
		return
	}
	c.mu.Lock()
	var queries []string
	for q := range c.noted {
		queries = append(queries, q)
	}
	clear(c.noted)
	c.nNoted.Store(0)
	c.mu.Unlock()
	// Without the lock: a transaction that holds the connection may be
	// looking up a statement meanwhile.
	for _, q := range queries {
		s, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if c.stmts[q] != nil || c.closed {
			_ = s.Close()
		} else {
			c.stmts[q] = s
		}
		c.mu.Unlock()
	}
}

// prepare returns query's prepared statement, preparing it now when it is
// hot and not prepared yet: for a statement run on the pool itself
// (Driver.Reader), which holds no connection while it waits for one.
func (c *stmtCache) prepare(ctx context.Context, query string) *sql.Stmt {
	if s := c.get(query); s != nil || !hotSQL[query] {
		return s
	}
	c.prepareNoted(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stmts[query]
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for q, s := range c.stmts {
		_ = s.Close()
		delete(c.stmts, q)
	}
}

// txStmt is a transaction's handle on a prepared statement (Tx.StmtContext).
// busy is set while rows it returned are open: running it again then would
// reset them.
type txStmt struct {
	s    *sql.Stmt
	busy bool
}
