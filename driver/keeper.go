package driver

import (
	"context"
	"time"
)

// KeeperDriver holds the statements of the idempotency keeper (package idem).
type KeeperDriver interface {
	// KeyClaim inserts the key's claim under the table's unique constraint.
	// It must be the first statement of a read-committed transaction: when
	// another transaction holds the same key, the insert waits (bounded by
	// the transaction's lock timeout) until that one commits or rolls back.
	// A record whose ExpiresAt is not after Now counts as absent and is
	// replaced. When a live record exists, Claimed is false and Existing
	// holds it as committed.
	KeyClaim(ctx context.Context, tx Tx, p *KeyClaimParams) (*KeyClaimResult, error)
	// KeyRecord stores the outcome on the claim made earlier in tx. Like
	// every write that returns only an error (KeyRecordBatch,
	// OutboxInsert, LedgerWrite), a driver may hold it until tx's next
	// statement or its commit, to send them in one round trip: its error,
	// a missing claim included, is then that statement's or the commit's.
	KeyRecord(ctx context.Context, tx Tx, p *KeyRecordParams) error
	// KeyClaimBatch is KeyClaim for many keys at once (the keeper's group
	// commit), in one statement where the dialect allows. The IDs must be
	// distinct. Keys are claimed in one definite order (sorted), so that two
	// batches that share keys wait for each other instead of deadlocking.
	// It must be the first statement of a read-committed transaction, like
	// KeyClaim; the results are in the order of p.Claims.
	KeyClaimBatch(ctx context.Context, tx Tx, p *KeyClaimBatchParams) ([]KeyClaimResult, error)
	// KeyRecordBatch stores each outcome of p.Records on its claim, and
	// deletes the claims of p.Release, all made earlier in tx. Every key
	// must hold a claim of tx's: anything else is an error, perhaps
	// reported by tx's next statement or commit (see KeyRecord).
	KeyRecordBatch(ctx context.Context, tx Tx, p *KeyRecordBatchParams) error
	// KeyGet reads a committed record; ErrNotFound when there is none.
	KeyGet(ctx context.Context, tx Tx, p *KeyGetParams) (*KeyRecord, error)
	// KeyDeleteExpired deletes at most Limit records whose ExpiresAt is not
	// after Now, and returns how many it deleted.
	KeyDeleteExpired(ctx context.Context, tx Tx, p *KeyDeleteExpiredParams) (int, error)
	// Reader runs statements outside any transaction, each on its own, for
	// reads that need no transaction (the keeper's replay fast path).
	Reader() Tx
}

// WriterBound is what a driver may add when its database runs a bounded
// number of write transactions usefully at once (SQLite: 1, its one
// writer). The keeper's Batcher runs that many batches at once unless told
// otherwise; without it, it sets no such bound.
type WriterBound interface {
	Writers() int
}

// KeyID names one idempotency record.
type KeyID struct {
	Scope     string // the tenant
	Operation string
	Key       string // the client's key, already validated
}

type KeyClaimParams struct {
	ID          KeyID
	Fingerprint []byte
	Now         time.Time
	ExpiresAt   time.Time
}

type KeyClaimResult struct {
	Claimed  bool
	Existing *KeyRecord // set when Claimed is false
}

// KeyClaimBatchParams claims several keys with one clock reading.
type KeyClaimBatchParams struct {
	Claims    []KeyClaimItem
	Now       time.Time
	ExpiresAt time.Time
}

// KeyClaimItem is one key of a KeyClaimBatch.
type KeyClaimItem struct {
	ID          KeyID
	Fingerprint []byte
}

// KeyRecordBatchParams stores the outcomes of a batch's claims and releases
// the claims of its requests that were refused without an outcome.
type KeyRecordBatchParams struct {
	Records []KeyRecordParams
	Release []KeyID
}

type KeyRecordParams struct {
	ID     KeyID
	Status int
	Header []byte // JSON object of allow-listed headers, or nil
	Body   []byte
}

type KeyGetParams struct {
	ID KeyID
}

// KeyRecord is a stored idempotency record. Records are visible only once
// committed, and a committed record always holds its outcome.
type KeyRecord struct {
	ID          KeyID
	Fingerprint []byte
	Status      int
	Header      []byte
	Body        []byte
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

type KeyDeleteExpiredParams struct {
	Now   time.Time
	Limit int
}
