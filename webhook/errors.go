package webhook

import (
	"errors"
	"net/http"
)

// Sentinel errors of Verify. Every error Verify returns is an *Error that
// wraps exactly one of them, so errors.Is works and HTTPStatus can map it.
var (
	// ErrSignatureMissing: the signature header (or a header the signature
	// covers, such as the signed timestamp) is absent.
	ErrSignatureMissing = errors.New("webhook: signature missing")
	// ErrSignatureInvalid: no signature in the header matches any configured
	// secret, or the header is malformed.
	ErrSignatureInvalid = errors.New("webhook: signature invalid")
	// ErrTimestampStale: the signed timestamp is further from now than the
	// tolerance, in the past or in the future.
	ErrTimestampStale = errors.New("webhook: timestamp outside tolerance")
	// ErrMalformedBody: the profile reads the event id or type from the JSON
	// body and the body is not a JSON object.
	ErrMalformedBody = errors.New("webhook: malformed body")
	// ErrEventIDMissing: the delivery is authentic but carries no event id,
	// so it cannot be deduplicated and is refused rather than run.
	ErrEventIDMissing = errors.New("webhook: event id missing")
	// ErrBodyTooLarge: the body is longer than the endpoint's MaxBodyBytes.
	ErrBodyTooLarge = errors.New("webhook: body too large")
	// ErrConfig: an endpoint's configuration is invalid (NewVerifier,
	// ParseConfig). Returned as a *ConfigError.
	ErrConfig = errors.New("webhook: invalid configuration")
)

// Stable codes, as they appear in problem+json answers and metrics.
const (
	CodeSignatureMissing = "signature_missing"
	CodeSignatureInvalid = "signature_invalid"
	CodeTimestampStale   = "timestamp_stale"
	CodeMalformedBody    = "malformed_body"
	CodeEventIDMissing   = "event_id_missing"
	CodeBodyTooLarge     = "body_too_large"
	CodeInternal         = "internal_error"
)

// Error is a refused delivery: a stable Code, the sentinel it wraps, and a
// Reason for logs. The Reason never contains a secret or an expected
// signature.
type Error struct {
	Code     string
	Provider string
	Reason   string
	err      error
}

func (e *Error) Error() string {
	s := e.err.Error()
	if e.Provider != "" {
		s = e.Provider + ": " + s
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns the sentinel, so errors.Is(err, ErrSignatureInvalid) works.
func (e *Error) Unwrap() error { return e.err }

var codes = map[error]string{
	ErrSignatureMissing: CodeSignatureMissing,
	ErrSignatureInvalid: CodeSignatureInvalid,
	ErrTimestampStale:   CodeTimestampStale,
	ErrMalformedBody:    CodeMalformedBody,
	ErrEventIDMissing:   CodeEventIDMissing,
	ErrBodyTooLarge:     CodeBodyTooLarge,
}

func fail(provider string, sentinel error, reason string) *Error {
	return &Error{Code: codes[sentinel], Provider: provider, Reason: reason, err: sentinel}
}

// HTTPStatus maps an error of Verify to the answer the intake gives: 401 for
// a missing or invalid signature and a stale timestamp (the sender is not
// proven, so nothing is stored), 400 for an authentic delivery that cannot
// be named (malformed body, no event id), 413 for a body over the limit. Any
// other error is 500 with code internal_error.
func HTTPStatus(err error) (status int, code string) {
	switch {
	case errors.Is(err, ErrSignatureMissing):
		return http.StatusUnauthorized, CodeSignatureMissing
	case errors.Is(err, ErrSignatureInvalid):
		return http.StatusUnauthorized, CodeSignatureInvalid
	case errors.Is(err, ErrTimestampStale):
		return http.StatusUnauthorized, CodeTimestampStale
	case errors.Is(err, ErrMalformedBody):
		return http.StatusBadRequest, CodeMalformedBody
	case errors.Is(err, ErrEventIDMissing):
		return http.StatusBadRequest, CodeEventIDMissing
	case errors.Is(err, ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge, CodeBodyTooLarge
	}
	return http.StatusInternalServerError, CodeInternal
}

// ConfigError is an invalid endpoint configuration. It wraps ErrConfig.
type ConfigError struct {
	Endpoint string // the endpoint's name, when known
	Field    string // the offending field, e.g. "secrets[1]"
	Reason   string
}

func (e *ConfigError) Error() string {
	s := "webhook: "
	if e.Endpoint != "" {
		s += "endpoint " + e.Endpoint + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Reason
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }
