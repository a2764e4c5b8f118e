package webhook

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
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

const paddleHeader = "Paddle-Signature"

func (v *paddleVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	if err := v.checkBody(body); err != nil {
		return Event{}, err
	}
	raw, herr := v.header(h, paddleHeader)
	if herr != nil {
		return Event{}, herr
	}
	if raw == "" {
		return v.fail(ErrSignatureMissing, "no %s header", paddleHeader)
	}
	tsText, sigs, err := parsePaddleHeader(raw)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "%s: %v", paddleHeader, err)
	}
	ts, err := parseUnix(tsText)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "%s: %v", paddleHeader, err)
	}
	if !v.match(sigs, func(m hash.Hash) {
		m.Write([]byte(tsText))
		m.Write([]byte{':'})
		m.Write(body)
	}) {
		return v.fail(ErrSignatureInvalid, "no h1 signature matches a configured secret")
	}
	if err := v.fresh(ts, now); err != nil {
		return Event{}, err
	}
	var f struct {
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
	}
	if err := v.jsonFields(body, &f); err != nil {
		return Event{}, err
	}
	if f.EventID == "" {
		return v.fail(ErrEventIDMissing, "body has no event_id")
	}
	return v.event(f.EventID, f.EventType, body, http.Header{}, ts), nil
}

// parsePaddleHeader reads "ts=...;h1=...;h1=...": one ts, at least one h1
// (up to MaxSignatures); unknown keys and non-hex h1 values are skipped.
func parsePaddleHeader(s string) (ts string, sigs [][]byte, err error) {
	seenTS := false
	for part := range strings.SplitSeq(s, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return "", nil, fmt.Errorf("element %q is not key=value", clip(part))
		}
		switch k {
		case "ts":
			if seenTS {
				return "", nil, errors.New("more than one ts")
			}
			seenTS, ts = true, val
		case "h1":
			if len(sigs) == MaxSignatures {
				return "", nil, fmt.Errorf("more than %d h1 signatures", MaxSignatures)
			}
			if sig, err := hex.DecodeString(val); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	if !seenTS {
		return "", nil, errors.New("no ts")
	}
	if len(sigs) == 0 {
		return "", nil, errors.New("no h1 signature")
	}
	return ts, sigs, nil
}
