package idemclient

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrBadInput is what a request or a config the client refuses before
// sending anything wraps: a base URL without a scheme, a key over 255
// characters, a body that cannot be replayed where one must be, a negative
// budget. The conformance cases call it "invalid_request".
var ErrBadInput = errors.New("idemclient: bad input")

// ErrBodyNotReplayable is returned, before anything is sent, for a
// request whose body cannot be sent again under
// Policy.RequireReplayableBody. It wraps ErrBadInput.
var ErrBodyNotReplayable = fmt.Errorf("%w: the body cannot be sent again (no GetBody)", ErrBadInput)

// ErrBudgetExhausted is matched by a *BudgetError: every attempt of the
// budget got an answer or an error worth retrying.
var ErrBudgetExhausted = errors.New("idemclient: retry budget exhausted")

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadInput}, args...)...)
}

// BudgetError is the error of a request whose attempts all got an answer
// or an error worth retrying: the last one is kept. Whether the operation
// happened is unknown: send it again later with the same key.
type BudgetError struct {
	Attempts int
	Status   int    // the last answer's status; 0 after a transport error
	Code     string // the last answer's problem code, if any
	Err      error  // the last transport error, if any
}

func (e *BudgetError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("idemclient: retry budget exhausted after %d attempts, the last: %v", e.Attempts, e.Err)
	}
	return fmt.Sprintf("idemclient: retry budget exhausted after %d attempts, the last answered %d %s", e.Attempts, e.Status, e.Code)
}

// Is matches ErrBudgetExhausted.
func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExhausted }

// Unwrap is the last transport error, if any.
func (e *BudgetError) Unwrap() error { return e.Err }

// CheckKey reports whether key is a valid Idempotency-Key: 1 to 255
// visible ASCII characters (0x21-0x7E), as idem's server requires.
func CheckKey(key string) error {
	if key == "" {
		return badInput("the Idempotency-Key is empty")
	}
	if len(key) > MaxKeyLength {
		return badInput("the Idempotency-Key is %d characters, over %d", len(key), MaxKeyLength)
	}
	for i := range len(key) {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return badInput("the Idempotency-Key's character %d is not visible ASCII", i+1)
		}
	}
	return nil
}

// NewKey returns a new key: a UUIDv7 (RFC 9562), whose first 48 bits are
// the time in milliseconds and the rest random, so that keys sort by
// creation and index well where the caller stores them.
func NewKey() (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[6:]); err != nil {
		return "", err
	}
	ms := uint64(time.Now().UnixMilli())
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(u[:6], ts[2:])
	u[6] = 0x70 | u[6]&0x0f // version 7
	u[8] = 0x80 | u[8]&0x3f // variant 10
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// Code is a problem's stable code (docs/api.md). A *Problem matches the
// Code it carries: errors.Is(err, idemclient.ErrInsufficientFunds), or
// errors.Is(err, idemclient.Code("transfer_exists_with_different_amount")).
type Code string

func (c Code) Error() string { return "idem: " + string(c) }

// The stable codes of idem's API.
const (
	ErrInvalidRequest        = Code("invalid_request")
	ErrIdempotencyKeyMissing = Code("idempotency_key_missing")
	ErrIdempotencyKeyInvalid = Code("idempotency_key_invalid")
	ErrIdempotencyKeyReused  = Code("idempotency_key_reused")
	// ErrIdempotencyKeyExpired (409) is final, never retried: the work
	// was done once, long enough ago that its answer is no longer kept
	// (the server's --key-retention), and it is not done again. Read the
	// result by its own means (GetTransfer, Transfers); a new operation
	// takes a new key.
	ErrIdempotencyKeyExpired    = Code("idempotency_key_expired")
	ErrRequestInFlight          = Code("request_in_flight")
	ErrBodyTooLarge             = Code("body_too_large")
	ErrUnsupportedMediaType     = Code("unsupported_media_type")
	ErrMisdirectedRequest       = Code("misdirected_request")
	ErrUnauthorized             = Code("unauthorized")
	ErrNotFound                 = Code("not_found")
	ErrUnavailable              = Code("unavailable")
	ErrInternal                 = Code("internal_error")
	ErrAccountNotFound          = Code("account_not_found")
	ErrCurrencyMismatch         = Code("currency_mismatch")
	ErrSameAccount              = Code("same_account")
	ErrInsufficientFunds        = Code("insufficient_funds")
	ErrAmountOverflow           = Code("amount_overflow")
	ErrReversalExceedsRemaining = Code("reversal_exceeds_remaining")
	ErrCannotReverseReversal    = Code("cannot_reverse_reversal")
	ErrCannotReversePending     = Code("cannot_reverse_pending")
	ErrTransferNotPending       = Code("transfer_not_pending")
	ErrAmountExceedsPending     = Code("amount_exceeds_pending")
	ErrPendingAlreadyPosted     = Code("pending_transfer_already_posted")
	ErrPendingAlreadyVoided     = Code("pending_transfer_already_voided")
	ErrPendingAlreadyExpired    = Code("pending_transfer_already_expired")
)

// Problem is a final answer that is not 2xx: an RFC 9457 problem, or the
// status alone when the body is not one. Replayed is true when idem
// answered with a stored outcome (a business refusal is stored like a
// success, and its retry gets it again).
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Code     string `json:"code"`
	Replayed bool   `json:"-"`
	// Header and Body are the answer's, as received.
	Header http.Header `json:"-"`
	Body   []byte      `json:"-"`
}

func (p *Problem) Error() string {
	s := fmt.Sprintf("idem: %d", p.Status)
	if p.Code != "" {
		s += " " + p.Code
	}
	if p.Detail != "" {
		s += ": " + p.Detail
	} else if p.Title != "" {
		s += ": " + p.Title
	}
	return s
}

// Is matches the Code the problem carries.
func (p *Problem) Is(target error) bool {
	c, ok := target.(Code)
	return ok && p.Code != "" && string(c) == p.Code
}
