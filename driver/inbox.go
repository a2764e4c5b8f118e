package driver

import (
	"context"
	"time"
)

// InboxDriver holds the statements of consumer-side deduplication (package
// inbox).
type InboxDriver interface {
	// InboxClaim records (Consumer, MessageID) under the table's unique
	// constraint in the caller's transaction. It returns false when the
	// message was recorded before (a duplicate). A concurrent claim of the
	// same message waits for the other transaction's end.
	InboxClaim(ctx context.Context, tx Tx, p *InboxClaimParams) (bool, error)
	// InboxDeleteBefore deletes at most Limit records processed before
	// Before and returns how many it deleted.
	InboxDeleteBefore(ctx context.Context, tx Tx, p *InboxDeleteBeforeParams) (int, error)
}

type InboxClaimParams struct {
	Consumer  string
	MessageID string
	Now       time.Time
}

type InboxDeleteBeforeParams struct {
	Before time.Time
	Limit  int
}
