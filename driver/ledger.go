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
	// LedgerAccountsInsert inserts accounts, in (tenant, id) order, except
	// those whose id exists in their tenant, and returns the rows it
	// inserted. It never fails on a duplicate id (so the caller's
	// transaction stays usable): a concurrent insert of the same id makes
	// it wait for that transaction's outcome, and the id is then skipped or
	// inserted. Accounts holds each key once.
	LedgerAccountsInsert(ctx context.Context, tx Tx, p *LedgerAccountsInsertParams) ([]LedgerAccount, error)
	// LedgerAccountsGet reads the accounts among Keys that exist, as
	// committed when the statement starts (the ones LedgerAccountsInsert
	// skipped, read by a new statement, are visible).
	LedgerAccountsGet(ctx context.Context, tx Tx, p *LedgerAccountsGetParams) ([]LedgerAccount, error)
	// LedgerAccountGet reads one account; ErrNotFound when absent.
	LedgerAccountGet(ctx context.Context, tx Tx, p *LedgerAccountGetParams) (*LedgerAccount, error)
	// LedgerLock serializes writers of the same transfers and accounts. It
	// first takes a transaction-scoped lock per transfer key (so two posts
	// of one new id cannot both insert it), in one order every writer
	// uses, then row-locks the accounts in (tenant, id) order (so writers
	// on shared accounts queue instead of deadlocking). Holding them, it
	// reads the accounts that exist as committed once locked, the
	// transfers among Find that exist (as LedgerTransfersFind), and the
	// writers' clock. Keys may repeat and span tenants. SQLite has a single
	// writer and only reads. Postgres sends it all in one round trip.
	LedgerLock(ctx context.Context, tx Tx, p *LedgerLockParams) (*LedgerLocked, error)
	// LedgerTransfersGet reads the transfers among IDs that exist.
	LedgerTransfersGet(ctx context.Context, tx Tx, p *LedgerTransfersGetParams) ([]LedgerTransfer, error)
	// LedgerTransfersFind reads the transfers among Keys that exist (keys
	// may span tenants), each with how much of it has been reversed.
	LedgerTransfersFind(ctx context.Context, tx Tx, p *LedgerTransfersFindParams) ([]LedgerFoundTransfer, error)
	// LedgerReversals lists the reversals of a transfer, oldest first.
	LedgerReversals(ctx context.Context, tx Tx, p *LedgerReversalsParams) ([]LedgerTransfer, error)
	// LedgerWrite appends transfers and their entries, moves the accounts'
	// cached totals to their final values and adds to the originals'
	// reversed totals, in one statement on Postgres (SQLite: one per
	// table, in the same transaction). Every transfer and entry is recorded
	// at At. Nothing is read back: a driver may send it with tx's next
	// statement or its commit (see KeyRecord).
	LedgerWrite(ctx context.Context, tx Tx, p *LedgerWriteParams) error
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
	// LedgerClock reads the writers' clock (Postgres: clock_timestamp();
	// SQLite: Now), in whole microseconds, outside any transaction: a
	// pooled connection is taken for one statement and given back at once
	// (SQLite reads no database at all). The ledger waits for an as-of
	// moment with it before the read's transaction begins, so the wait
	// holds no connection.
	LedgerClock(ctx context.Context, p *LedgerClockParams) (time.Time, error)
	// LedgerEntryAsOf reads the account's newest entry recorded at or
	// before AsOf; ErrNotFound when there is none. It is one index lookup,
	// whatever the length of the history.
	LedgerEntryAsOf(ctx context.Context, tx Tx, p *LedgerEntryAsOfParams) (*LedgerEntry, error)
	// LedgerEntries lists an account's entries newest first, starting at
	// MaxSequence, at most Limit.
	LedgerEntries(ctx context.Context, tx Tx, p *LedgerEntriesParams) ([]LedgerEntry, error)
	// LedgerHoldsDue lists open holds whose ExpiresAt the writers' clock
	// (Postgres: clock_timestamp(); SQLite: Now) has reached, soonest
	// first, at most Limit, across tenants. It locks nothing: two workers
	// may both find a hold, and the ledger settles it once.
	LedgerHoldsDue(ctx context.Context, tx Tx, p *LedgerHoldsDueParams) ([]LedgerHold, error)
	// LedgerTransfersList lists a tenant's transfers by id, after After,
	// at most Limit, each with what settled it when it is a hold. With
	// Status "pending" it reads the open holds only; another status keeps
	// the transfers of that status (see ledger.Status), read in id order.
	LedgerTransfersList(ctx context.Context, tx Tx, p *LedgerTransfersListParams) ([]LedgerFoundTransfer, error)
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
	DebitsPending              int64
	CreditsPending             int64
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
	// Pending marks a hold: it moves its accounts' pending totals only.
	Pending bool
	// TimeoutSeconds is a hold's timeout; 0: none.
	TimeoutSeconds int64
	// ExpiresAt is a hold's recorded time plus its timeout; zero: none.
	ExpiresAt time.Time
	// PendingID names the hold a settlement settles; "" unless one.
	PendingID string
	// Settles is what a settlement does to its hold: "post", "void" or
	// "expire"; "" unless one.
	Settles   string
	CreatedAt time.Time
}

// LedgerEntry is one side of a transfer on one account, with the account's
// running totals after it.
type LedgerEntry struct {
	Tenant     string
	AccountID  string
	Sequence   int64
	TransferID string
	Amount     int64
	Credit     bool // false: a debit
	// PendingChange is the entry's change to its side's pending total:
	// +Amount for a hold, minus the held amount for a settlement, 0
	// otherwise.
	PendingChange int64
	// PendingOnly marks an entry that leaves the posted totals alone (a
	// hold, a void, an expiry); any other adds Amount to its side's.
	PendingOnly    bool
	DebitsPosted   int64
	CreditsPosted  int64
	DebitsPending  int64
	CreditsPending int64
	CreatedAt      time.Time
}

// LedgerKey names a row of a tenant: an account or a transfer.
type LedgerKey struct {
	Tenant string
	ID     string
}

type LedgerAccountsInsertParams struct {
	Accounts []LedgerAccount // totals, Sequence, LastEntryAt and CreatedAt are ignored
	Now      time.Time       // the clock for drivers without their own
}

type LedgerAccountsGetParams struct {
	Keys []LedgerKey
}

type LedgerAccountGetParams struct {
	Tenant string
	ID     string
}

type LedgerLockParams struct {
	TransferKeys []LedgerKey
	AccountKeys  []LedgerKey
	// AccountsOf names transfers whose debit and credit accounts are
	// locked with AccountKeys, in the same order: the originals a
	// settlement or reversal moves the accounts of, learnt in the
	// statement that locks them rather than read first. A transfer that
	// does not exist adds none.
	AccountsOf []LedgerKey
	// Find names the transfers to read once the locks are held.
	Find []LedgerKey
	// Now is the clock for drivers without their own.
	Now time.Time
}

// LedgerLocked is what LedgerLock read under its locks.
type LedgerLocked struct {
	// Accounts are the locked accounts that exist.
	Accounts []LedgerAccount
	// Found are the transfers among Find that exist, with their reversed
	// totals.
	Found []LedgerFoundTransfer
	// Clock is the writers' clock (Postgres: clock_timestamp(); SQLite:
	// Now), read once every lock was held, in whole microseconds.
	Clock time.Time
}

type LedgerTransfersGetParams struct {
	Tenant string
	IDs    []string
}

type LedgerTransfersFindParams struct {
	Keys []LedgerKey
}

// LedgerFoundTransfer is a stored transfer and its reversed total (0 when
// nothing of it has been reversed); for a hold, the transfer that settled
// it ("" while it is pending) and what that did.
type LedgerFoundTransfer struct {
	LedgerTransfer
	Reversed  int64
	SettledBy string
	Settled   string
}

type LedgerReversalsParams struct {
	Tenant     string
	TransferID string
}

type LedgerWriteParams struct {
	// Transfers to insert; their CreatedAt is ignored.
	Transfers []LedgerTransfer
	// Entries of those transfers, two each, sequences and running totals
	// filled; their CreatedAt is ignored.
	Entries []LedgerEntry
	// Accounts are the accounts written, each once, with the totals and
	// Sequence of its newest entry in Entries; the other fields are
	// ignored (LastEntryAt becomes the recorded time).
	Accounts []LedgerAccount
	// Reversed adds to the reversed totals of originals, each once.
	Reversed []LedgerReversedAdd
	// Holds are the holds among Transfers, to add to the open holds
	// (ledger_holds), expiring TimeoutSeconds after At; not a hold that
	// Transfers also settles.
	Holds []LedgerHold
	// Released are the holds settled by Transfers, to remove from the
	// open holds; not one that Holds adds.
	Released []LedgerKey
	// At is when every transfer and entry is recorded, and each written
	// account's LastEntryAt, in whole microseconds. The ledger makes it
	// the later of the Clock its locks returned and the accounts' newest
	// LastEntryAt, so that an account's time never goes backwards.
	At time.Time
}

// LedgerHold is an open hold: one not settled yet.
type LedgerHold struct {
	Tenant          string
	TransferID      string
	DebitAccountID  string
	CreditAccountID string
	Amount          int64
	// TimeoutSeconds is the hold's timeout, read by LedgerWrite, which
	// records ExpiresAt from it; 0: none.
	TimeoutSeconds int64
	// ExpiresAt is when the hold expires, as read back; zero: never.
	ExpiresAt time.Time
}

// LedgerReversedAdd adds Add to a transfer's reversed total. Amount is the
// original's amount, the bound the total may not pass.
type LedgerReversedAdd struct {
	Tenant     string
	TransferID string
	Amount     int64
	Add        int64
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

type LedgerClockParams struct {
	// Now is the clock for drivers without their own.
	Now time.Time
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
	// Holds, by tenant and transfer id: the open holds stored.
	Holds func(*LedgerHold) error
}

type LedgerHoldsDueParams struct {
	// Now is the clock for drivers without their own.
	Now time.Time
	// Limit bounds the holds returned.
	Limit int
}

type LedgerTransfersListParams struct {
	Tenant string
	// AccountID keeps the transfers on this account, either side; "": all.
	AccountID string
	// Status keeps the transfers of this status: "pending", "posted",
	// "voided" or "expired"; "": all.
	Status string
	// After keeps the transfers whose id sorts after it; "": from the first.
	After string
	Limit int
}
