package idemhttp

import (
	"context"
	"sync/atomic"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/guardctx"
)

type ctxKey int

const scopeKey ctxKey = 0

// guardKey is the context key every transport stores its guard under
// (internal/guardctx), so that Tx, KeyFrom and MarkInvalid work in a
// handler that idemgrpc or idemconnect runs too.
var guardKey = guardctx.Key

// guard is what a guarded request's handler can ask its context for, and
// what it tells the middleware back.
type guard struct {
	tx      driver.Tx
	key     idem.Key
	invalid atomic.Bool // MarkInvalid was called
}

// guardCtx is a context that carries its guard as guardctx.With would,
// made with it in one allocation.
type guardCtx struct {
	context.Context
	g guard
}

func (c *guardCtx) Value(key any) any {
	if key == guardKey {
		return &c.g
	}
	return c.Context.Value(key)
}

func (g *guard) Tx() driver.Tx { return g.tx }
func (g *guard) Key() idem.Key { return g.key }
func (g *guard) MarkInvalid()  { g.invalid.Store(true) }

// WithScope returns ctx carrying scope (the tenant), for an authentication
// middleware in front of Wrap: the default Config.Scope reads it back.
func WithScope(ctx context.Context, scope string) context.Context {
	return context.WithValue(ctx, scopeKey, scope)
}

// ScopeFrom returns the scope WithScope put in ctx, or "" when there is none.
func ScopeFrom(ctx context.Context) string {
	s, _ := ctx.Value(scopeKey).(string)
	return s
}

// Tx returns the transaction a guarded handler must write its business rows
// (and outbox messages) in: the one that claims the key and stores the
// outcome, so that all of it commits together or not at all. The handler
// must not commit or roll it back. Tx is nil outside a guarded request (for
// example for a method Config.Methods lets through). Code written against
// pgx or database/sql (sqlc's queries, CopyFrom, GORM, sqlx) gets the same
// transaction as its own type: postgres.PgxFromTx (a pgx.Tx, on a driver
// opened on a pgx pool), postgres.StdSQLFromTx (a *sql.Tx, on a driver
// opened on a *sql.DB) or sqlite.StdSQLFromTx. The other way,
// postgres.TxFromPgx, postgres.TxFromStdSQL and sqlite.TxFromStdSQL adapt
// a transaction you began for Keeper.DoTx and the ledger, outbox and inbox
// methods.
//
// Tx, KeyFrom and MarkInvalid read the same guard in a handler that the
// gRPC and Connect interceptors (modules idemgrpc and idemconnect) run.
func Tx(ctx context.Context) driver.Tx {
	if g := guardctx.From(ctx); g != nil {
		return g.Tx()
	}
	return nil
}

// KeyFrom returns the scoped key of the guarded request ctx belongs to, for
// handlers that derive a stable resource id from (tenant, Idempotency-Key).
func KeyFrom(ctx context.Context) (idem.Key, bool) {
	if g := guardctx.From(ctx); g != nil {
		return g.Key(), true
	}
	return idem.Key{}, false
}

// MarkInvalid tells the middleware that the guarded request ctx belongs to
// was refused by validation before any work: malformed, a field missing or
// out of range. The handler then answers it with a 4xx (400 as a rule) as
// usual; that answer is sent but not stored, whatever the handler wrote
// through Tx rolls back, and the key stays free, so the client can correct
// the request and send it again under the same Idempotency-Key.
//
// Do not mark a business refusal, a valid request judged and turned down
// (422 insufficient funds): it is the key's outcome, stored and replayed,
// so a retry is refused the same way without running again. A marked
// request answered with a status other than 4xx is a bug in the handler:
// it rolls back and is answered 500. Outside a guarded request MarkInvalid
// does nothing.
func MarkInvalid(ctx context.Context) {
	if g := guardctx.From(ctx); g != nil {
		g.MarkInvalid()
	}
}
