package idemhttp

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/problem"
)

// Problem is an RFC 9457 problem details answer (application/problem+json)
// of idem's HTTP surfaces: this middleware, the webhook intake (package
// webhook) and idem serve. Status and Code are what a client acts on and
// are stable; Detail is for people.
type Problem struct {
	Status int
	Code   string
	Detail string
	// RetryAfter, when positive, is sent as Retry-After in whole seconds,
	// rounded up (at least 1).
	RetryAfter time.Duration
}

// ProblemFor is the one mapping from an error of idem (the keeper, the
// database, the request's context) to its answer, used by this middleware,
// the webhook intake and idem serve:
//
//	idem.ErrKeyMissing                  400 idempotency_key_missing
//	idem.ErrKeyInvalid                  400 idempotency_key_invalid (the *KeyError says why)
//	idem.ErrInvalidBody                 400 invalid_request
//	idem.ErrKeyReused                   422 idempotency_key_reused
//	idem.ErrKeyExpired                  409 idempotency_key_expired: done, the answer
//	                                        no longer kept; never done again
//	idem.ErrInFlight                    409 request_in_flight, Retry-After
//	idem.ErrUnreplicated                503 unavailable, Retry-After: committed on the
//	                                        primary only, not acknowledged; the retry
//	                                        with the same key replays it
//	idem.ErrCommitUnknown               503 unavailable, Retry-After: the commit's answer
//	                                        was lost, it may have committed; the retry
//	                                        with the same key replays it or does it once
//	driver.ErrStatementTimeout          503 unavailable, Retry-After: nothing was stored
//	driver.ErrReadOnlyTransaction       503 unavailable, Retry-After: nothing was stored
//	database unavailable, lock or       503 unavailable, Retry-After: nothing was
//	serialization timeout, deadline         stored, a retry may succeed
//	context.Canceled                    503 unavailable, Retry-After (the client went away)
//	idem.ErrForgotten                   410 answer_forgotten: the key's stored answer
//	                                        belongs to a forgotten tenant; nothing ran
//	idem.ErrNotFound                    404 not_found
//	idem.ErrPanicked, anything else     500 internal_error
//
// A 500 is a fault nobody expected: the surface logs it (a panic was logged
// by the keeper, with its stack). retryAfter is the Retry-After of the 409 and 503 answers (idemhttp's and
// the intake's Config.RetryAfter). Errors a surface answers in its own
// terms, such as a ledger refusal or a webhook signature, are mapped before
// they reach ProblemFor.
func ProblemFor(err error, retryAfter time.Duration) Problem {
	switch {
	case errors.Is(err, idem.ErrPanicked):
		// First: a panic is a bug whatever its value, even one that is a
		// sentinel below (errors.Is sees through a *PanicError).
		return Problem{Status: http.StatusInternalServerError, Code: CodeInternal, Detail: "internal error; nothing was stored"}
	case errors.Is(err, idem.ErrForgotten):
		// A fact of the key, not a fault: no retry will read the answer.
		return Problem{Status: http.StatusGone, Code: CodeAnswerForgotten, Detail: forgottenDetail}
	case errors.Is(err, idem.ErrKeyMissing):
		return Problem{Status: http.StatusBadRequest, Code: CodeKeyMissing, Detail: "this request needs an Idempotency-Key header"}
	case errors.Is(err, idem.ErrKeyInvalid):
		return Problem{Status: http.StatusBadRequest, Code: CodeKeyInvalid, Detail: keyInvalidDetail(err)}
	case errors.Is(err, idem.ErrInvalidBody):
		return Problem{Status: http.StatusBadRequest, Code: CodeInvalidBody, Detail: "the body is not valid JSON"}
	case errors.Is(err, idem.ErrKeyReused):
		return Problem{Status: http.StatusUnprocessableEntity, Code: CodeKeyReused, Detail: reusedDetail}
	case errors.Is(err, idem.ErrKeyExpired):
		return Problem{Status: http.StatusConflict, Code: CodeKeyExpired, Detail: expiredDetail}
	case errors.Is(err, idem.ErrInFlight):
		// Before the retryable faults: a lock wait that timed out on a
		// twin's row is in flight, not unavailable.
		return Problem{Status: http.StatusConflict, Code: CodeInFlight,
			Detail: "a request with this Idempotency-Key is still being processed; retry later", RetryAfter: retryAfter}
	case errors.Is(err, idem.ErrBusy):
		// The service's own queue, not the database: nothing was done.
		return Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Detail: "the service is too busy to take the request; nothing was done, retry later", RetryAfter: retryAfter}
	case errors.Is(err, idem.ErrUnreplicated):
		// Before the retryable faults: it committed, on the primary only.
		return Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Detail: unreplicatedDetail, RetryAfter: retryAfter}
	case errors.Is(err, idem.ErrCommitUnknown):
		// Before the retryable faults and the context's end: it may have
		// committed, so "nothing was done" would be false.
		return Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Detail: commitUnknownDetail, RetryAfter: retryAfter}
	case errors.Is(err, driver.ErrReadOnlyTransaction):
		// Not IsRetryable (the same connection refuses alike), but the
		// driver dropped it: a later try reaches the primary, if any.
		return Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Detail:     "the database refused the write: it is read-only (a failover in progress?); nothing was stored, retry later",
			RetryAfter: retryAfter}
	case errors.Is(err, driver.ErrStatementTimeout):
		return Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Detail:     "the request's database work ran past its time limit; nothing was done, retry later",
			RetryAfter: retryAfter}
	case driver.IsRetryable(err) || errors.Is(err, context.DeadlineExceeded):
		return Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Detail: unavailableDetail, RetryAfter: retryAfter}
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer.
		return Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Detail: "request canceled", RetryAfter: retryAfter}
	case errors.Is(err, idem.ErrNotFound):
		return Problem{Status: http.StatusNotFound, Code: CodeNotFound, Detail: "no such resource"}
	}
	return Problem{Status: http.StatusInternalServerError, Code: CodeInternal, Detail: "internal error; nothing was stored"}
}

// expiredDetail is the answer to a copy of a request done longer ago than
// the keeper's retention, while the key is still remembered.
const expiredDetail = "the request with this Idempotency-Key was done; its answer is no longer kept, " +
	"and it is not done again: look up its result, or send a new key for a new request"

// forgottenDetail is the answer to a copy of a request whose stored
// answer's tenant was forgotten (idem.ErrForgotten).
const forgottenDetail = "this Idempotency-Key was used, and its answer belonged to a tenant whose data was forgotten: " +
	"it cannot be replayed, and the request was not run again"

// unreplicatedDetail is the answer to a request whose commit the database
// could not confirm reached its synchronous standbys (idem.ErrUnreplicated).
const unreplicatedDetail = "the database committed this request but could not confirm it reached its standbys; " +
	"it is not acknowledged: retry with the same Idempotency-Key"

// commitUnknownDetail is the answer to a request whose commit was sent
// but whose answer from the database was lost (idem.ErrCommitUnknown).
const commitUnknownDetail = "the database's answer to this request's commit was lost: it may have committed; " +
	"it is not acknowledged: retry with the same Idempotency-Key, which replays it if it committed"

// unavailableDetail is every 503 of an unreachable database, reads and
// writes alike: one wording for one condition.
const unavailableDetail = "the service cannot reach its database; nothing was done, retry later"

// Write answers p. Headers set on w before are kept; problems are never
// cached.
func (p Problem) Write(w http.ResponseWriter) {
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(p.RetryAfter))
	}
	problem.Write(w, p.Status, p.Code, p.Detail)
}

// retryAfterSeconds renders d as Retry-After: whole seconds, rounded up,
// at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}

// keyInvalidDetail says, for a client, why its Idempotency-Key header was
// refused: the *idem.KeyError's reason, without the Go error's prefix.
func keyInvalidDetail(err error) string {
	if ke, ok := errors.AsType[*idem.KeyError](err); ok && ke.Reason != "" {
		return "the Idempotency-Key header is invalid: " + ke.Reason
	}
	return "the Idempotency-Key header is invalid"
}
