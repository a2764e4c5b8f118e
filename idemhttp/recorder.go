package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
)

// errResponseTooLarge: the handler wrote more than Config.MaxResponseBytes,
// which could not be stored; the attempt is rolled back.
var errResponseTooLarge = errors.New("idemhttp: response larger than MaxResponseBytes")

// recorder buffers a guarded handler's whole response: nothing reaches the
// client before the outcome is committed, so a client never sees an answer
// that a rollback then takes back. It deliberately offers no Flush, Hijack
// or Unwrap: a streamed response cannot be stored and replayed.
type recorder struct {
	header  http.Header
	sent    http.Header // the header as it was at WriteHeader
	status  int
	body    []byte
	max     int64
	tooLong bool
}

func newRecorder(max int64) *recorder {
	return &recorder{max: max}
}

// Header is made on first use: a batched route's decode that accepts the
// request never touches it.
func (rec *recorder) Header() http.Header {
	if rec.header == nil {
		rec.header = make(http.Header)
	}
	return rec.header
}

func (rec *recorder) WriteHeader(code int) {
	// The same check net/http makes: a code outside 100..999 is a bug.
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("idemhttp: invalid WriteHeader code %v", code))
	}
	// Informational answers are not the outcome; a second final one is
	// ignored, as net/http ignores it.
	if rec.status != 0 || code < 200 {
		return
	}
	rec.status = code
	rec.sent = rec.Header().Clone()
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if int64(len(rec.body))+int64(len(p)) > rec.max {
		rec.tooLong = true
		return 0, errResponseTooLarge
	}
	rec.body = append(rec.body, p...)
	return len(p), nil
}

// result returns the final status and header, as a handler that wrote
// nothing gets from net/http: 200 with an empty body.
func (rec *recorder) result() (int, http.Header) {
	if rec.status == 0 {
		return http.StatusOK, rec.Header()
	}
	return rec.status, rec.sent
}
