// Package guardctx carries a guarded request's guard in its context, for
// every transport that runs a handler inside the keeper's transaction
// (idemhttp, idemgrpc, idemconnect): one context key, so that a handler
// reaches its transaction with idemhttp.Tx whichever transport called it.
package guardctx

import (
	"context"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
)

// Guard is what a guarded handler asks its context for, and what it tells
// the transport back.
type Guard interface {
	// Tx is the transaction that claims the key and stores the outcome;
	// nil where a handler runs outside one (a Batched route's decode).
	Tx() driver.Tx
	// Key is the guarded request's scoped key.
	Key() idem.Key
	// MarkInvalid records that the handler refused the request by
	// validation, so that its answer is not stored.
	MarkInvalid()
}

type ctxKey struct{}

// Key is the context key the transports store their Guard under.
var Key any = ctxKey{}

// With returns ctx carrying g.
func With(ctx context.Context, g Guard) context.Context {
	return context.WithValue(ctx, Key, g)
}

// From returns the Guard in ctx, or nil.
func From(ctx context.Context) Guard {
	g, _ := ctx.Value(Key).(Guard)
	return g
}
