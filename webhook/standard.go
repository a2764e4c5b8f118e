package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// standardVerifier checks Standard Webhooks (the scheme Svix and many
// senders use): webhook-signature holds space-separated "v1,<base64>"
// entries, each an HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>"
// keyed by the base64-decoded whsec_ secret. The stable id is webhook-id,
// which the specification requires to stay the same when a message is
// resent. The svix-* header names are read when the webhook-* ones are
// absent.
type standardVerifier struct{ base }

func (v *standardVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	if err := v.checkBody(body); err != nil {
		return Event{}, err
	}
	prefix := "Webhook-"
	if h.Get("Webhook-Signature") == "" && h.Get("Svix-Signature") != "" {
		prefix = "Svix-"
	}
	sigRaw, herr := v.header(h, prefix+"Signature")
	if herr != nil {
		return Event{}, herr
	}
	tsText, herr := v.header(h, prefix+"Timestamp")
	if herr != nil {
		return Event{}, herr
	}
	id, herr := v.header(h, prefix+"Id")
	if herr != nil {
		return Event{}, herr
	}
	if sigRaw == "" {
		return v.fail(ErrSignatureMissing, "no webhook-signature header")
	}
	if tsText == "" {
		return v.fail(ErrSignatureMissing, "no webhook-timestamp header (it is signed)")
	}
	ts, err := parseUnix(tsText)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "webhook-timestamp: %v", err)
	}
	sigs, err := parseStandardSignatures(sigRaw)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "webhook-signature: %v", err)
	}
	// The id is signed too: an absent id is checked as the empty string, so
	// a forged delivery is refused as invalid before it is refused as
	// unnamed.
	if !v.match(sigs, func(m hash.Hash) { writeStandardSigned(m, id, tsText, body) }) {
		return v.fail(ErrSignatureInvalid, "no v1 signature matches a configured secret")
	}
	if err := v.fresh(ts, now); err != nil {
		return Event{}, err
	}
	if id == "" {
		return v.fail(ErrEventIDMissing, "no webhook-id header")
	}
	var f struct {
		Type string `json:"type"`
	}
	if err := v.jsonFields(body, &f); err != nil {
		return Event{}, err
	}
	return v.event(id, f.Type, body, pick(h, prefix+"Id", prefix+"Timestamp"), ts), nil
}

// parseStandardSignatures reads space-separated "<version>,<base64>"
// entries and keeps the v1 ones. Other versions (v1a is asymmetric) and
// entries that are not base64 are skipped; more than MaxSignatures entries
// or no v1 at all make the header invalid.
func parseStandardSignatures(s string) ([][]byte, error) {
	var sigs [][]byte
	n := 0
	for entry := range strings.SplitSeq(s, " ") {
		if entry == "" {
			continue
		}
		if n++; n > MaxSignatures {
			return nil, fmt.Errorf("more than %d signatures", MaxSignatures)
		}
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(sig); err == nil {
			sigs = append(sigs, b)
		}
	}
	if len(sigs) == 0 {
		return nil, errors.New("no v1 signature")
	}
	return sigs, nil
}

// SignStandard returns the webhook-signature value of a Standard Webhooks
// delivery: "v1," and the base64 HMAC-SHA256, keyed by key (the decoded
// whsec_ secret), of "<id>.<timestamp>.<body>", where timestamp is the
// webhook-timestamp header's Unix seconds. It signs exactly the bytes the
// standard profile verifies, so a sender built on it (the outbox's webhook
// publisher) and this package's intake cannot drift apart.
func SignStandard(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	writeStandardSigned(m, id, strconv.FormatInt(timestamp, 10), body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// writeStandardSigned writes the bytes a Standard Webhooks signature
// covers: "<webhook-id>.<webhook-timestamp>.<body>", the timestamp as the
// header carries it.
func writeStandardSigned(m hash.Hash, id, timestamp string, body []byte) {
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
}
