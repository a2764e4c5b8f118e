package idem

import (
	"context"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/failpoint"
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
	failpoint.Hit("janitor.before_delete")
	now := k.cfg.Clock()
	n, err := k.d.KeyDeleteExpired(ctx, tx, &driver.KeyDeleteExpiredParams{
		Now: now, ForgetBefore: now.Add(-k.cfg.Memory), Limit: k.cfg.JanitorBatch,
	})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// RunJanitor deletes expired records when it starts and then every
// Config.JanitorInterval, batch after batch while full batches come back,
// until ctx is done. Each batch ends by Config.JanitorTimeout, so a
// database that stops answering fails a batch instead of hanging the loop.
// A batch once begun runs to its end, even when ctx ends meanwhile: ctx
// stops the loop between batches, and RunJanitor returns only then, so
// whoever closes the driver after it returns closes none under a DELETE.
// Errors are logged and retried at the next interval.
func (k *Keeper) RunJanitor(ctx context.Context) {
	t := time.NewTicker(k.cfg.JanitorInterval)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		for ctx.Err() == nil {
			n, err := k.deleteExpired(ctx)
			if err != nil {
				k.cfg.Logger.Warn("idem: janitor", "err", err)
				break
			}
			if n < k.cfg.JanitorBatch {
				break
			}
		}
	}
}

// deleteExpired is DeleteExpired bounded by Config.JanitorTimeout alone:
// ctx's end does not cut it short (see RunJanitor).
func (k *Keeper) deleteExpired(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.JanitorTimeout)
	defer cancel()
	return k.DeleteExpired(ctx)
}
