package driver

import (
	"context"
	"time"
)

// LedgerDriver holds the statements of the double-entry ledger (package
// ledger). The ledger decides every business rule in Go from rows it has
// locked; the driver only reads, locks and writes rows. Transfers and entries
// are append-only: the tables' triggers refuse UPDATE and DELETE.
type LedgerDriver interface {
	// LedgerAccountInsert inserts an account unless one with its id exists
	// in the tenant. It never fails on a duplicate id (so the caller's
	// transaction stays usable): Inserted is false and Account holds the
	// committed existing row instead.
	LedgerAccountInsert(ctx context.Context, tx Tx, p *LedgerAccountInsertParams) (*LedgerAccountInsertResult, error)
	// LedgerAccountGet reads one account; ErrNotFound when absent.
	LedgerAccountGet(ctx context.Context, tx Tx, p *LedgerAccountGetParams) (*LedgerAccount, error)
	// LedgerLock serializes writers of the same transfers and accounts. It
	// first takes a transaction-scoped lock per TransferID (so two posts of
	// one new id cannot both insert it), then row-locks the accounts in id
	// order (so writers on shared accounts queue instead of deadlocking),
	// and returns the accounts that exist as committed once locked. SQLite
	// has a single writer and only reads.
	LedgerLock(ctx context.Context, tx Tx, p *LedgerLockParams) ([]LedgerAccount, error)
	// LedgerTransfersGet reads the transfers among IDs that exist.
	LedgerTransfersGet(ctx context.Context, tx Tx, p *LedgerTransfersGetParams) ([]LedgerTransfer, error)
	// LedgerReversals lists the reversals of a transfer, oldest first.
	LedgerReversals(ctx context.Context, tx Tx, p *LedgerReversalsParams) ([]LedgerTransfer, error)
	// LedgerReversedTotal is how much of a transfer has been reversed (0 when
	// nothing has).
	LedgerReversedTotal(ctx context.Context, tx Tx, p *LedgerReversedTotalParams) (int64, error)
	// LedgerTransferWrite appends one transfer, its two entries, moves the
	// two accounts' cached totals to the entries' running totals and, for
	// a reversal, adds to the original's reversed total. The recorded time
	// is the later of the database clock (read now, under the accounts'
	// locks) and NotBefore; it is returned.
	LedgerTransferWrite(ctx context.Context, tx Tx, p *LedgerTransferWriteParams) (time.Time, error)
	// LedgerSettle makes an account's history up to After final in tx: once
	// it returns Locked with a Clock past After, no entry recorded at or
	// before After can be committed later, so a statement of tx that starts
	// afterwards reads the answer as of After that holds forever. (Under
	// READ COMMITTED, that statement also sees the commits it waited for.)
	//
	// It relies on the invariant every ledger writer keeps: a writer locks
	// the accounts it writes (Postgres: FOR UPDATE in LedgerLock; SQLite:
	// the database's one write lock, held from BEGIN IMMEDIATE), stamps
	// their entries while holding the lock with the writers' clock
	// (Postgres: clock_timestamp(); SQLite: the ledger's clock, passed as
	// Now) never before the account's newest entry, and holds the lock
	// until it commits. So once LedgerSettle has waited for the writers
	// holding the lock and read the clock while holding it, every writer
	// that stamped at or before After has committed, and every later one
	// stamps at or after that clock reading, which is past After. It
	// assumes the writers' clock never steps backwards.
	//
	// First it reads the writers' clock. When that is not past After it
	// locks nothing and returns Clock with Locked false: the caller may wait
	// for the clock and call again, holding no lock of this method's while
	// it waits. Otherwise a read-only transaction, which cannot wait for
	// writers, gets ErrReadOnly, still usable. A read-write one waits for
	// the account's in-flight writers (Postgres: SELECT … FOR SHARE, bounded
	// by lock_timeout; SQLite: the write transaction already excludes them)
	// and gets the clock read again while holding the lock, with Locked set.
	// Under REPEATABLE READ, a writer of the account that committed after
	// the transaction's snapshot makes it fail with ErrSerialization.
	LedgerSettle(ctx context.Context, tx Tx, p *LedgerSettleParams) (*LedgerSettleResult, error)
	// LedgerEntryAsOf reads the account's newest entry recorded at or
	// before AsOf; ErrNotFound when there is none. It is one index lookup,
	// whatever the length of the history.
	LedgerEntryAsOf(ctx context.Context, tx Tx, p *LedgerEntryAsOfParams) (*LedgerEntry, error)
	// LedgerEntries lists an account's entries newest first, starting at
	// MaxSequence, at most Limit.
	LedgerEntries(ctx context.Context, tx Tx, p *LedgerEntriesParams) ([]LedgerEntry, error)
	// LedgerScan streams every row Verify needs, in orders it can check
	// without holding the ledger in memory. fn's error stops the scan.
	LedgerScan(ctx context.Context, tx Tx, p *LedgerScanParams) error
}

// LedgerAccount is an account row. DebitsPosted, CreditsPosted, Sequence
// and LastEntryAt are a cache of the account's newest entry.
type LedgerAccount struct {
	Tenant                     string
	ID                         string
	Currency                   string
	DebitsMustNotExceedCredits bool
	CreditsMustNotExceedDebits bool
	Metadata                   []byte // canonical JSON object, or nil
	DebitsPosted               int64
	CreditsPosted              int64
	Sequence                   int64     // the newest entry's sequence; 0 when none
	LastEntryAt                time.Time // the newest entry's time; zero when none
	CreatedAt                  time.Time
}

// LedgerTransfer is a transfer row.
type LedgerTransfer struct {
	Tenant          string
	ID              string
	DebitAccountID  string
	CreditAccountID string
	Amount          int64
	Currency        string
	Metadata        []byte // canonical JSON object, or nil
	ReversesID      string // "" unless a reversal
	Reason          string
	CreatedAt       time.Time
}

// LedgerEntry is one side of a transfer on one account, with the account's
// running totals after it.
type LedgerEntry struct {
	Tenant        string
	AccountID     string
	Sequence      int64
	TransferID    string
	Amount        int64
	Credit        bool // false: a debit
	DebitsPosted  int64
	CreditsPosted int64
	CreatedAt     time.Time
}

type LedgerAccountInsertParams struct {
	Account LedgerAccount // totals, Sequence and LastEntryAt are ignored
	Now     time.Time     // the clock for drivers without their own
}

type LedgerAccountInsertResult struct {
	Inserted bool
	Account  *LedgerAccount
}

type LedgerAccountGetParams struct {
	Tenant string
	ID     string
}

type LedgerLockParams struct {
	Tenant      string
	TransferIDs []string
	AccountIDs  []string
}

type LedgerTransfersGetParams struct {
	Tenant string
	IDs    []string
}

type LedgerReversalsParams struct {
	Tenant     string
	TransferID string
}

type LedgerReversedTotalParams struct {
	Tenant     string
	TransferID string
}

type LedgerTransferWriteParams struct {
	// Transfer to insert; its CreatedAt is ignored.
	Transfer LedgerTransfer
	// Debit and Credit are its entries, sequences and running totals
	// filled; their CreatedAt is ignored.
	Debit, Credit LedgerEntry
	// ReversesAmount is the original's amount when Transfer is a reversal,
	// the bound its reversed total may not pass.
	ReversesAmount int64
	// NotBefore keeps each account's time from going backwards.
	NotBefore time.Time
	// Now is the clock for drivers without their own.
	Now time.Time
}

type LedgerSettleParams struct {
	Tenant    string
	AccountID string
	// After is the moment to settle, in whole microseconds (entries are
	// recorded at microsecond precision).
	After time.Time
	// Now is the clock for drivers without their own, read while the
	// transaction holds the write lock.
	Now time.Time
}

type LedgerSettleResult struct {
	// Clock is the writers' clock, in whole microseconds: read under the
	// account's lock when Locked, else before any lock was taken.
	Clock time.Time
	// Locked reports that the account's in-flight writers were waited for
	// and Clock read while holding its lock.
	Locked bool
}

type LedgerEntryAsOfParams struct {
	Tenant    string
	AccountID string
	AsOf      time.Time
}

type LedgerEntriesParams struct {
	Tenant      string
	AccountID   string
	MaxSequence int64
	Limit       int
}

// LedgerScanParams names the callbacks of LedgerScan; each is called in
// turn for every row of its kind, in the order its comment states.
type LedgerScanParams struct {
	// Accounts, by tenant and id.
	Accounts func(*LedgerAccount) error
	// Entries, by tenant, account and sequence.
	Entries func(*LedgerEntry) error
	// Transfers, by tenant and id, each with its entries (any number,
	// as stored) without their running totals (DebitsPosted and
	// CreditsPosted are zero: Entries has them).
	Transfers func(*LedgerTransfer, []LedgerEntry) error
	// ReversedTotals, by tenant and transfer id: the stored counters.
	ReversedTotals func(tenant, transferID string, reversed int64) error
}
