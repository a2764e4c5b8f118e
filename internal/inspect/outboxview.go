package inspect

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/outbox"
)

// NewOutboxView is the OutboxView of an outbox on its database.
func NewOutboxView(o *outbox.Outbox) OutboxView { return outboxView{o} }

type outboxView struct{ o *outbox.Outbox }

func (v outboxView) Stats(ctx context.Context) (OutboxStats, error) {
	s, err := v.o.Stats(ctx)
	if err != nil {
		return OutboxStats{}, err
	}
	return OutboxStats{Pending: s.Unsent, OldestPendingAt: s.OldestUnsent, Dead: s.Dead}, nil
}

func (v outboxView) ListDead(ctx context.Context, limit int) ([]DeadLetter, error) {
	dead, _, err := v.o.Dead(ctx, outbox.DeadQuery{Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(dead))
	for i, d := range dead {
		out[i] = DeadLetter{ID: d.ID, Tenant: d.Tenant, Type: d.Type, Key: d.Key, Attempts: d.Attempts,
			LastError: d.LastError, CreatedAt: d.CreatedAt, DeadAt: d.DeadAt}
	}
	return out, nil
}

func (v outboxView) Redrive(ctx context.Context, id string) error {
	err := v.o.Redrive(ctx, id)
	if errors.Is(err, outbox.ErrNotDead) {
		return fmt.Errorf("%w: %s", ErrDeadLetterNotFound, id)
	}
	return err
}
