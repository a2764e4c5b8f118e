package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
)

// MaxAsOfWait bounds how far ahead of the writers' clock (the database's on
// Postgres, Config.Clock on SQLite) an as-of read may ask: AwaitMoment waits
// until the clock passes such a moment, and refuses one further ahead with
// invalid_request (field as_of). An answer for a moment the clock has not
// reached could still change, so it is never given early.
const MaxAsOfWait = time.Second

// AwaitMoment waits until the writers' clock has passed at (whole
// microseconds), at most MaxAsOfWait, holding no transaction and no
// connection while it waits: call it before beginning the transaction that
// reads as of at. A moment further ahead is refused with invalid_request
// (field as_of) without waiting. A moment already passed costs one clock
// reading (on Postgres, one statement on a pooled connection).
//
// Balance and Entries never wait inside the caller's transaction — a
// transaction, or the connection it pins, held while time passes is taken
// from every other request, whatever its tenant — so a moment not yet
// passed when they run is refused there.
func (l *Ledger) AwaitMoment(ctx context.Context, at time.Time) error {
	at = at.Truncate(time.Microsecond) // entries are recorded in microseconds
	var waited time.Duration
	for {
		clock, err := l.d.LedgerClock(ctx, &driver.LedgerClockParams{Now: l.now()})
		if err != nil {
			return fmt.Errorf("ledger: read the clock for as of %s: %w", at.Format(time.RFC3339Nano), err)
		}
		if clock.After(at) {
			return nil
		}
		ahead := at.Sub(clock) + time.Microsecond // until the clock passes at
		// One wait normally suffices; the budget allows a second for a
		// database clock that runs a little slower than this process's.
		if waited+ahead > MaxAsOfWait+maxAsOfSlack {
			return notPassed(at, clock)
		}
		if err := sleep(ctx, ahead); err != nil {
			return err
		}
		waited += ahead
	}
}

// maxAsOfSlack is the wait AwaitMoment allows beyond MaxAsOfWait in all,
// for a database clock slower than the process's.
const maxAsOfSlack = 10 * time.Millisecond

// settle makes the account's history up to at (whole microseconds) final in
// tx, so that a read as of at by a later statement of tx is the answer
// forever.
//
// A moment before the account's newest entry is final already, in any
// transaction: every writer that stamped at or before it held the account's
// lock before the writer of the newest entry did, and so committed before
// that writer took the lock — before this transaction saw its entry — while
// every writer still to come stamps no earlier than that entry. A later
// moment is settled by the driver (LedgerSettle): it waits for the
// account's writers still committing and reads the writers' clock under the
// account's lock; a clock past at means every later writer stamps past at.
// A moment the clock has not passed is refused, not waited for: waiting
// would hold tx (see AwaitMoment).
func (l *Ledger) settle(ctx context.Context, tx driver.Tx, acct *driver.LedgerAccount, at time.Time) error {
	if at.Before(acct.LastEntryAt) {
		return nil
	}
	res, err := l.d.LedgerSettle(ctx, tx, &driver.LedgerSettleParams{
		Tenant: acct.Tenant, AccountID: acct.ID, After: at, Now: l.now(),
	})
	switch {
	case errors.Is(err, driver.ErrReadOnly):
		return fmt.Errorf("ledger: as of %s on account %q: %w", at.Format(time.RFC3339Nano), acct.ID, ErrNeedsWriteTx)
	case errors.Is(err, driver.ErrSerialization):
		return fmt.Errorf("ledger: as of %s on account %q: a writer committed after this transaction's snapshot; "+
			"read as_of at or after the newest entry in a READ COMMITTED transaction: %w", at.Format(time.RFC3339Nano), acct.ID, err)
	case err != nil:
		return fmt.Errorf("ledger: settle account %q as of %s: %w", acct.ID, at.Format(time.RFC3339Nano), err)
	}
	// Not Locked: the clock had not passed at. Locked with a clock not
	// past at: it stepped backwards after the first reading. Either way no
	// answer can be promised.
	if !res.Locked || !res.Clock.After(at) {
		return notPassed(at, res.Clock)
	}
	return nil
}

func notPassed(at, clock time.Time) *Error {
	return invalid("as_of", fmt.Sprintf("as_of %s has not passed yet (the ledger's clock reads %s); "+
		"its answer could still change, so a moment at most %s ahead is waited for (before the read begins) and a later one refused",
		at.Format(time.RFC3339Nano), clock.Format(time.RFC3339Nano), MaxAsOfWait))
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
