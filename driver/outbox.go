package driver

import (
	"context"
	"time"
)

// OutboxShards is how many shards the outbox's rows are spread over by a
// hash of (tenant, ordering key). Relays lease whole shards, so one relay at
// a time publishes the rows of a key, in order. The number is part of the
// schema (migration 003 creates one lease row per shard): changing it needs
// a migration.
const OutboxShards = 64

// OutboxDriver holds the statements of the transactional outbox (package
// outbox) and its relay.
type OutboxDriver interface {
	// OutboxInsert writes rows in the caller's transaction, perhaps with
	// its next statement or its commit (see KeyRecord).
	OutboxInsert(ctx context.Context, tx Tx, p *OutboxInsertParams) error
	// OutboxFetch reads, in tx (a read-only transaction of its own), unsent
	// live rows of the given shards, in read order (Postgres: id; SQLite:
	// pos, the commit order), leaving out every row whose key is held at
	// Now (dead, or backing off until after Now).
	//
	// Without After it reads the oldest Limit rows, and Horizon, the mark
	// that the cycle's later reads use to find rows committed behind them
	// (OutboxFetchParams.Horizon), taken before those rows are read.
	// Postgres: the xmin of a snapshot taken then, below which every
	// transaction has ended. SQLite: 0 (writers are serialized, so nothing
	// commits behind a read).
	//
	// With After (the last row a cycle has read) it reads the Limit oldest
	// rows after After, and in Late the rows at or behind After, of
	// transactions with ids at or above Horizon: rows that committed after
	// the read that passed their place, oldest transaction first, at most
	// LateLimit (LateFull when it stopped there). SQLite has no late rows.
	OutboxFetch(ctx context.Context, tx Tx, p *OutboxFetchParams) (*OutboxFetched, error)
	// OutboxMarkSent stamps rows as published, in one statement, which a
	// transaction marked by Later sends with its next round trip. The
	// relay marks in a transaction of its own begun with LazyCommit (a
	// lost mark only causes a republish the broker drops; docs/outbox.md),
	// the mark sent with its COMMIT.
	OutboxMarkSent(ctx context.Context, tx Tx, p *OutboxMarkSentParams) error
	// OutboxFail records a failed attempt on a row and holds its key: until
	// HoldUntil, or for good when Dead (the row becomes a dead letter).
	OutboxFail(ctx context.Context, tx Tx, p *OutboxFailParams) error
	// OutboxList reads a tenant's rows after the list position (AfterTx,
	// AfterPos), in list order, at most Limit. It never returns a row that a
	// later call could place before one it returned: on Postgres it holds
	// back rows of a transaction while any transaction that began writing
	// before it is still open (see OutboxRow.Tx).
	OutboxList(ctx context.Context, tx Tx, p *OutboxListParams) ([]OutboxRow, error)
	// OutboxSecret reads the secret stored under Name; ErrNotFound when
	// there is none.
	OutboxSecret(ctx context.Context, tx Tx, p *OutboxSecretParams) ([]byte, error)
	// OutboxSecretInit stores Value under Name unless a secret is stored
	// there already, in a write transaction; concurrent callers all end
	// up with the one stored (OutboxSecret reads it).
	OutboxSecretInit(ctx context.Context, tx Tx, p *OutboxSecretInitParams) error
	// OutboxListDead reads dead letters in position order, at most Limit.
	OutboxListDead(ctx context.Context, tx Tx, p *OutboxListDeadParams) ([]OutboxRow, error)
	// OutboxRedrive makes a dead letter live again with no attempts and,
	// when no other dead letter holds its key, turns the key's hold into a
	// backoff until Until: a relay cycle judges holds once, at its start, so
	// a hold must not vanish under a cycle that saw it (OutboxFetch).
	// ErrNotFound when no dead letter has the id.
	OutboxRedrive(ctx context.Context, tx Tx, p *OutboxRedriveParams) error
	// OutboxDeleteSent deletes at most Limit rows sent before Before, and
	// holds that expired before HoldsBefore, and returns how many rows it
	// deleted.
	OutboxDeleteSent(ctx context.Context, tx Tx, p *OutboxDeleteSentParams) (int, error)
	// OutboxStats counts the backlog for metrics.
	OutboxStats(ctx context.Context, tx Tx) (*OutboxStats, error)
	// OutboxHeartbeat records that relay Owner lives until Until, forgets
	// relays dead before Now, and returns how many relays are alive.
	OutboxHeartbeat(ctx context.Context, tx Tx, p *OutboxHeartbeatParams) (int, error)
	// OutboxShardAcquire leases at most Limit shards whose lease expired to
	// Owner until Until and returns them.
	OutboxShardAcquire(ctx context.Context, tx Tx, p *OutboxShardParams) ([]int, error)
	// OutboxShardRenew extends Owner's lease on Shards that it still holds
	// and returns those.
	OutboxShardRenew(ctx context.Context, tx Tx, p *OutboxShardParams) ([]int, error)
	// OutboxShardRelease gives up Owner's lease on Shards (all of them when
	// Shards is nil) and, when Shards is nil, forgets the relay.
	OutboxShardRelease(ctx context.Context, tx Tx, p *OutboxShardParams) error
}

// OutboxRow is one outgoing message as stored.
type OutboxRow struct {
	ID      string // UUIDv7, text form
	Tenant  string
	Type    string
	Key     string // the ordering key (the id when the message has none)
	Shard   int
	Payload []byte // JSON
	Headers []byte // JSON object of strings, or nil
	// Sealed says Payload is a ciphertext of the headers and the payload
	// together (package seal), and Headers is nil.
	Sealed    bool
	CreatedAt time.Time
	// TraceParent and TraceState are the W3C trace context of the span
	// that enqueued the row ("" when it was not traced: stored as NULL).
	TraceParent string
	TraceState  string
	// Tx and Pos are the row's list position: GET /v1/events lists rows in
	// (Tx, Pos) order, and a cursor is the last row's pair. Pos is drawn at
	// insert. SQLite serializes writers, so Pos alone is the commit order
	// and Tx is 0. Postgres transactions commit out of the order they drew
	// anything in, so Tx is the inserting transaction's id (xid8), and a
	// list holds back the rows of transactions that some older, still open
	// transaction could precede.
	Tx        int64
	Pos       int64
	Attempts  int
	LastError string
	SentAt    time.Time // zero while unsent
	DeadAt    time.Time // zero unless a dead letter
}

type OutboxSecretParams struct {
	Name string
}

type OutboxSecretInitParams struct {
	Name  string
	Value []byte
}

type OutboxInsertParams struct {
	Rows []OutboxRow
}

type OutboxFetchParams struct {
	Shards    []int
	Now       time.Time
	Limit     int
	After     *OutboxRow
	Horizon   int64
	LateLimit int
}

type OutboxFetched struct {
	Rows     []OutboxRow
	Late     []OutboxRow
	LateFull bool
	Horizon  int64 // read without After
}

type OutboxMarkSentParams struct {
	IDs []string
	Now time.Time
}

type OutboxFailParams struct {
	ID        string
	Tenant    string
	Key       string
	Attempts  int // the row's attempts after this one
	Error     string
	Now       time.Time
	HoldUntil time.Time
	Dead      bool
}

type OutboxListParams struct {
	Tenant   string
	AfterTx  int64
	AfterPos int64
	Limit    int
}

type OutboxListDeadParams struct {
	AfterPos int64
	Limit    int
}

type OutboxRedriveParams struct {
	ID    string
	Until time.Time
}

type OutboxDeleteSentParams struct {
	Before      time.Time
	HoldsBefore time.Time
	Limit       int
}

// OutboxStats is the outbox's backlog at one moment.
type OutboxStats struct {
	Unsent       int64     // live rows not yet published
	OldestUnsent time.Time // created_at of the oldest of them; zero when none
	Dead         int64     // dead letters
}

// Lease times: Postgres, shared by relays on several hosts, ignores Now and
// Until and reads the database's clock (now() and now() + TTL), so relays
// agree on a lease's expiry whatever their hosts' clocks say. SQLite, a
// file that relays on one host share, uses Now and Until.

type OutboxHeartbeatParams struct {
	Owner string
	Now   time.Time
	Until time.Time
	TTL   time.Duration
}

type OutboxShardParams struct {
	Owner  string
	Shards []int
	Now    time.Time
	Until  time.Time
	TTL    time.Duration
	Limit  int
}
