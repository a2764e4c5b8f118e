package driver

import (
	"context"
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
