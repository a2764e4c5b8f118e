package idem

import (
	"context"
	"time"

	"github.com/idemhq/idem/driver"
)

// DeleteExpired deletes one batch (at most Config.JanitorBatch) of records
// whose retention has passed, in a transaction of its own, and returns how
// many it deleted.
func (k *Keeper) DeleteExpired(ctx context.Context) (int, error) {
	tx, err := k.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	n, err := k.d.KeyDeleteExpired(ctx, tx, &driver.KeyDeleteExpiredParams{
		Now: k.cfg.Clock(), Limit: k.cfg.JanitorBatch,
	})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// RunJanitor deletes expired records every Config.JanitorInterval, batch
// after batch while full batches come back, until ctx is done. Each batch
// ends by Config.JanitorTimeout, so a database that stops answering fails
// a batch instead of hanging the loop. Errors are logged and retried at
// the next interval.
func (k *Keeper) RunJanitor(ctx context.Context) {
	t := time.NewTicker(k.cfg.JanitorInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			n, err := k.deleteExpired(ctx)
			if err != nil {
				if ctx.Err() == nil {
					k.cfg.Logger.Warn("idem: janitor", "err", err)
				}
				break
			}
			if n < k.cfg.JanitorBatch {
				break
			}
		}
	}
}

// deleteExpired is DeleteExpired bounded by Config.JanitorTimeout.
func (k *Keeper) deleteExpired(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.JanitorTimeout)
	defer cancel()
	return k.DeleteExpired(ctx)
}
