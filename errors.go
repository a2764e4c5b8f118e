package idem

import (
	"errors"
	"fmt"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/seal"
)

var (
	// ErrKeyMissing: an operation that needs an idempotency key has none.
	// It is rejected, never run.
	ErrKeyMissing = errors.New("idem: idempotency key missing")
	// ErrKeyInvalid: the key is empty, too long, or not visible ASCII. The
	// error is a *KeyError.
	ErrKeyInvalid = errors.New("idem: idempotency key invalid")
	// ErrKeyReused: the key was used before with a different request. The
	// error is a *ReusedError that carries what was stored.
	ErrKeyReused = errors.New("idem: idempotency key reused with a different request")
	// ErrKeyExpired: the key's work was done, and its answer is no longer
	// kept (Config.Retention passed) while the key is still remembered
	// (Config.Memory). Nothing was done again. A client that needs the
	// result looks it up by its own means; one that means a new operation
	// sends a new key.
	ErrKeyExpired = errors.New("idem: the work was done; its answer is no longer kept")
	// ErrInFlight: another copy with the same key is still running and did
	// not finish within the wait. Nothing was done; retry later.
	ErrInFlight = errors.New("idem: request with this key is in flight")
	// ErrInvalidBody: the body to fingerprint is not JSON.
	ErrInvalidBody = errors.New("idem: body is not valid JSON")
	// ErrPanicked: the work panicked. Everything rolled back, nothing was
	// stored, and the key is free for a retry. The error is a *PanicError.
	ErrPanicked = errors.New("idem: work panicked")
	// ErrBusy: a Batcher could not take the request: more requests wait
	// for a batch than BatchConfig.MaxQueued, this one waited longer than
	// MaxWait for a place other scopes held, or the batcher is closed.
	// Nothing was done; retry later.
	ErrBusy = errors.New("idem: too busy to take the request")
	// ErrUnavailable: the database is unreachable. Nothing was stored; retry
	// later. It is driver.ErrUnavailable. (A broker that cannot be reached
	// is outbox.ErrBrokerUnavailable.)
	ErrUnavailable = driver.ErrUnavailable
	// ErrNotFound: Lookup found no live record for the key. It is
	// driver.ErrNotFound.
	ErrNotFound = driver.ErrNotFound
	// ErrUnreplicated: the work committed on the database's primary, but
	// the database gave up waiting for the synchronous standbys it must
	// wait for, so a failover may lose it: it is not acknowledged. A
	// retry with the same key replays what the primary holds (or, after a
	// failover that lost it, does the work once). It is
	// driver.ErrUnreplicated; IsRetryable is false (something committed).
	ErrUnreplicated = driver.ErrUnreplicated
	// ErrClaimNotFirst: DoTx was given a transaction that is not READ
	// COMMITTED or wrote before its first claim (checked on PostgreSQL).
	// Nothing was claimed or run; roll the transaction back and call DoTx
	// before the transaction's first write.
	// It is driver.ErrClaimNotFirst.
	ErrClaimNotFirst = driver.ErrClaimNotFirst
	// ErrCommitUnknown: COMMIT was sent but its answer was lost (the
	// connection broke, or the context ended, while it was awaited), so the
	// work may have committed. It is not acknowledged. A retry with the
	// same key replays what committed, or does the work once if nothing
	// did. It is driver.ErrCommitUnknown; IsRetryable is false (something
	// may have committed), and it is not ErrUnavailable.
	ErrCommitUnknown = driver.ErrCommitUnknown
	// ErrForgotten: the stored outcome's tenant was forgotten (its data
	// key destroyed: idem tenants forget), so it can never be replayed. The
	// key stays claimed and the work is not run again; idemhttp answers
	// 410 answer_forgotten. It is seal.ErrForgotten.
	ErrForgotten = seal.ErrForgotten
)

// KeyError says why a key is invalid. errors.Is(err, ErrKeyInvalid) holds.
type KeyError struct {
	Reason string
}

func (e *KeyError) Error() string        { return "idem: idempotency key invalid: " + e.Reason }
func (e *KeyError) Is(target error) bool { return target == ErrKeyInvalid }

// ReusedError is returned when a key arrives with a request whose
// fingerprint differs from the one stored with it. errors.Is(err,
// ErrKeyReused) holds. Stored is the first request's outcome.
type ReusedError struct {
	Key    Key
	Stored Outcome
}

func (e *ReusedError) Error() string {
	return "idem: idempotency key " + e.Key.Key + " reused with a different request"
}
func (e *ReusedError) Is(target error) bool { return target == ErrKeyReused }

// PanicError is returned when work panics: the keeper recovered, rolled
// the transaction back and logged the panic with the key and Stack.
// errors.Is(err, ErrPanicked) holds, and so does errors.Is(err, v) when the
// panic value v is itself an error (http.ErrAbortHandler, for one).
type PanicError struct {
	Key   Key
	Value any    // what work passed to panic
	Stack []byte // the panicking goroutine's stack (runtime/debug.Stack)
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("idem: work for idempotency key %s panicked: %v", e.Key.Key, e.Value)
}
func (e *PanicError) Is(target error) bool { return target == ErrPanicked }

// Unwrap returns the panic value when it is an error, or nil.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// IsRetryable reports whether err is a transient fault: nothing was
// committed, and the same request may be sent again later (in flight,
// database unavailable, lock or serialization timeouts, a busy Batcher).
func IsRetryable(err error) bool {
	return errors.Is(err, ErrInFlight) || errors.Is(err, ErrBusy) || driver.IsRetryable(err)
}
