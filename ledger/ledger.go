// Package ledger is idem's append-only double-entry ledger: accounts,
// transfers, reversals, and balances as they were believed at any time.
//
// Every transfer writes exactly two entries, a debit and a credit of the same
// amount. Each entry carries its account's sequence number and the running
// debits, credits and balance after it, so "what did we believe at 14:02?"
// is one index lookup rather than a sum over history. Transfers and entries
// are never updated or deleted (the database's triggers refuse it); a
// correction is a reversal: a new transfer linked to the original with the
// accounts swapped.
//
// A transfer id is the idempotency key of the ledger itself, forever: posting
// the same id again with the same fields returns the stored transfer
// (Existing set) and writes nothing; with any field different it is refused
// with transfer_exists_with_different_<field>. So one bet can never become
// two ledger lines, whatever retries happen above.
//
// Every method takes the caller's transaction and never begins, commits or
// rolls it back. A refusal (*Error) writes nothing and leaves the
// transaction usable, so a caller can record the refusal in the same
// transaction. The seam for messages is that same transaction: right after
// Post or Reverse succeeds, the caller enqueues its event with the
// *outbox.Outbox that outbox.New made (ob.Enqueue(ctx, tx, …):
// transfer.created, or transfer.reversed for a reversal) and commits once, so the ledger lines and the message exist
// together or not at all. Skip the enqueue when Transfer.Existing is set:
// the first post already enqueued it.
//
// Batches: Post is all or nothing; PostEach and Apply take up to
// Config.MaxBatch transfers or operations (Apply: of several tenants,
// accounts and reversals too) and accept or refuse each on its own, with
// the results one-at-a-time calls in that order would give. Every call
// makes the same few statements whatever its size, and the transfers of
// one call share one recorded time.
//
// Concurrency: writers lock the accounts they touch in a fixed order (and
// the new transfer ids), so transfers on hot accounts queue instead of
// deadlocking or losing updates. On Postgres the recorded time is the
// database clock read after the locks are held, never before the account's
// previous entry, so within an account time order is sequence order.
//
// Reads as of a moment are final: the answer for a moment, once given, is
// the answer forever. A moment before the account's newest entry is read
// in any transaction; a later one waits for the account's writers still
// committing, which takes a read-write transaction (ErrNeedsWriteTx in a
// read-only one). See Balance.
package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/tracing"
)

// Config configures New. The zero value is usable.
type Config struct {
	// Clock is the time source for answers "as of now" and for recorded
	// times on SQLite, which has no shared clock of its own (Postgres
	// records its own clock_timestamp()); on SQLite it is also the clock
	// an as-of read waits for (see MaxAsOfWait). It must not step
	// backwards: final as-of answers rely on it. Default time.Now.
	Clock func() time.Time
	// NewID generates ids for accounts and transfers posted without one.
	// Default: a time-ordered UUIDv7. Results must be valid ids (1..128
	// characters of letters, digits and "-_.:~").
	NewID func() string
	// MaxBatch bounds the transfers of one Post or PostEach and the
	// operations of one Apply. Default 100; bound 1..1000.
	MaxBatch int
	// TracerProvider receives a span per write (ledger.Post,
	// ledger.PostEach, ledger.Apply, ledger.Reverse, ledger.CreateAccount).
	// Default
	// otel.GetTracerProvider(), the API's no-op until the program sets one.
	TracerProvider trace.TracerProvider
}

const (
	defaultMaxBatch = 100
	maxMaxBatch     = 1000
)

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.NewID == nil {
		c.NewID = newUUIDv7
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = defaultMaxBatch
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

func (c Config) validate() error {
	if c.MaxBatch < 1 || c.MaxBatch > maxMaxBatch {
		return fmt.Errorf("ledger: MaxBatch %d is outside 1..%d", c.MaxBatch, maxMaxBatch)
	}
	return nil
}

func newUUIDv7() string {
	// NewV7 fails only when the system's random source does; a ledger that
	// cannot draw ids must not pretend it can.
	return uuid.Must(uuid.NewV7()).String()
}

// Ledger posts and reads transfers through a driver.
type Ledger struct {
	d      driver.Driver
	cfg    Config
	tracer trace.Tracer
}

// New returns a Ledger over d.
func New(d driver.Driver, cfg Config) (*Ledger, error) {
	if d == nil {
		return nil, errors.New("ledger: driver is nil")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Ledger{d: d, cfg: cfg, tracer: cfg.TracerProvider.Tracer(tracing.Module + "/ledger")}, nil
}

// endSpan ends a write's span, with an error status when it failed (a
// refusal included: the write did not happen).
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (l *Ledger) now() time.Time { return l.cfg.Clock().UTC() }

// checkTx refuses a nil transaction or one of another database
// (driver.CheckTx).
func (l *Ledger) checkTx(tx driver.Tx) error {
	if err := driver.CheckTx(l.d, tx); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// Flags are an account's balance constraints.
type Flags struct {
	// DebitsMustNotExceedCredits refuses any transfer that would leave the
	// account's debits above its credits (a wallet that cannot go negative).
	DebitsMustNotExceedCredits bool `json:"debits_must_not_exceed_credits"`
	// CreditsMustNotExceedDebits is the mirror rule.
	CreditsMustNotExceedDebits bool `json:"credits_must_not_exceed_debits"`
}

// NewAccount is a request to create an account.
type NewAccount struct {
	ID       string          `json:"id,omitempty"` // empty: generated
	Currency string          `json:"currency"`
	Flags    Flags           `json:"flags"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Account is an account with its current totals, all from one snapshot.
// Balance is CreditsPosted minus DebitsPosted; DebitsPending and
// CreditsPending are what its open holds reserve; Available is Balance
// minus DebitsPending: what the account can still give, holds counted.
type Account struct {
	ID             string          `json:"id"`
	Currency       string          `json:"currency"`
	Flags          Flags           `json:"flags"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	DebitsPosted   int64           `json:"debits_posted"`
	CreditsPosted  int64           `json:"credits_posted"`
	Balance        int64           `json:"balance"`
	DebitsPending  int64           `json:"debits_pending"`
	CreditsPending int64           `json:"credits_pending"`
	Available      int64           `json:"available"`
	CreatedAt      time.Time       `json:"created_at"`
	// Existing is set when CreateAccount found an identical account.
	Existing bool `json:"-"`
}

// NewTransfer is a request to move Amount from DebitAccountID to
// CreditAccountID.
type NewTransfer struct {
	ID              string          `json:"id,omitempty"` // empty: generated
	DebitAccountID  string          `json:"debit_account_id"`
	CreditAccountID string          `json:"credit_account_id"`
	Amount          int64           `json:"amount"`
	Currency        string          `json:"currency"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
	// Pending makes the transfer a hold: it moves nothing posted, and adds
	// Amount to the debit account's DebitsPending and the credit account's
	// CreditsPending until Settle posts or voids it or it expires
	// (ExpireDue). Account flags count it: a hold can never be spent twice.
	Pending bool `json:"pending,omitempty"`
	// Timeout is how long after it is recorded a hold expires: whole
	// seconds from 1s to 400 days (MaxTimeout); 0: never. Pending only.
	Timeout time.Duration `json:"-"`
}

// MaxTimeout bounds a hold's Timeout.
const MaxTimeout = 400 * 24 * time.Hour

// Settles is what a settlement does to its hold.
type Settles string

const (
	// SettlePost posts (part of) the held amount and releases the rest.
	SettlePost Settles = "post"
	// SettleVoid releases the whole hold.
	SettleVoid Settles = "void"
	// SettleExpire releases a hold whose timeout has passed; only
	// ExpireDue writes it.
	SettleExpire Settles = "expire"
)

// NewSettlement is a request to post or void a hold. It is a transfer of
// its own, linked to the hold by PendingID, between the hold's accounts
// in its currency. A hold is settled once: by one post, one void or its
// expiry, whatever races.
type NewSettlement struct {
	// PendingID is the hold to settle.
	PendingID string `json:"pending_id"`
	// Settles is SettlePost or SettleVoid.
	Settles Settles `json:"settles"`
	// ID is the settlement's own id, its idempotency key; empty: generated.
	ID string `json:"id,omitempty"`
	// Amount is what a post moves, at most the held amount (the rest is
	// released); 0 posts all of it. A void takes no amount: it releases
	// the whole hold, and its transfer's Amount is the held amount.
	Amount   int64           `json:"amount,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Status is where a transfer stands. A hold is pending until a settlement
// names it, then what that settlement did: posted, voided or expired. A
// settlement has the status it gives its hold; every other transfer is
// posted.
type Status string

const (
	StatusPosted  Status = "posted"
	StatusPending Status = "pending"
	StatusVoided  Status = "voided"
	StatusExpired Status = "expired"
)

// statusOf is the status a settlement of kind settles gives its hold.
func statusOf(settles string) Status {
	switch Settles(settles) {
	case SettlePost:
		return StatusPosted
	case SettleVoid:
		return StatusVoided
	case SettleExpire:
		return StatusExpired
	}
	return StatusPending
}

// NewReversal is a request to reverse (part of) a transfer.
type NewReversal struct {
	// TransferID is the transfer to reverse.
	TransferID string `json:"transfer_id"`
	// ID is the reversal's own id, its idempotency key; empty: generated.
	ID string `json:"id,omitempty"`
	// Amount to reverse; 0 reverses all that remains.
	Amount int64 `json:"amount,omitempty"`
	// Reason is kept on the reversal; at most 1024 bytes.
	Reason   string          `json:"reason,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Transfer is a stored transfer. A reversal has ReversesID (and maybe
// Reason); an original read by GetTransfer lists its Reversals. A hold has
// Pending (and TimeoutSeconds and ExpiresAt when it has a timeout), and
// SettledBy once settled; a settlement has PendingID and Settles.
type Transfer struct {
	ID              string          `json:"id"`
	DebitAccountID  string          `json:"debit_account_id"`
	CreditAccountID string          `json:"credit_account_id"`
	Amount          int64           `json:"amount"`
	Currency        string          `json:"currency"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
	ReversesID      string          `json:"reverses_id,omitempty"`
	Reason          string          `json:"reason,omitempty"`
	Status          Status          `json:"status"`
	Pending         bool            `json:"pending,omitempty"`
	TimeoutSeconds  int64           `json:"timeout_seconds,omitempty"`
	ExpiresAt       *time.Time      `json:"expires_at,omitempty"`
	SettledBy       string          `json:"settled_by,omitempty"`
	PendingID       string          `json:"pending_id,omitempty"`
	Settles         Settles         `json:"settles,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	Reversals       []Transfer      `json:"reversals,omitempty"`
	// Existing is set when an identical transfer with this id was already
	// stored: nothing was written, and the caller should not emit its event
	// again.
	Existing bool `json:"-"`
}

// Direction is the side of an entry.
type Direction string

const (
	Debit  Direction = "debit"
	Credit Direction = "credit"
)

// Entry is one side of a transfer on one account, with the account's running
// totals after it.
type Entry struct {
	TransferID    string    `json:"transfer_id"`
	AccountID     string    `json:"account_id"`
	Sequence      int64     `json:"sequence"`
	Amount        int64     `json:"amount"`
	Direction     Direction `json:"direction"`
	DebitsPosted  int64     `json:"debits_posted"`
	CreditsPosted int64     `json:"credits_posted"`
	Balance       int64     `json:"balance"`
	// DebitsPending and CreditsPending are the account's pending totals
	// after the entry. An entry of a hold, a void or an expiry moves only
	// these; a post's moves both.
	DebitsPending  int64     `json:"debits_pending"`
	CreditsPending int64     `json:"credits_pending"`
	CreatedAt      time.Time `json:"created_at"`
}

// Balance is an account's totals as believed at AsOf, all from one entry
// (see Account for what each means).
type Balance struct {
	AccountID      string    `json:"account_id"`
	AsOf           time.Time `json:"as_of"`
	DebitsPosted   int64     `json:"debits_posted"`
	CreditsPosted  int64     `json:"credits_posted"`
	Balance        int64     `json:"balance"`
	DebitsPending  int64     `json:"debits_pending"`
	CreditsPending int64     `json:"credits_pending"`
	Available      int64     `json:"available"`
}

// totals fills a Balance from running totals.
func totals(b *Balance, debits, credits, debitsPending, creditsPending int64) {
	b.DebitsPosted, b.CreditsPosted, b.DebitsPending, b.CreditsPending = debits, credits, debitsPending, creditsPending
	b.Balance = credits - debits
	b.Available = b.Balance - debitsPending
}

// AccountQuery names an account for GetAccount.
type AccountQuery struct {
	// Tenant owns the account. Required.
	Tenant string
	// ID is the account's id. Required.
	ID string
}

// TransferQuery names a transfer for GetTransfer.
type TransferQuery struct {
	// Tenant owns the transfer. Required.
	Tenant string
	// ID is the transfer's id. Required.
	ID string
}

// BalanceQuery asks for an account's totals as believed at a moment.
type BalanceQuery struct {
	// Tenant owns the account. Required.
	Tenant string
	// AccountID is the account's id. Required.
	AccountID string
	// AsOf is the moment; nil: now, the latest committed totals. The zero
	// time is a moment like any other (before every entry).
	AsOf *time.Time
}

// EntriesQuery selects a page of an account's entries, newest first.
type EntriesQuery struct {
	// Tenant owns the account. Required.
	Tenant string
	// AccountID is the account's id. Required.
	AccountID string
	// AsOf keeps only entries recorded at or before it; nil: every entry
	// committed now. The zero time is a moment like any other (before
	// every entry).
	AsOf *time.Time
	// Limit bounds the page. Default 100; bound 1..1000.
	Limit int
	// After is the cursor a previous page returned; empty: the newest.
	After string
}

const (
	defaultEntriesLimit = 100
	maxEntriesLimit     = 1000
)

func accountFromRow(a *driver.LedgerAccount) Account {
	return Account{
		ID:       a.ID,
		Currency: a.Currency,
		Flags: Flags{
			DebitsMustNotExceedCredits: a.DebitsMustNotExceedCredits,
			CreditsMustNotExceedDebits: a.CreditsMustNotExceedDebits,
		},
		Metadata:       json.RawMessage(a.Metadata),
		DebitsPosted:   a.DebitsPosted,
		CreditsPosted:  a.CreditsPosted,
		Balance:        a.CreditsPosted - a.DebitsPosted,
		DebitsPending:  a.DebitsPending,
		CreditsPending: a.CreditsPending,
		Available:      a.CreditsPosted - a.DebitsPosted - a.DebitsPending,
		CreatedAt:      a.CreatedAt,
	}
}

func transferFromRow(t *driver.LedgerTransfer) Transfer {
	var expires *time.Time
	if !t.ExpiresAt.IsZero() {
		e := t.ExpiresAt
		expires = &e
	}
	status := StatusPosted
	switch {
	case t.Pending:
		status = StatusPending
	case t.Settles != "":
		status = statusOf(t.Settles)
	}
	return Transfer{
		ExpiresAt:       expires,
		ID:              t.ID,
		DebitAccountID:  t.DebitAccountID,
		CreditAccountID: t.CreditAccountID,
		Amount:          t.Amount,
		Currency:        t.Currency,
		Metadata:        json.RawMessage(t.Metadata),
		ReversesID:      t.ReversesID,
		Reason:          t.Reason,
		Status:          status,
		Pending:         t.Pending,
		TimeoutSeconds:  t.TimeoutSeconds,
		PendingID:       t.PendingID,
		Settles:         Settles(t.Settles),
		CreatedAt:       t.CreatedAt,
	}
}

// transferFound is transferFromRow for a transfer read with what settled
// it: a hold's status is its settlement's.
func transferFound(t *driver.LedgerTransfer, settledBy, settled string) Transfer {
	out := transferFromRow(t)
	if t.Pending {
		out.Status, out.SettledBy = statusOf(settled), settledBy
	}
	return out
}

func entryFromRow(e *driver.LedgerEntry) Entry {
	dir := Debit
	if e.Credit {
		dir = Credit
	}
	return Entry{
		TransferID:     e.TransferID,
		AccountID:      e.AccountID,
		Sequence:       e.Sequence,
		Amount:         e.Amount,
		Direction:      dir,
		DebitsPosted:   e.DebitsPosted,
		CreditsPosted:  e.CreditsPosted,
		Balance:        e.CreditsPosted - e.DebitsPosted,
		DebitsPending:  e.DebitsPending,
		CreditsPending: e.CreditsPending,
		CreatedAt:      e.CreatedAt,
	}
}
