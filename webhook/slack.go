package webhook

import (
	"encoding/hex"
	"hash"
	"net/http"
	"strings"
	"time"
)

// slackVerifier checks X-Slack-Signature: "v0=<hex>" HMAC-SHA256 of
// "v0:<X-Slack-Request-Timestamp>:<body>" keyed by the app's signing
// secret, within the tolerance (five minutes, as Slack asks).
//
// It covers the Events API: the stable id is the body's event_id, which
// Slack keeps when it retries (adding X-Slack-Retry-Num). The type is the
// inner event.type of an event_callback ("message", "app_mention"), else
// the body's type. A url_verification is signed too; it is returned with
// Challenge set and no id, for the intake to answer.
type slackVerifier struct{ base }

const (
	slackHeader   = "X-Slack-Signature"
	slackTSHeader = "X-Slack-Request-Timestamp"
)

func (v *slackVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	if err := v.checkBody(body); err != nil {
		return Event{}, err
	}
	raw, herr := v.header(h, slackHeader)
	if herr != nil {
		return Event{}, herr
	}
	tsText, herr := v.header(h, slackTSHeader)
	if herr != nil {
		return Event{}, herr
	}
	if raw == "" {
		return v.fail(ErrSignatureMissing, "no %s header", slackHeader)
	}
	if tsText == "" {
		return v.fail(ErrSignatureMissing, "no %s header (it is signed)", slackTSHeader)
	}
	ts, err := parseUnix(tsText)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "%s: %v", slackTSHeader, err)
	}
	hexSig, ok := strings.CutPrefix(raw, "v0=")
	sig, err := hex.DecodeString(hexSig)
	if !ok || err != nil {
		return v.fail(ErrSignatureInvalid, "%s is not v0=<hex>", slackHeader)
	}
	if !v.match([][]byte{sig}, func(m hash.Hash) {
		m.Write([]byte("v0:"))
		m.Write([]byte(tsText))
		m.Write([]byte{':'})
		m.Write(body)
	}) {
		return v.fail(ErrSignatureInvalid, "signature matches no configured secret")
	}
	if err := v.fresh(ts, now); err != nil {
		return Event{}, err
	}
	var f struct {
		Type      string `json:"type"`
		EventID   string `json:"event_id"`
		Challenge string `json:"challenge"`
		Event     struct {
			Type string `json:"type"`
		} `json:"event"`
	}
	if err := v.jsonFields(body, &f); err != nil {
		return Event{}, err
	}
	hdr := pick(h, slackTSHeader, "X-Slack-Retry-Num", "X-Slack-Retry-Reason")
	if f.Type == "url_verification" {
		e := v.event("", f.Type, body, hdr, ts)
		e.Challenge = f.Challenge
		if e.Challenge == "" {
			return v.fail(ErrMalformedBody, "url_verification without a challenge")
		}
		return e, nil
	}
	if f.EventID == "" {
		return v.fail(ErrEventIDMissing, "body has no event_id")
	}
	typ := f.Type
	if f.Type == "event_callback" && f.Event.Type != "" {
		typ = f.Event.Type
	}
	return v.event(f.EventID, typ, body, hdr, ts), nil
}
