package idemhttp

import (
	"crypto/sha256"
	"fmt"
	"mime"
	"net/http"
	"net/url"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/jsonfp"
)

// FingerprintFunc computes a guarded request's fingerprint from the request
// and its whole body (already read, bounded by MaxBodyBytes): two requests
// with the same fingerprint are the same request, and a key sent again
// with a different fingerprint is refused 422 idempotency_key_reused.
//
// It must be a pure function of the method, the path and the body: the
// replay cache answers a copy whose method, path and body bytes equal those
// of a request already matched without calling it again. It should include
// the method and the path (r.Method+" "+r.URL.Path), as the default does,
// so that a key reused on another resource of the same route is caught. An
// error answers 400 invalid_request (wrap idem.ErrInvalidBody).
type FingerprintFunc func(r *http.Request, body []byte) ([]byte, error)

// JSONFingerprint is the default fingerprint: the method, the path and the
// canonical JSON of the body, without the top-level fields in ignore
// (idem.Fingerprint). A body that is not JSON is refused.
func JSONFingerprint(ignore ...string) FingerprintFunc {
	return func(r *http.Request, body []byte) ([]byte, error) {
		return idem.Fingerprint(r.Method+" "+r.URL.Path, body, ignore...)
	}
}

// FormFingerprint fingerprints an application/x-www-form-urlencoded body
// (as Stripe's API takes), independent of the order of its fields: the
// fields are sorted by name, the values of one field keep their order
// (a[]=1&a[]=2 is not a[]=2&a[]=1). The fields named in ignore are left
// out. A body that is not form-encoded is refused, as is one sent with
// another Content-Type than application/x-www-form-urlencoded (an empty
// Content-Type is taken as form-encoded).
func FormFingerprint(ignore ...string) FingerprintFunc {
	return func(r *http.Request, body []byte) ([]byte, error) {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || mt != "application/x-www-form-urlencoded" {
				return nil, fmt.Errorf("%w: Content-Type %q is not application/x-www-form-urlencoded", idem.ErrInvalidBody, ct)
			}
		}
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", idem.ErrInvalidBody, err)
		}
		for _, f := range ignore {
			delete(vals, f)
		}
		// Encode sorts by name and escapes names and values, so that the
		// canonical form has one spelling per set of fields.
		return framedHash(r.Method, r.URL.Path, []byte(vals.Encode())), nil
	}
}

// BytesFingerprint fingerprints the body's bytes as sent, with the method
// and the path: for a body with one encoding per request, such as a
// protobuf message marshalled deterministically.
func BytesFingerprint(r *http.Request, body []byte) ([]byte, error) {
	return framedHash(r.Method, r.URL.Path, body), nil
}

func framedHash(method, path string, body []byte) []byte {
	sum := rawHash(method, path, body)
	return sum[:]
}

// fingerprint is Config.Fingerprint's, or the default JSON one. raw is
// jsonfp.Sum of the body with the method and the path, which is the
// default fingerprint itself when the body is canonical as sent: a first
// arrival then hashes its body once.
func (m *Middleware) fingerprint(r *http.Request, body []byte, raw *[sha256.Size]byte) ([]byte, error) {
	if m.cfg.Fingerprint != nil {
		return m.cfg.Fingerprint(r, body)
	}
	if jsonfp.AsIs(body, m.cfg.IgnoreFields) {
		return append([]byte(nil), raw[:]...), nil // raw itself stays on the stack
	}
	return idem.Fingerprint(r.Method+" "+r.URL.Path, body, m.cfg.IgnoreFields...)
}
