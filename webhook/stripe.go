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

// stripeVerifier checks Stripe-Signature: "t=<unix>,v1=<hex>[,v1=<hex>...]",
// HMAC-SHA256 of "<t>.<body>" keyed by the endpoint secret's bytes (whsec_
// included). Stripe sends several v1 entries while a secret is being rolled.
// The stable id is the body's "id" (evt_...), which Stripe keeps on every
// redelivery; t and the signature change each time.
//
// It does not use stripe-go's ConstructEvent, which by default refuses an
// event of another API version: intake verifies the sender, nothing more.
type stripeVerifier struct{ base }

const stripeHeader = "Stripe-Signature"

func (v *stripeVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	if err := v.checkBody(body); err != nil {
		return Event{}, err
	}
	raw, herr := v.header(h, stripeHeader)
	if herr != nil {
		return Event{}, herr
	}
	if raw == "" {
		return v.fail(ErrSignatureMissing, "no %s header", stripeHeader)
	}
	tsText, sigs, err := parseStripeHeader(raw)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "%s: %v", stripeHeader, err)
	}
	ts, err := parseUnix(tsText)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "%s: %v", stripeHeader, err)
	}
	if !v.match(sigs, func(m hash.Hash) {
		m.Write([]byte(tsText))
		m.Write([]byte{'.'})
		m.Write(body)
	}) {
		return v.fail(ErrSignatureInvalid, "no v1 signature matches a configured secret")
	}
	if err := v.fresh(ts, now); err != nil {
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

// parseStripeHeader reads "t=...,v1=...,v1=...". Unknown keys (v0, future
// schemes) are ignored, and so is a v1 that is not hex, as Stripe's own
// libraries do; a second t, a pair without "=", or more than MaxSignatures
// v1 entries make the header invalid.
func parseStripeHeader(s string) (ts string, sigs [][]byte, err error) {
	seenT := false
	for pair := range strings.SplitSeq(s, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return "", nil, fmt.Errorf("element %q is not key=value", clip(pair))
		}
		switch k {
		case "t":
			if seenT {
				return "", nil, errors.New("more than one t")
			}
			seenT, ts = true, val
		case "v1":
			if len(sigs) == MaxSignatures {
				return "", nil, fmt.Errorf("more than %d v1 signatures", MaxSignatures)
			}
			if sig, err := hex.DecodeString(val); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	if !seenT {
		return "", nil, errors.New("no t")
	}
	if len(sigs) == 0 {
		return "", nil, errors.New("no v1 signature")
	}
	return ts, sigs, nil
}
