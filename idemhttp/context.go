package idemhttp

import (
	"context"
	"sync/atomic"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
)

type ctxKey int

const (
	scopeKey ctxKey = iota
	guardKey
)

// guard is what a guarded request's handler can ask its context for, and
// what it tells the middleware back.
type guard struct {
	tx      driver.Tx
	key     idem.Key
	invalid atomic.Bool // MarkInvalid was called
}

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
// pgx or database/sql (sqlc's queries, CopyFrom) gets the same transaction
// with postgres.PgxFromTx or sqlite.StdSQLFromTx.
func Tx(ctx context.Context) driver.Tx {
	if g, ok := ctx.Value(guardKey).(*guard); ok {
		return g.tx
	}
	return nil
}

// KeyFrom returns the scoped key of the guarded request ctx belongs to, for
// handlers that derive a stable resource id from (tenant, Idempotency-Key).
func KeyFrom(ctx context.Context) (idem.Key, bool) {
	if g, ok := ctx.Value(guardKey).(*guard); ok {
		return g.key, true
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
	if g, ok := ctx.Value(guardKey).(*guard); ok {
		g.invalid.Store(true)
	}
}
