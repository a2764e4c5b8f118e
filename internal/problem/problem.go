// Package problem writes RFC 9457 problem details (application/problem+json)
// with a stable machine-readable code member, so that every error idem's
// HTTP surface answers has one shape a client can switch on.
//
// The type member is "about:blank" and the title the status's reason phrase,
// as RFC 9457 section 4.2.1 asks for that type: the stable code, not the
// type URI, is what distinguishes one problem from another.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of a problem details document.
const ContentType = "application/problem+json"

// Details is one problem details document. Code is a stable snake_case
// identifier (for example "idempotency_key_reused") that clients may rely
// on; Detail is for people and may change.
type Details struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	Code     string `json:"code"`
}

// New returns the problem for status and code with the type and title filled
// in.
func New(status int, code, detail string) Details {
	return Details{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code}
}

// Write answers the problem for status and code. Headers the caller set on
// w before (Retry-After, for instance) are kept.
func Write(w http.ResponseWriter, status int, code, detail string) {
	New(status, code, detail).Write(w)
}

// Write answers p. Problems are never cached: they describe one attempt.
func (p Details) Write(w http.ResponseWriter) {
	// Marshalling a struct of strings and an int cannot fail.
	body, _ := json.Marshal(p)
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// JSON answers v as application/json with status: the success answers of
// the same HTTP surface. A value that cannot be encoded (a bug) is
// answered 500 internal_error instead.
func JSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		Write(w, http.StatusInternalServerError, "internal_error", "encode response")
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h["Content-Type"] = contentJSON // shared: replaced by Set and copied by Add, never written in place
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

var contentJSON = []string{"application/json"}
