package server

import (
	"cmp"
	"context"
	"net/http"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/config"
)

// The rollout mode (--idempotency-key=optional): a write without an
// Idempotency-Key runs unguarded — idemhttp's AllowMissingKey counts it
// and runs the route's handler without a claim — in a transaction of its
// own, once per request, nothing stored. A write with a key is guarded as
// always.

// keyOptional reports whether writes may come without a key.
func (s *Server) keyOptional() bool { return s.cfg.IdempotencyKey == config.KeyOptional }

// keyless sends a request without an Idempotency-Key to unguarded and any
// other to guarded: a Batched route needs a key (it claims it in a shared
// transaction), so its keyless requests take the route's unbatched path.
func keyless(guarded, unguarded http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values(idemhttp.HeaderKey)) == 0 {
			unguarded.ServeHTTP(w, r)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// ownTxKey carries an unguarded request's own transaction (txOf). It is
// not idemhttp's guard, so KeyFrom stays false and the ids a handler
// derives from the key are fresh ones (derivedID).
type ownTxKey struct{}

// txOf is the transaction a write handler writes in: the key's (idemhttp's
// Tx), or an unguarded request's own.
func txOf(ctx context.Context) driver.Tx {
	if tx := idemhttp.Tx(ctx); tx != nil {
		return tx
	}
	tx, _ := ctx.Value(ownTxKey{}).(driver.Tx)
	return tx
}

// ownTx runs a request the guard let through without a key in a
// transaction of its own: the answer is recorded, the transaction commits
// when it is a success (2xx) and rolls back otherwise, and only then is the
// answer sent, so that a client never reads a 201 for work that did not
// commit. A guarded request passes through.
func (s *Server) ownTx(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if idemhttp.Tx(r.Context()) != nil {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		tx, err := s.d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		var rec outcomeRecorder
		next.ServeHTTP(&rec, r.WithContext(context.WithValue(ctx, ownTxKey{}, tx)))
		status := cmp.Or(rec.status, http.StatusOK)
		if status >= 200 && status < 300 {
			if err := tx.Commit(ctx); err != nil {
				s.fail(w, r, err)
				return
			}
			if s.relay != nil {
				s.relay.Notify() // its events, if any, go out now
			}
		}
		for k, vs := range rec.header {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		_, _ = w.Write(rec.body.Bytes())
	})
}
