package webhook

import (
	"net/http"
	"time"
)

// stripeVerifier checks Stripe-Signature: "t=<unix>,v1=<hex>[,v1=<hex>...]",
// HMAC-SHA256 of "<t>.<body>" keyed by the endpoint secret's bytes (whsec_
// included). Stripe sends several v1 entries while a secret is being rolled.
// The stable id is the body's "id" (evt_...), which Stripe keeps on every
// redelivery; t and the signature change each time.
//
// It does not use stripe-go's ConstructEvent, which by default refuses an
// event of another API version: intake verifies the sender, nothing more.
type stripeVerifier struct{ base }

func (v *stripeVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	ts, err := v.verifyTimestamped(stripeScheme, h, body, now)
	if err != nil {
		return Event{}, err
	}
	var f struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := v.jsonFields(body, &f); err != nil {
		return Event{}, err
	}
	if f.ID == "" {
		return v.fail(ErrEventIDMissing, "body has no id")
	}
	return v.event(f.ID, f.Type, body, http.Header{}, ts), nil
}
