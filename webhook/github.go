package webhook

import (
	"encoding/hex"
	"hash"
	"net/http"
	"strings"
	"time"
)

// githubVerifier checks X-Hub-Signature-256: "sha256=<hex>" HMAC-SHA256 of
// the body keyed by the webhook secret. GitHub signs no timestamp, so there
// is no tolerance; replays are caught by the dedupe key instead.
//
// The id is "<X-GitHub-Hook-ID>:<X-GitHub-Delivery>" and the type
// X-GitHub-Event, but GitHub signs neither header: both are marked
// unsigned, and the dedupe key is the hash of the signed body (DedupeKey),
// so a signed body resent under a fresh delivery GUID is the same event.
type githubVerifier struct{ base }

const githubHeader = "X-Hub-Signature-256"

func (v *githubVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	if err := v.checkBody(body); err != nil {
		return Event{}, err
	}
	raw, herr := v.header(h, githubHeader)
	if herr != nil {
		return Event{}, herr
	}
	if raw == "" {
		return v.fail(ErrSignatureMissing, "no %s header", githubHeader)
	}
	hexSig, ok := strings.CutPrefix(raw, "sha256=")
	sig, err := hex.DecodeString(hexSig)
	if !ok || err != nil {
		return v.fail(ErrSignatureInvalid, "%s is not sha256=<hex>", githubHeader)
	}
	if !v.match([][]byte{sig}, func(m hash.Hash) { m.Write(body) }) {
		return v.fail(ErrSignatureInvalid, "signature matches no configured secret")
	}
	hook, delivery := h.Get("X-GitHub-Hook-ID"), h.Get("X-GitHub-Delivery")
	if hook == "" || delivery == "" {
		return v.fail(ErrEventIDMissing, "X-GitHub-Hook-ID and X-GitHub-Delivery are both needed")
	}
	hdr := pick(h, "X-GitHub-Delivery", "X-GitHub-Event", "X-GitHub-Hook-ID",
		"X-GitHub-Hook-Installation-Target-ID", "X-GitHub-Hook-Installation-Target-Type")
	ev := v.event(hook+":"+delivery, h.Get("X-GitHub-Event"), body, hdr, time.Time{})
	ev.IDUnsigned, ev.TypeUnsigned = true, true
	return ev, nil
}
