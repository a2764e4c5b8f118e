package ledger

import (
	"errors"
	"strings"
)

// Error is a business refusal with a stable code: the request was read and
// judged, and nothing was written. It is an answer to store and replay (HTTP
// 422, or 400 for invalid_request), not a fault to retry. The caller's
// transaction stays usable after it.
type Error struct {
	// Code is stable; see the Err* sentinels. Conflicts with a stored
	// transfer or account name the field: transfer_exists_with_different_amount.
	Code string `json:"code"`
	// Field names the request field at fault, when there is one.
	Field string `json:"field,omitempty"`
	// Message says what was wrong, for people.
	Message string `json:"message"`

	prefix bool // a sentinel that matches every code it prefixes
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "ledger: " + e.Code
	}
	return "ledger: " + e.Code + ": " + e.Message
}

// Is matches a sentinel of the same code, so errors.Is(err,
// ledger.ErrInsufficientFunds) works; ErrTransferExists and ErrAccountExists
// match every field's variant.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.prefix {
		return strings.HasPrefix(e.Code, t.Code)
	}
	return t.Code == e.Code
}

// The stable codes. Compare with errors.Is; read Code for the exact string.
var (
	ErrInvalidRequest           = &Error{Code: "invalid_request"}
	ErrInvalidAmount            = &Error{Code: "invalid_amount"}
	ErrAmountOverflow           = &Error{Code: "amount_overflow"}
	ErrAccountNotFound          = &Error{Code: "account_not_found"}
	ErrCurrencyMismatch         = &Error{Code: "currency_mismatch"}
	ErrSameAccount              = &Error{Code: "same_account"}
	ErrInsufficientFunds        = &Error{Code: "insufficient_funds"}
	ErrTransferNotFound         = &Error{Code: "transfer_not_found"}
	ErrReversalExceedsRemaining = &Error{Code: "reversal_exceeds_remaining"}
	ErrCannotReverseReversal    = &Error{Code: "cannot_reverse_reversal"}
	// ErrCannotReversePending refuses a reversal of a hold or of a void or
	// expiry, which moved nothing posted: a hold is voided, not reversed.
	ErrCannotReversePending = &Error{Code: "cannot_reverse_pending"}
	// ErrInvalidTimeout refuses a hold's timeout that is not whole
	// seconds from 1 to 400 days.
	ErrInvalidTimeout = &Error{Code: "invalid_timeout"}
	// ErrTransferNotPending refuses a settlement of a transfer that is not
	// a hold.
	ErrTransferNotPending = &Error{Code: "transfer_not_pending"}
	// ErrPendingAlreadyPosted, ErrPendingAlreadyVoided and
	// ErrPendingAlreadyExpired refuse a settlement of a hold settled
	// already: a hold settles once. Expired also refuses a post or void of
	// a hold whose timeout has passed, before its expiry is written.
	ErrPendingAlreadyPosted  = &Error{Code: "pending_transfer_already_posted"}
	ErrPendingAlreadyVoided  = &Error{Code: "pending_transfer_already_voided"}
	ErrPendingAlreadyExpired = &Error{Code: "pending_transfer_already_expired"}
	// ErrAmountExceedsPending refuses a post of more than is held.
	ErrAmountExceedsPending = &Error{Code: "amount_exceeds_pending"}
	// ErrTransferExists matches transfer_exists_with_different_<field>: the
	// transfer id is taken by a transfer that differs in that field.
	ErrTransferExists = &Error{Code: "transfer_exists_with_different_", prefix: true}
	// ErrAccountExists matches account_exists_with_different_<field>.
	ErrAccountExists = &Error{Code: "account_exists_with_different_", prefix: true}
)

// ErrNotFound is returned (wrapped) by GetAccount, GetTransfer, Balance and
// Entries for an id the tenant does not have.
var ErrNotFound = errors.New("ledger: not found")

// ErrNeedsWriteTx is returned (wrapped) by Balance and Entries asked for a
// moment at or after the account's newest entry in a read-only
// transaction. Entries up to that moment may still be committing, and only
// a read-write transaction can wait for them; the transaction is still
// usable. Read again in a read-write transaction (READ COMMITTED on
// Postgres) and roll it back: the read writes nothing.
var ErrNeedsWriteTx = errors.New("ledger: as_of at or after the account's newest entry must be read in a " +
	"read-write transaction, which waits for writers still committing")

func newError(code, field, msg string) *Error {
	return &Error{Code: code, Field: field, Message: msg}
}

func invalid(field, msg string) *Error { return newError(ErrInvalidRequest.Code, field, msg) }
