package idem

import (
	"context"
	"time"

	"github.com/idemhq/idem/driver"
)

// DeleteExpired turns one batch (at most Config.JanitorBatch) of records
// whose retention has passed into tombstones, and deletes one batch of
// tombstones past Config.Memory, in a transaction of its own. It returns
// the larger of the two counts.
func (k *Keeper) DeleteExpired(ctx context.Context) (int, error) {
	tx, err := k.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	now := k.cfg.Clock()
	n, err := k.d.KeyDeleteExpired(ctx, tx, &driver.KeyDeleteExpiredParams{
		Now: now, ForgetBefore: now.Add(-k.cfg.Memory), Limit: k.cfg.JanitorBatch,
	})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// RunJanitor runs DeleteExpired every Config.JanitorInterval, batch
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
