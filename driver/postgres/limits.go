package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver"
)

// cancelGrace is how long the server has to answer a statement whose
// context ended, once asked to cancel it, before the connection is broken.
// A COMMIT waiting for synchronous standbys answers a cancel by committing
// with a warning (see replicationWatch): the grace is what lets idem learn
// that, rather than break the connection and know nothing. A server that
// cannot be reached (a partition) costs the caller this much more than its
// deadline.
const cancelGrace = time.Second

func (c Config) validateLimits() error {
	switch {
	case c.StatementTimeout != 0 && (c.StatementTimeout < time.Millisecond || c.StatementTimeout > time.Hour):
		return fmt.Errorf("postgres: StatementTimeout %s is outside 1ms..1h", c.StatementTimeout)
	case c.IdleInTransactionTimeout != 0 && (c.IdleInTransactionTimeout < time.Millisecond || c.IdleInTransactionTimeout > time.Hour):
		return fmt.Errorf("postgres: IdleInTransactionTimeout %s is outside 1ms..1h", c.IdleInTransactionTimeout)
	case c.ConnectTimeout < time.Millisecond || c.ConnectTimeout > 10*time.Minute:
		return fmt.Errorf("postgres: ConnectTimeout %s is outside 1ms..10m", c.ConnectTimeout)
	case c.NetTimeout < time.Second || c.NetTimeout > time.Hour:
		return fmt.Errorf("postgres: NetTimeout %s is outside 1s..1h", c.NetTimeout)
	}
	return nil
}

// applyLimits bounds every wait of pcfg's connections: connecting (per
// host), each statement and idle transaction on the server, the network
// (keepalives, unacknowledged data), and a statement whose context ended
// (asked to cancel, then cut off after cancelGrace). Unless cfg.ReadOnly,
// connections go to a server that takes writes only. Settings the URL
// names win. It returns the watch that counts unreplicated commits.
func applyLimits(pcfg *pgxpool.Config, cfg Config) *replicationWatch {
	cc := pcfg.ConnConfig
	params := cc.RuntimeParams
	if cfg.StatementTimeout > 0 && params["statement_timeout"] == "" {
		params["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
	if cfg.IdleInTransactionTimeout > 0 && params["idle_in_transaction_session_timeout"] == "" {
		params["idle_in_transaction_session_timeout"] = strconv.FormatInt(cfg.IdleInTransactionTimeout.Milliseconds(), 10)
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = cfg.ConnectTimeout
	}
	dialer := &net.Dialer{
		Timeout: cc.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true,
			Idle: cfg.NetTimeout / 4, Interval: cfg.NetTimeout / 4, Count: 3},
		Control: userTimeout(cfg.NetTimeout),
	}
	cc.DialFunc = dialer.DialContext
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		h := &cancelWatch{conn: c}
		c.CustomData()[cancelWatchKey] = h
		return h
	}
	if pcfg.PrepareConn == nil {
		pcfg.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) {
			h, _ := c.PgConn().CustomData()[cancelWatchKey].(*cancelWatch)
			return h == nil || !h.unsure, nil
		}
	}
	if !cfg.ReadOnly && cc.ValidateConnect == nil && !strings.Contains(cfg.URL, "target_session_attrs") {
		// A writer keeps no connection to a server that takes no writes
		// (libpq's target_session_attrs=read-write): of a multi-host URL's
		// hosts it finds the primary, and with only a standby it fails to
		// connect, saying so, instead of sending writes that fail.
		cc.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	}
	if !cfg.ReadOnly {
		cc.OnPgError = dropReadOnly(cc.OnPgError)
	}
	if cfg.ReadOnly && strings.Contains(cfg.URL, "target_session_attrs=read-write") {
		// pgx's read-write check asks transaction_read_only, which the
		// read-only session default makes "on" on every server: an
		// operator command given serve's multi-host URL found no host.
		// What that URL means is the primary, which pgx checks by
		// pg_is_in_recovery().
		cc.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsPrimary
	}
	w := &replicationWatch{log: cfg.Logger}
	cc.OnNotice = w.onNotice
	return w
}

// cancelWatch is a connection's handler of a statement whose context
// ended (pgx's ctxwatch.Handler): it asks the server to cancel the
// statement, breaks the connection if no answer comes within cancelGrace,
// and lets nothing else run on the connection until the server has taken
// the request. A cancel request is a connection of its own, which the
// server takes when it gets to it; one that arrives after its statement
// ended cancels whatever statement the connection runs then, and an
// innocent request is answered 57014. pgx's own handler gives the request
// up once the statement ends and waits a fixed 100 ms, which a loaded
// server outlasts. Once the server has closed the request's connection it
// has signalled the backend, which drops a cancel that finds it idle.
type cancelWatch struct {
	conn *pgconn.PgConn
	sent chan struct{} // closed once the request has its answer or gave up
	// unsure is set when the request got no answer from the server: it
	// may yet cancel a later statement, so the pool does not hand the
	// connection out again (PrepareConn). Written before sent is closed.
	unsure bool
}

// cancelWatchKey is where a connection's CustomData keeps its cancelWatch.
const cancelWatchKey = "idem.cancelWatch"

func (h *cancelWatch) HandleCancel(context.Context) {
	deadline := time.Now().Add(cancelGrace)
	_ = h.conn.Conn().SetDeadline(deadline)
	h.sent = make(chan struct{})
	go func() {
		defer close(h.sent)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		// CancelRequest returns when the server closes the request's
		// connection, or at the deadline without saying which.
		err := h.conn.CancelRequest(ctx)
		h.unsure = err != nil || ctx.Err() != nil
	}()
}

func (h *cancelWatch) HandleUnwatchAfterCancel() {
	<-h.sent
	_ = h.conn.Conn().SetDeadline(time.Time{})
}

// dropReadOnly wraps a connection's error handler: a write refused as
// read-only (25006) on a session whose server now reports itself
// read-only (default_transaction_read_only, or in_hot_standby: a primary
// that became a standby) closes the connection, so the pool does not hand
// it out again; its next connection is checked read-write at connect. A
// transaction begun READ ONLY on a writable server keeps its connection.
func dropReadOnly(next pgconn.PgErrorHandler) pgconn.PgErrorHandler {
	return func(c *pgconn.PgConn, e *pgconn.PgError) bool {
		if e.Code == codeReadOnlyTransaction &&
			(c.ParameterStatus("default_transaction_read_only") == "on" || c.ParameterStatus("in_hot_standby") == "on") {
			return false
		}
		return next == nil || next(c, e)
	}
}

// unbounded lifts the session's statement and idle-in-transaction
// timeouts on conn, for a migration (an index built on a large table may
// take longer than any request); restoreBounds puts them back.
func unbounded(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0"); err != nil {
		return fmt.Errorf("postgres: lift timeouts for migrations: %w", mapErr(err))
	}
	return nil
}

// restoreBounds resets what unbounded lifted to the session's defaults,
// or closes the connection, which must not return to the pool unbounded.
func restoreBounds(ctx context.Context, conn *pgx.Conn) {
	ctx = context.WithoutCancel(ctx)
	if _, err := conn.Exec(ctx, "RESET statement_timeout; RESET idle_in_transaction_session_timeout"); err != nil {
		_ = conn.Close(ctx)
	}
}

// replicationWatch sees the server's word that a commit was not
// replicated. With synchronous replication a COMMIT waits, after it is
// durable on the primary, for the standbys synchronous_standby_names asks
// for, unbounded by statement_timeout (the server lifts it before the
// commit); a cancel (the request the driver sends when the caller's
// context ends) or a termination ends that wait with a WARNING, "canceling
// wait for synchronous replication", and the COMMIT then succeeds. That commit
// is on the primary only: a failover may lose it, so it must not be
// acknowledged as done. The warning is the only sign: it carries SQLSTATE
// 01000 (a cancel) or 57P01 (a termination), the codes matched here, so
// that a server speaking another language is understood too.
type replicationWatch struct {
	log   *slog.Logger
	count atomic.Int64
}

// unreplicatedKey marks, in a connection's CustomData, the warning of its
// last unreplicated commit until the commit reads it.
const unreplicatedKey = "idem.unreplicated"

// onNotice is every connection's notice handler. It runs on the goroutine
// that reads the statement's results, before the statement returns.
func (w *replicationWatch) onNotice(c *pgconn.PgConn, n *pgconn.Notice) {
	if !isUnreplicated(n) {
		return
	}
	w.count.Add(1)
	c.CustomData()[unreplicatedKey] = n
	w.log.Error("postgres: commit not confirmed replicated: the server gave up waiting for its synchronous standbys; "+
		"the transaction is durable on this server only and is not acknowledged",
		"message", n.Message, "detail", n.Detail, "code", n.Code, "pid", c.PID())
}

func isUnreplicated(n *pgconn.Notice) bool {
	sev := n.SeverityUnlocalized
	if sev == "" {
		sev = n.Severity
	}
	return sev == "WARNING" && (n.Code == "01000" || n.Code == codeAdminShutdown)
}

// checkReplicated forgets any earlier mark on conn and returns what a
// commit on it calls last with its error: a commit the server reported
// unreplicated returns driver.ErrUnreplicated, whatever else it returned
// (a termination's broken connection included). Use:
//
//	defer checkReplicated(conn)(&err)
func checkReplicated(conn *pgxpool.Conn) func(*error) {
	data := conn.Conn().PgConn().CustomData()
	delete(data, unreplicatedKey)
	return func(err *error) {
		v, ok := data[unreplicatedKey]
		if !ok {
			return
		}
		delete(data, unreplicatedKey)
		n := v.(*pgconn.Notice)
		if *err != nil {
			*err = fmt.Errorf("%w: %s (%w)", driver.ErrUnreplicated, n.Message, *err)
			return
		}
		*err = fmt.Errorf("%w: %s", driver.ErrUnreplicated, n.Message)
	}
}
