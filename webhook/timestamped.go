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

// timestampedScheme is a signature header of one Unix timestamp and one or
// more hex HMAC-SHA256 signatures of "<timestamp><payloadSep><body>":
// Stripe's "t=…,v1=…" and Paddle's "ts=…;h1=…".
type timestampedScheme struct {
	header     string
	pairSep    string // between key=value pairs
	tsKey      string
	sigKey     string
	payloadSep byte // between the timestamp and the body in the signed payload
}

var (
	stripeScheme = timestampedScheme{header: "Stripe-Signature", pairSep: ",", tsKey: "t", sigKey: "v1", payloadSep: '.'}
	paddleScheme = timestampedScheme{header: "Paddle-Signature", pairSep: ";", tsKey: "ts", sigKey: "h1", payloadSep: ':'}
)

// verify checks the header's signature over the raw body, then the
// timestamp's freshness, and returns the signed time.
func (b *base) verifyTimestamped(s timestampedScheme, h http.Header, body []byte, now time.Time) (time.Time, error) {
	if err := b.checkBody(body); err != nil {
		return time.Time{}, err
	}
	raw, herr := b.header(h, s.header)
	if herr != nil {
		return time.Time{}, herr
	}
	if raw == "" {
		_, err := b.fail(ErrSignatureMissing, "no %s header", s.header)
		return time.Time{}, err
	}
	tsText, sigs, err := s.parse(raw)
	if err == nil {
		var ts time.Time
		if ts, err = parseUnix(tsText); err == nil {
			if !b.match(sigs, func(m hash.Hash) {
				m.Write([]byte(tsText))
				m.Write([]byte{s.payloadSep})
				m.Write(body)
			}) {
				_, err := b.fail(ErrSignatureInvalid, "no %s signature matches a configured secret", s.sigKey)
				return time.Time{}, err
			}
			if err := b.fresh(ts, now); err != nil {
				return time.Time{}, err
			}
			return ts, nil
		}
	}
	_, err = b.fail(ErrSignatureInvalid, "%s: %v", s.header, err)
	return time.Time{}, err
}

// parse reads one timestamp and up to MaxSignatures signatures. Unknown keys
// (other schemes, future versions) and signatures that are not hex are
// skipped, as the senders' own libraries do; a second timestamp, an element
// without "=", or too many signatures make the header invalid.
func (s timestampedScheme) parse(raw string) (ts string, sigs [][]byte, err error) {
	seenTS := false
	for pair := range strings.SplitSeq(raw, s.pairSep) {
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return "", nil, fmt.Errorf("element %q is not key=value", clip(pair))
		}
		switch k {
		case s.tsKey:
			if seenTS {
				return "", nil, fmt.Errorf("more than one %s", s.tsKey)
			}
			seenTS, ts = true, val
		case s.sigKey:
			if len(sigs) == MaxSignatures {
				return "", nil, fmt.Errorf("more than %d %s signatures", MaxSignatures, s.sigKey)
			}
			if sig, err := hex.DecodeString(val); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	if !seenTS {
		return "", nil, errors.New("no " + s.tsKey)
	}
	if len(sigs) == 0 {
		return "", nil, fmt.Errorf("no %s signature", s.sigKey)
	}
	return ts, sigs, nil
}
