package webhook

import (
	"net/http"
	"time"
)

// paddleVerifier checks Paddle Billing's Paddle-Signature:
// "ts=<unix>;h1=<hex>[;h1=<hex>...]", HMAC-SHA256 of "<ts>:<body>" keyed by
// the notification destination's secret key (pdl_ntfset_...). Paddle sends
// more than one h1 while secrets rotate. The default tolerance is the five
// seconds of Paddle's own SDKs.
//
// The stable id is the body's event_id (evt_...); the type is event_type.
type paddleVerifier struct{ base }

func (v *paddleVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	ts, err := v.verifyTimestamped(paddleScheme, h, body, now)
	if err != nil {
		return Event{}, err
	}
	var f struct {
		ID   string `json:"event_id"`
		Type string `json:"event_type"`
	}
	if err := v.jsonFields(body, &f); err != nil {
		return Event{}, err
	}
	if f.ID == "" {
		return v.fail(ErrEventIDMissing, "body has no event_id")
	}
	return v.event(f.ID, f.Type, body, http.Header{}, ts), nil
}
