package inspect

import (
	"context"
	"errors"
	"time"
)

// OutboxView is what the operator tools need from the outbox: its backlog,
// its dead letters, and a way to send a dead letter again. The outbox
// package implements it on its tables; the console and `idem outbox` only
// read and redrive through it.
type OutboxView interface {
	// Stats summarizes the outbox now.
	Stats(ctx context.Context) (OutboxStats, error)
	// ListDead lists dead letters, oldest first, at most limit (1..1000).
	ListDead(ctx context.Context, limit int) ([]DeadLetter, error)
	// Redrive makes a dead letter pending again, to be published by the
	// next relay pass. ErrDeadLetterNotFound (wrapped) when id is not a
	// dead letter (never was, or was already redriven).
	Redrive(ctx context.Context, id string) error
}

// ErrDeadLetterNotFound: the id names no dead letter.
var ErrDeadLetterNotFound = errors.New("outbox: no such dead letter")

// OutboxStats is the outbox's backlog at a moment.
type OutboxStats struct {
	// Pending counts messages not yet published (including those waiting
	// for a retry).
	Pending int64 `json:"pending"`
	// OldestPendingAt is when the oldest pending message was enqueued; zero
	// when nothing is pending.
	OldestPendingAt time.Time `json:"oldest_pending_at,omitzero"`
	// Dead counts messages the relay gave up on.
	Dead int64 `json:"dead"`
}

// OldestAge is how long the oldest pending message has waited at now; zero
// when nothing is pending.
func (s OutboxStats) OldestAge(now time.Time) time.Duration {
	if s.OldestPendingAt.IsZero() {
		return 0
	}
	return max(now.Sub(s.OldestPendingAt), 0)
}

// DeadLetter is a message the relay gave up on.
type DeadLetter struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Type   string `json:"type"`
	// Key is the message's ordering key (its id when it has none): the
	// dead letter holds the key's later messages until it is redriven.
	Key       string    `json:"key"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error"`
	CreatedAt time.Time `json:"created_at"`
	DeadAt    time.Time `json:"dead_at"`
}

// MaxDeadLetters bounds one ListDead page.
const MaxDeadLetters = 1000
