package webhook

import (
	"encoding/base64"
	"hash"
	"net/http"
	"time"
)

// shopifyVerifier checks X-Shopify-Hmac-Sha256: base64 HMAC-SHA256 of the
// body keyed by the app's client secret. Shopify signs no timestamp.
//
// The id is X-Shopify-Event-Id, which Shopify's "Ignore duplicate
// webhooks" guide names as the value that repeats on a duplicate (older
// deliveries without it fall back to X-Shopify-Webhook-Id), and the type is
// X-Shopify-Topic. Shopify signs neither header: both are marked unsigned,
// and the dedupe key is the hash of the signed body (DedupeKey), so a
// signed body resent under a fresh event id is the same event.
type shopifyVerifier struct{ base }

const shopifyHeader = "X-Shopify-Hmac-Sha256"

func (v *shopifyVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	if err := v.checkBody(body); err != nil {
		return Event{}, err
	}
	raw, herr := v.header(h, shopifyHeader)
	if herr != nil {
		return Event{}, herr
	}
	if raw == "" {
		return v.fail(ErrSignatureMissing, "no %s header", shopifyHeader)
	}
	sig, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "%s is not base64", shopifyHeader)
	}
	if !v.match([][]byte{sig}, func(m hash.Hash) { m.Write(body) }) {
		return v.fail(ErrSignatureInvalid, "signature matches no configured secret")
	}
	id := h.Get("X-Shopify-Event-Id")
	if id == "" {
		id = h.Get("X-Shopify-Webhook-Id")
	}
	if id == "" {
		return v.fail(ErrEventIDMissing, "no X-Shopify-Event-Id or X-Shopify-Webhook-Id header")
	}
	hdr := pick(h, "X-Shopify-Event-Id", "X-Shopify-Webhook-Id", "X-Shopify-Topic",
		"X-Shopify-Shop-Domain", "X-Shopify-API-Version", "X-Shopify-Triggered-At")
	ev := v.event(id, h.Get("X-Shopify-Topic"), body, hdr, time.Time{})
	ev.IDUnsigned, ev.TypeUnsigned = true, true
	return ev, nil
}
