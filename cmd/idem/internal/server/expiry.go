package server

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/failpoint"
	"github.com/idemhq/idem/outbox"
)

// expiryBatch bounds the holds one expiry transaction releases.
const expiryBatch = 100

// runHoldExpiry releases holds whose timeout has passed, every
// HoldExpiryPeriod, until ctx ends: each batch in one transaction that
// writes the expiries and their transfer.expired events, so a release and
// its event exist together or not at all. Every serve runs it; two that
// find the same hold both try, and the ledger expires it once (the other
// leaves it out), so a crash between them loses nothing and doubles
// nothing: the next pass of either finds what is still due.
func (s *Server) runHoldExpiry(ctx context.Context) {
	t := time.NewTicker(s.cfg.HoldExpiryPeriod)
	defer t.Stop()
	for {
		// A full batch suggests more are due: take the next at once.
		for {
			n, err := s.expireHolds(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("idem: hold expiry", "err", err)
				}
				break
			}
			if n < expiryBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// expireHolds releases up to expiryBatch due holds in one transaction and
// returns how many were due.
func (s *Server) expireHolds(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DBTimeout)
	defer cancel()
	tx, err := s.base.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	expired, err := s.ledger.ExpireDue(ctx, tx, expiryBatch)
	if err != nil {
		return 0, err
	}
	if len(expired) == 0 {
		return 0, nil
	}
	events := make([]outbox.Message, len(expired))
	for i := range expired {
		t := &expired[i].Transfer
		typ, key := transferEvent(t)
		if events[i], err = newEvent(expired[i].Tenant, typ, key, t); err != nil {
			return 0, err
		}
	}
	if err := s.outbox.Enqueue(ctx, tx, events...); err != nil {
		return 0, err
	}
	failpoint.Hit("ledger.before_expiry_commit")
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit %d expiries: %w", len(expired), err)
	}
	if s.relay != nil {
		s.relay.Notify()
	}
	return len(expired), nil
}
