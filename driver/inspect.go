package driver

import (
	"context"
	"fmt"
	"time"
)

// InspectDriver holds the read-only statements of the operator tools (idem
// keys, the web console): questions an operator asks that the business
// packages never need to.
type InspectDriver interface {
	// KeyList reads the committed records of one client key in one scope,
	// under every operation that holds it, ordered by operation, at most
	// Limit. It walks the primary key (scope, operation, key) one distinct
	// operation at a time, so it costs one index probe per operation the
	// scope has used rather than a scan of the scope's keys.
	KeyList(ctx context.Context, tx Tx, p *KeyListParams) ([]KeyRecord, error)
	// BeginSnapshot starts a read-only transaction in which every statement
	// sees the same committed state (Postgres: REPEATABLE READ; SQLite: a
	// WAL read transaction). Multi-statement checks such as ledger.Verify
	// need it on a live database: under READ COMMITTED a transfer committed
	// between two statements would look like a broken invariant.
	BeginSnapshot(ctx context.Context) (TxCloser, error)
	// LedgerBalanceBuckets reads an account's balance history in buckets
	// of consecutive entries, for the console's chart: each bucket's first
	// and last entries and, with Extremes, the lowest and highest balance
	// after any of its entries. With Extremes it reads every entry from
	// First to Last in one walk of the primary key, aggregated in the
	// database (one row per bucket leaves it); without, it makes two
	// primary-key lookups per bucket. Buckets come oldest first; those
	// past the account's newest entry are left out.
	LedgerBalanceBuckets(ctx context.Context, tx Tx, p *LedgerBalanceBucketsParams) ([]LedgerBalanceBucket, error)
	// LedgerAccountReversals lists an account's entries whose transfers
	// are reversals, newest first, up to MaxSequence, at most Limit. It
	// walks the tenant's reversals (an index holds only them) and finds
	// each one's entry by its time, so its cost grows with the tenant's
	// reversals, never with the account's history.
	LedgerAccountReversals(ctx context.Context, tx Tx, p *LedgerAccountReversalsParams) ([]LedgerReversalEntry, error)
}

// MaxBalanceBuckets bounds the buckets one LedgerBalanceBuckets call reads.
const MaxBalanceBuckets = 4096

// LedgerBalanceBucketsParams selects the buckets of LedgerBalanceBuckets:
// bucket i holds the entries numbered First+i·Width to First+(i+1)·Width−1,
// the last one cut at Last.
type LedgerBalanceBucketsParams struct {
	Tenant    string
	AccountID string
	// First and Last bound the sequences read; 1 <= First <= Last.
	First, Last int64
	// Width is the number of entries in a bucket, at least 1; at most
	// MaxBalanceBuckets buckets fit between First and Last.
	Width int64
	// Extremes reads every entry of every bucket for its Min and Max;
	// without it, Min and Max are those of the bucket's first and last
	// entries.
	Extremes bool
}

// Buckets is the number of buckets p spans, or an error saying which
// parameter is out of bounds.
func (p *LedgerBalanceBucketsParams) Buckets() (int64, error) {
	switch {
	case p.First < 1 || p.Last < p.First:
		return 0, fmt.Errorf("driver: balance buckets: sequences %d..%d are not 1 <= first <= last", p.First, p.Last)
	case p.Width < 1:
		return 0, fmt.Errorf("driver: balance buckets: width %d is below 1", p.Width)
	}
	n := (p.Last-p.First)/p.Width + 1
	if n > MaxBalanceBuckets {
		return 0, fmt.Errorf("driver: balance buckets: %d buckets of %d entries exceed %d", n, p.Width, MaxBalanceBuckets)
	}
	return n, nil
}

// LedgerBalanceBucket is a run of an account's consecutive entries. A
// balance is credits posted minus debits posted after an entry.
type LedgerBalanceBucket struct {
	FirstSequence, LastSequence int64
	FirstAt, LastAt             time.Time
	// First and Last are the balances after the first and last entries;
	// Min and Max the lowest and highest after any of them (see
	// LedgerBalanceBucketsParams.Extremes).
	First, Last, Min, Max int64
}

// LedgerAccountReversalsParams selects the entries of
// LedgerAccountReversals.
type LedgerAccountReversalsParams struct {
	Tenant      string
	AccountID   string
	MaxSequence int64
	// Limit bounds the entries returned; callers bound it.
	Limit int
}

// LedgerReversalEntry is an account's entry of a reversal.
type LedgerReversalEntry struct {
	Sequence  int64
	CreatedAt time.Time
	// Balance is the account's balance after the entry.
	Balance int64
	// TransferID is the reversal; ReversesID the transfer it reverses.
	TransferID string
	ReversesID string
}

// KeyListParams selects the records of KeyList.
type KeyListParams struct {
	Scope string
	Key   string
	// Limit bounds both the records returned and the distinct operations
	// walked. Callers bound it (the inspect package uses 1..1000).
	Limit int
}

// The outbox as operators browse it (the console's events and request
// story pages, its outbox flow chart). These reads are bounded by what
// they examine, not only by what they return: a filter that matches
// nothing still reads at most ScanLimit rows.
type OutboxInspectDriver interface {
	// OutboxBrowse reads Tenant's messages newest first by id, in the id
	// range (AfterID, BeforeID) ("" leaves a side open), keeping those of
	// Type and Key when they are set, at most Limit. Ids that Enqueue
	// assigns are UUIDv7, ordered by enqueue time; a message given an id
	// of another version sorts by that id. It examines at most ScanLimit
	// rows of the range, newest first, whatever their tenant: Scanned is
	// how many it examined and Lowest the lowest id among them, where a
	// next page goes on when Scanned reached ScanLimit. IDs are UUIDs in
	// their lowercase text form.
	OutboxBrowse(ctx context.Context, tx Tx, p *OutboxBrowseParams) (*OutboxBrowsed, error)
	// OutboxGet reads the message with the id (a UUID in lowercase text
	// form); ErrNotFound when there is none.
	OutboxGet(ctx context.Context, tx Tx, p *OutboxGetParams) (*OutboxRow, error)
	// OutboxPublished counts the messages marked published in (After,
	// Until] and the longest time one of them took from enqueue to
	// publish.
	OutboxPublished(ctx context.Context, tx Tx, p *OutboxPublishedParams) (*OutboxPublishedStats, error)
	// KeyFind reads the committed records of Scope whose expiry lies in
	// [ExpiresFrom, ExpiresUntil] and whose stored body contains
	// BodyContains, oldest first, at most Limit. It examines at most
	// ScanLimit records of that expiry range (the range is indexed; the
	// body is not), so a caller that knows when a record was written (its
	// expiry is then, plus the keeper's retention) finds it in a bounded
	// read.
	KeyFind(ctx context.Context, tx Tx, p *KeyFindParams) ([]KeyRecord, error)
}

type OutboxBrowseParams struct {
	Tenant    string
	Type      string // "": every type
	Key       string // "": every ordering key
	BeforeID  string // "": from the newest
	AfterID   string // "": to the oldest
	Limit     int
	ScanLimit int
}

type OutboxBrowsed struct {
	Rows    []OutboxRow
	Scanned int
	Lowest  string
}

type OutboxGetParams struct {
	ID string
}

type OutboxPublishedParams struct {
	After time.Time
	Until time.Time
}

type OutboxPublishedStats struct {
	Count   int64
	Slowest time.Duration // zero when Count is 0
}

type KeyFindParams struct {
	Scope        string
	ExpiresFrom  time.Time
	ExpiresUntil time.Time
	BodyContains []byte
	Limit        int
	ScanLimit    int
}
