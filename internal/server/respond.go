package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/problem"
	"github.com/idemhq/idem/ledger"
)

// Stable problem codes the service answers with, beside the ledger's and
// idemhttp's.
const (
	codeInvalidRequest = "invalid_request"
	codeNotFound       = "not_found"
	codeUnauthorized   = "unauthorized"
	codeUnavailable    = "unavailable"
	codeInternal       = "internal_error"
	// codeMisdirected: without API keys, a request for a host name that
	// is not this machine's (421).
	codeMisdirected = "misdirected_request"
	// codeUnsupportedMediaType: a write whose body is declared as
	// something other than JSON (415).
	codeUnsupportedMediaType = "unsupported_media_type"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, codeInternal, "encode response")
		return
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// decode reads a JSON object into v, refusing unknown fields and trailing
// data: a typo in a payments request must not be silently dropped.
func decode(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if dec.More() {
		return errors.New("body: trailing data after the JSON object")
	}
	return nil
}

// fail answers err as a problem. Ledger refusals are business answers
// (4xx, stored and replayed by the middleware); database faults are 503
// with Retry-After, which the middleware rolls back and does not store.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var le *ledger.Error
	switch {
	case errors.As(err, &le):
		status := http.StatusUnprocessableEntity
		code := le.Code
		switch {
		case errors.Is(le, ledger.ErrInvalidRequest), errors.Is(le, ledger.ErrInvalidAmount):
			status, code = http.StatusBadRequest, codeInvalidRequest
		case errors.Is(le, ledger.ErrTransferNotFound) && r.PathValue("id") != "":
			status, code = http.StatusNotFound, codeNotFound // the path's transfer
		}
		p := problem.New(status, code, le.Message)
		p.Write(w)
	case errors.Is(err, ledger.ErrNotFound) || errors.Is(err, driver.ErrNotFound):
		problem.Write(w, http.StatusNotFound, codeNotFound, "no such resource")
	case driver.IsRetryable(err):
		w.Header().Set("Retry-After", "1")
		problem.Write(w, http.StatusServiceUnavailable, codeUnavailable, "the database is unavailable; nothing was stored, retry later")
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer.
		problem.Write(w, http.StatusServiceUnavailable, codeUnavailable, "request canceled")
	default:
		s.log.Error("idem: request failed", "method", r.Method, "route", r.Pattern, "err", err)
		problem.Write(w, http.StatusInternalServerError, codeInternal, "internal error; nothing was stored")
	}
}

func badRequest(w http.ResponseWriter, detail string) {
	problem.Write(w, http.StatusBadRequest, codeInvalidRequest, detail)
}
