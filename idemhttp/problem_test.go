package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
)

// ProblemFor is the one error mapping of idemhttp, the webhook intake and
// idem serve: each class keeps the status, code and detail those surfaces
// answered before it existed, and 409 and 503 carry the Retry-After given.
func TestProblemFor(t *testing.T) {
	t.Parallel()
	_, keyErr := idem.ParseKey("")
	for _, tc := range []struct {
		name                string
		err                 error
		status              int
		code, detail, retry string
	}{
		{"key missing", idem.ErrKeyMissing, 400, "idempotency_key_missing", "this request needs an Idempotency-Key header", ""},
		{"key invalid", keyErr, 400, "idempotency_key_invalid", "the Idempotency-Key header is invalid: empty", ""},
		{"key invalid, wrapped", fmt.Errorf("claim: %w", &idem.KeyError{Reason: "longer than 255 characters"}), 400,
			"idempotency_key_invalid", "the Idempotency-Key header is invalid: longer than 255 characters", ""},
		{"body", fmt.Errorf("%w: eof", idem.ErrInvalidBody), 400, "invalid_request", "the body is not valid JSON", ""},
		{"reused", &idem.ReusedError{}, 422, "idempotency_key_reused",
			"this Idempotency-Key was already used with a different request (method, path or body)", ""},
		{"expired", idem.ErrKeyExpired, 409, "idempotency_key_expired",
			"the request with this Idempotency-Key was done; its answer is no longer kept, and it is not done again: look up its result, or send a new key for a new request", ""},
		{"moved to its tombstone while claimed", fmt.Errorf("%w: %w", idem.ErrKeyExpired, driver.ErrTombstoned), 409, "idempotency_key_expired",
			"the request with this Idempotency-Key was done; its answer is no longer kept, and it is not done again: look up its result, or send a new key for a new request", ""},
		{"in flight on a lock", fmt.Errorf("%w: %w", idem.ErrInFlight, driver.ErrLockTimeout), 409, "request_in_flight",
			"a request with this Idempotency-Key is still being processed; retry later", "3"},
		{"busy", fmt.Errorf("%w: not taken into a batch within 1s (MaxWait)", idem.ErrBusy), 503, "unavailable",
			"the service is too busy to take the request; nothing was done, retry later", "3"},
		{"database down", fmt.Errorf("begin: %w", driver.ErrUnavailable), 503, "unavailable",
			"the service cannot reach its database; nothing was done, retry later", "3"},
		{"unreplicated, the connection lost too", fmt.Errorf("%w: canceling wait (%w)", driver.ErrUnreplicated, driver.ErrUnavailable), 503, "unavailable",
			"the database committed this request but could not confirm it reached its standbys; it is not acknowledged: retry with the same Idempotency-Key", "3"},
		{"commit unknown, the context ended meanwhile", fmt.Errorf("%w: %w", driver.ErrCommitUnknown, context.Canceled), 503, "unavailable",
			"the database's answer to this request's commit was lost: it may have committed; it is not acknowledged: retry with the same Idempotency-Key, which replays it if it committed", "3"},
		{"read-only server", fmt.Errorf("insert: %w", driver.ErrReadOnlyTransaction), 503, "unavailable",
			"the database refused the write: it is read-only (a failover in progress?); nothing was stored, retry later", "3"},
		{"serialization", driver.ErrSerialization, 503, "unavailable", "the service cannot reach its database; nothing was done, retry later", "3"},
		{"deadline", context.DeadlineExceeded, 503, "unavailable", "the service cannot reach its database; nothing was done, retry later", "3"},
		{"canceled", context.Canceled, 503, "unavailable", "request canceled", "3"},
		{"not found", fmt.Errorf("get: %w", idem.ErrNotFound), 404, "not_found", "no such resource", ""},
		// A panic is a bug whatever its value, even a retryable error.
		{"panic", &idem.PanicError{Value: driver.ErrUnavailable}, 500, "internal_error", "internal error; nothing was stored", ""},
		{"anything else", errors.New("boom"), 500, "internal_error", "internal error; nothing was stored", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := idemhttp.ProblemFor(tc.err, 2500*time.Millisecond)
			w := httptest.NewRecorder()
			p.Write(w)
			var body struct {
				Status int    `json:"status"`
				Code   string `json:"code"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if w.Code != tc.status || body.Status != tc.status || body.Code != tc.code || body.Detail != tc.detail {
				t.Fatalf("%d %+v, want %d %s %q", w.Code, body, tc.status, tc.code, tc.detail)
			}
			if got := w.Header().Get("Retry-After"); got != tc.retry {
				t.Fatalf("Retry-After %q, want %q", got, tc.retry)
			}
			if w.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("Content-Type %q", w.Header().Get("Content-Type"))
			}
		})
	}
}
