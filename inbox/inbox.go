// Package inbox makes a consumer apply each broker message once. Brokers
// deliver at least once (a consumer killed after its commit and before its
// ack gets the message again), so the consumer records the message id under
// a unique constraint in the same transaction as the message's effects: a
// redelivery finds the id and does nothing. Call Process in the transaction
// of the work and ack the message only after that transaction commits: an
// ack before the commit loses the message if the process dies in between.
// The id is the producer's stable message id (for idem's outbox, the outbox
// row's id), never a broker sequence number; see docs/keys.md.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
)

// Limits on names and ids.
const (
	MaxConsumerLen = 200
	MaxIDLen       = 255
)

// ErrInvalid: an empty or too long consumer name or message id.
var ErrInvalid = errors.New("inbox: invalid consumer or message id")

// Inbox records processed messages on one database.
type Inbox struct {
	d   driver.Driver
	now func() time.Time
}

// New returns the inbox of d.
func New(d driver.Driver) *Inbox { return &Inbox{d: d, now: time.Now} }

// Process runs fn in tx once per (consumer, msgID): the first call records
// the id and runs fn; later calls (after that transaction committed) return
// duplicate true without running fn. A concurrent twin waits for the first
// transaction's end. fn's error is returned as is; the caller then rolls tx
// back, which also forgets the id, so a redelivery tries again. Ack the
// message only after committing tx. A nil tx, or one of another database
// than the inbox's, is refused (driver.CheckTx).
func (in *Inbox) Process(ctx context.Context, tx driver.Tx, consumer, msgID string, fn func(ctx context.Context, tx driver.Tx) error) (duplicate bool, err error) {
	if err := driver.CheckTx(in.d, tx); err != nil {
		return false, fmt.Errorf("inbox: %w", err)
	}
	if consumer == "" || len(consumer) > MaxConsumerLen || msgID == "" || len(msgID) > MaxIDLen {
		return false, fmt.Errorf("%w: consumer %q, id %q", ErrInvalid, consumer, msgID)
	}
	claimed, err := in.d.InboxClaim(ctx, tx, &driver.InboxClaimParams{Consumer: consumer, MessageID: msgID, Now: in.now()})
	if err != nil {
		return false, err
	}
	if !claimed {
		return true, nil
	}
	return false, fn(ctx, tx)
}

// DeleteBefore forgets at most limit (1..100000) records processed before
// before, and returns how many it deleted. Keep records longer than the
// broker may redeliver.
func (in *Inbox) DeleteBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 1 || limit > 100000 {
		return 0, fmt.Errorf("inbox: limit %d is outside 1..100000", limit)
	}
	tx, err := in.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	n, err := in.d.InboxDeleteBefore(ctx, tx, &driver.InboxDeleteBeforeParams{Before: before, Limit: limit})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}
