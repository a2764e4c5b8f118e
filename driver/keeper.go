package driver

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// KeeperDriver holds the statements of the idempotency keeper (package idem).
type KeeperDriver interface {
	// KeyClaim inserts the key's claim under the table's unique constraint.
	// It must be the first statement of a read-committed transaction: when
	// another transaction holds the same key, the insert waits (bounded by
	// the transaction's lock timeout) until that one commits or rolls back.
	// A record or tombstone made before ForgetBefore counts as absent (a
	// record is replaced). When another exists, Claimed is false and
	// Existing holds it as committed: a record, expired or not, or a
	// tombstone (KeyRecord.Tombstone). A claim that inserts a key the
	// janitor moved to its tombstone while the claim waited fails with
	// ErrTombstoned.
	KeyClaim(ctx context.Context, tx Tx, p *KeyClaimParams) (*KeyClaimResult, error)
	// KeyRecord stores the outcome on the claim made earlier in tx; a
	// missing claim is its error.
	KeyRecord(ctx context.Context, tx Tx, p *KeyRecordParams) error
	// KeyRelease deletes the claim made earlier in tx of a request refused
	// inside a batch that commits; a missing claim is its error.
	KeyRelease(ctx context.Context, tx Tx, p *KeyGetParams) error
	// KeyGet reads a committed record; ErrNotFound when there is none.
	KeyGet(ctx context.Context, tx Tx, p *KeyGetParams) (*KeyRecord, error)
	// KeyDeleteExpired moves at most Limit records whose ExpiresAt is not
	// after Now to their tombstones (deleting those made before
	// ForgetBefore outright), then deletes at most Limit tombstones made
	// before ForgetBefore. It returns the larger of the two counts, so
	// that a result below Limit means both are done for now.
	KeyDeleteExpired(ctx context.Context, tx Tx, p *KeyDeleteExpiredParams) (int, error)
	// Reader runs statements outside any transaction, each on its own, for
	// reads that need no transaction (the keeper's replay fast path).
	Reader() Tx
}

// KeyBatcher is what a driver may add to claim and record a batch's keys
// in fewer statements than one a key (the keeper's group commit). Without
// it the keeper calls ClaimBatch's and RecordBatch's fallbacks.
type KeyBatcher interface {
	// KeyClaimBatch is KeyClaim for many keys at once. The IDs must be
	// distinct. Keys are claimed in one definite order (sorted), so that
	// two batches that share keys wait for each other instead of
	// deadlocking. It must be the first statement of a read-committed
	// transaction, like KeyClaim; the results are in the order of p.Claims.
	KeyClaimBatch(ctx context.Context, tx Tx, p *KeyClaimBatchParams) ([]KeyClaimResult, error)
	// KeyRecordBatch stores each outcome of p.Records on its claim, and
	// deletes the claims of p.Release, all made earlier in tx. Every key
	// must hold a claim of tx's: anything else is its error.
	KeyRecordBatch(ctx context.Context, tx Tx, p *KeyRecordBatchParams) error
}

// ClaimBatch claims p's keys in tx: by d's KeyClaimBatch when d is a
// KeyBatcher, else one KeyClaim a key, in sorted order (see KeyClaimBatch).
func ClaimBatch(ctx context.Context, d KeeperDriver, tx Tx, p *KeyClaimBatchParams) ([]KeyClaimResult, error) {
	if b, ok := Optional[KeyBatcher](d); ok {
		return b.KeyClaimBatch(ctx, tx, p)
	}
	order := make([]int, len(p.Claims))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return compareKeyIDs(p.Claims[i].ID, p.Claims[j].ID) })
	out := make([]KeyClaimResult, len(p.Claims))
	for n, i := range order {
		if n > 0 && p.Claims[order[n-1]].ID == p.Claims[i].ID {
			return nil, fmt.Errorf("claim batch: key %q twice", p.Claims[i].ID.Key)
		}
		c := &p.Claims[i]
		res, err := d.KeyClaim(ctx, tx, &KeyClaimParams{ID: c.ID, Fingerprint: c.Fingerprint, Now: p.Now, ExpiresAt: p.ExpiresAt, ForgetBefore: p.ForgetBefore})
		if err != nil {
			return nil, err
		}
		out[i] = *res
	}
	return out, nil
}

// RecordBatch stores p's outcomes and releases p's refused claims in tx: by
// d's KeyRecordBatch when d is a KeyBatcher, else a statement a key.
func RecordBatch(ctx context.Context, d KeeperDriver, tx Tx, p *KeyRecordBatchParams) error {
	if b, ok := Optional[KeyBatcher](d); ok {
		return b.KeyRecordBatch(ctx, tx, p)
	}
	for i := range p.Records {
		if err := d.KeyRecord(ctx, tx, &p.Records[i]); err != nil {
			return err
		}
	}
	for _, id := range p.Release {
		if err := d.KeyRelease(ctx, tx, &KeyGetParams{ID: id}); err != nil {
			return err
		}
	}
	return nil
}

// KeyRecordCommitter is what a driver may add to store a batch's outcomes
// and commit in one round trip (Postgres: one pipeline).
type KeyRecordCommitter interface {
	// KeyRecordCommit is KeyRecordBatch, then tx's Commit. The statements
	// each answer their own error. The check that every key holds a claim
	// of tx's is made inside the statement, so tx commits only if it
	// holds; when it does not, nothing commits and tx stays open for its
	// Rollback.
	KeyRecordCommit(ctx context.Context, tx TxCloser, p *KeyRecordBatchParams) error
}

// RecordCommit stores p's outcomes, releases p's refused claims and
// commits tx: by d's KeyRecordCommit when d is a KeyRecordCommitter, else
// RecordBatch, then Commit.
func RecordCommit(ctx context.Context, d KeeperDriver, tx TxCloser, p *KeyRecordBatchParams) error {
	if c, ok := Optional[KeyRecordCommitter](d); ok {
		return c.KeyRecordCommit(ctx, tx, p)
	}
	if err := RecordBatch(ctx, d, tx, p); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func compareKeyIDs(a, b KeyID) int {
	return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Operation, b.Operation), strings.Compare(a.Key, b.Key))
}

// KeyReadBatcher is what a driver may add for the keeper's coalesced
// fast-path reads: a driver whose statements are round trips to a server
// (Postgres) reads many keys in one. Without it the keeper reads each key
// alone, on as many connections as it likes, which is right where
// statements run in process (SQLite).
type KeyReadBatcher interface {
	// KeyGetBatch is KeyGet for many keys in one round trip. It returns
	// one record per ID, in order, nil where there is none; an ID may
	// repeat. An error fails the whole batch.
	KeyGetBatch(ctx context.Context, tx Tx, p *KeyGetBatchParams) ([]*KeyRecord, error)
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
	ID           KeyID
	Fingerprint  []byte
	Now          time.Time
	ExpiresAt    time.Time
	ForgetBefore time.Time // Now less the keeper's memory
}

type KeyClaimResult struct {
	Claimed  bool
	Existing *KeyRecord // set when Claimed is false
}

// KeyClaimBatchParams claims several keys with one clock reading.
type KeyClaimBatchParams struct {
	Claims       []KeyClaimItem
	Now          time.Time
	ExpiresAt    time.Time
	ForgetBefore time.Time
	// Guard is set when tx is the caller's own (Keeper.DoTx), which the
	// keeper did not begin and so cannot vouch for.
	Guard *ClaimGuard
}

// ClaimGuard is what a claim in the caller's own transaction checks and
// bounds. A driver that can check (Postgres) refuses, before the claim
// runs, a transaction that is not READ COMMITTED or wrote before its first
// claim (ErrClaimNotFirst): a replay does not run the work, but whatever
// the caller wrote before the claim would commit with it. Claims after the
// first, and what the caller writes after one, are the caller's to answer
// for: it sees whether each replayed. SQLite cannot see
// what a transaction wrote and checks nothing: there the rule is the
// caller's to keep.
type ClaimGuard struct {
	// LockTimeout bounds the claim's wait for a twin's row (a copy in
	// flight in another transaction) when positive; the transaction's own
	// bound applies again to the statements after the claim. SQLite has
	// no row locks (the caller's transaction holds the one writer) and
	// ignores it.
	LockTimeout time.Duration
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
	// Sealed says Body is a ciphertext of the header and the body
	// together (package seal), and Header is nil.
	Sealed bool
}

type KeyGetParams struct {
	ID KeyID
}

type KeyGetBatchParams struct {
	IDs []KeyID
}

// KeyRecord is a stored idempotency record. Records are visible only once
// committed, and a committed record always holds its outcome. A tombstone
// holds only its Status, its CreatedAt and TombstoneFingerprint of the
// request's fingerprint in Fingerprint.
type KeyRecord struct {
	ID          KeyID
	Fingerprint []byte
	Status      int
	Header      []byte
	Body        []byte
	Sealed      bool // see KeyRecordParams
	CreatedAt   time.Time
	ExpiresAt   time.Time
	Tombstone   bool
}

type KeyDeleteExpiredParams struct {
	Now          time.Time
	ForgetBefore time.Time // records and tombstones made before it are deleted
	Limit        int
}

// Tombstone sizes: 128 bits name a key and tell two requests apart with a
// chance of collision far below any other failure's, in a row of fixed size.
const tombstoneBytes = 16

// TombstoneID is the id of id's tombstone: the first 16 bytes of SHA-256
// of its parts in UTF-8, each preceded by its length in bytes (4 bytes,
// big-endian), so that no two keys share it by where their parts split.
// PostgreSQL computes the same in idem_tombstone_id (migration 12).
func TombstoneID(id KeyID) []byte {
	h := sha256.New()
	var n [4]byte
	for _, part := range [...]string{id.Scope, id.Operation, id.Key} {
		binary.BigEndian.PutUint32(n[:], uint32(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return h.Sum(nil)[:tombstoneBytes]
}

// TombstoneFingerprint is what a tombstone keeps of a request's
// fingerprint: the first 16 bytes of its SHA-256, whatever its length.
func TombstoneFingerprint(fp []byte) []byte {
	sum := sha256.Sum256(fp)
	return sum[:tombstoneBytes]
}

// KeyGetEach is KeyGetBatch one key at a time, through d.KeyGet: a batch
// of one.
func KeyGetEach(ctx context.Context, d KeeperDriver, tx Tx, p *KeyGetBatchParams) ([]*KeyRecord, error) {
	out := make([]*KeyRecord, len(p.IDs))
	for i, id := range p.IDs {
		rec, err := d.KeyGet(ctx, tx, &KeyGetParams{ID: id})
		switch {
		case err == nil:
			out[i] = rec
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}
