package webhook

import (
	"encoding/base64"
	"hash"
	"net/http"
	"time"
)

// squareVerifier checks x-square-hmacsha256-signature: base64 HMAC-SHA256
// of the notification URL followed by the body, keyed by the subscription's
// signature key. The URL is the one configured at Square, byte for byte: a
// proxy that rewrites the host does not change what Square signed. Square
// signs no timestamp.
//
// The stable id is the body's event_id, the same on every retry; the type
// is the body's type.
type squareVerifier struct {
	base
	url []byte
}

const squareHeader = "X-Square-Hmacsha256-Signature"

func (v *squareVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	if err := v.checkBody(body); err != nil {
		return Event{}, err
	}
	raw, herr := v.header(h, squareHeader)
	if herr != nil {
		return Event{}, herr
	}
	if raw == "" {
		return v.fail(ErrSignatureMissing, "no x-square-hmacsha256-signature header")
	}
	sig, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "x-square-hmacsha256-signature is not base64")
	}
	if !v.match([][]byte{sig}, func(m hash.Hash) {
		m.Write(v.url)
		m.Write(body)
	}) {
		return v.fail(ErrSignatureInvalid, "signature matches no configured key for %s", v.ep.URL)
	}
	var f struct {
		EventID string `json:"event_id"`
		Type    string `json:"type"`
	}
	if err := v.jsonFields(body, &f); err != nil {
		return Event{}, err
	}
	if f.EventID == "" {
		return v.fail(ErrEventIDMissing, "body has no event_id")
	}
	return v.event(f.EventID, f.Type, body, http.Header{}, time.Time{}), nil
}
