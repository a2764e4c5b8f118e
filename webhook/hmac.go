package webhook

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"time"
)

// hmacVerifier is the configurable profile for senders without a profile
// of their own: an HMAC (sha256, sha512 or sha1) in a header, hex or
// base64, with an optional prefix, optionally several per header, over a
// template of {timestamp}, {id} and {body}.
type hmacVerifier struct {
	base
	cfg      HMACConfig
	segments []segment
	idPath   []string
	typePath []string
}

// segment is one piece of the signed-payload template.
type segment struct {
	kind    byte // 'l' literal, 't' timestamp, 'i' id, 'b' body
	literal []byte
}

func newHMACVerifier(b base) *hmacVerifier {
	cfg := *b.ep.HMAC
	b.newHash = hashFor(cfg.Algorithm)
	v := &hmacVerifier{base: b, cfg: cfg}
	t := cfg.SignedPayload
	for t != "" {
		i := strings.IndexByte(t, '{')
		j := -1
		if i >= 0 {
			j = strings.IndexByte(t[i:], '}')
		}
		if i < 0 || j < 0 {
			v.segments = append(v.segments, segment{kind: 'l', literal: []byte(t)})
			break
		}
		name := t[i : i+j+1]
		kind := map[string]byte{"{timestamp}": 't', "{id}": 'i', "{body}": 'b'}[name]
		if kind == 0 { // an unknown {word} is literal text
			v.segments = append(v.segments, segment{kind: 'l', literal: []byte(t[:i+j+1])})
			t = t[i+j+1:]
			continue
		}
		if i > 0 {
			v.segments = append(v.segments, segment{kind: 'l', literal: []byte(t[:i])})
		}
		v.segments = append(v.segments, segment{kind: kind})
		t = t[i+j+1:]
	}
	if cfg.IDField != "" {
		v.idPath = strings.Split(cfg.IDField, ".")
	}
	if cfg.TypeField != "" {
		v.typePath = strings.Split(cfg.TypeField, ".")
	}
	return v
}

func (v *hmacVerifier) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	if err := v.checkBody(body); err != nil {
		return Event{}, err
	}
	raw, herr := v.header(h, v.cfg.Header)
	if herr != nil {
		return Event{}, herr
	}
	if raw == "" {
		return v.fail(ErrSignatureMissing, "no %s header", v.cfg.Header)
	}
	var tsText string
	var ts time.Time
	if v.cfg.TimestampHeader != "" {
		if tsText, herr = v.header(h, v.cfg.TimestampHeader); herr != nil {
			return Event{}, herr
		}
		if tsText == "" {
			return v.fail(ErrSignatureMissing, "no %s header (it is signed)", v.cfg.TimestampHeader)
		}
		var err error
		if ts, err = parseUnix(tsText); err != nil {
			return v.fail(ErrSignatureInvalid, "%s: %v", v.cfg.TimestampHeader, err)
		}
	}
	var idText string
	if v.cfg.IDHeader != "" {
		if idText, herr = v.header(h, v.cfg.IDHeader); herr != nil {
			return Event{}, herr
		}
	}
	sigs, err := parseHMACSignatures(raw, v.cfg.Prefix, v.cfg.Separator, v.cfg.Encoding)
	if err != nil {
		return v.fail(ErrSignatureInvalid, "%s: %v", v.cfg.Header, err)
	}
	if !v.match(sigs, func(m hash.Hash) {
		for _, s := range v.segments {
			switch s.kind {
			case 'l':
				m.Write(s.literal)
			case 't':
				m.Write([]byte(tsText))
			case 'i':
				m.Write([]byte(idText))
			case 'b':
				m.Write(body)
			}
		}
	}) {
		return v.fail(ErrSignatureInvalid, "no signature matches a configured secret")
	}
	if v.cfg.TimestampHeader != "" {
		if err := v.fresh(ts, now); err != nil {
			return Event{}, err
		}
	}
	id := idText
	if v.idPath != nil {
		if id, err = jsonPath(body, v.idPath); err != nil {
			return v.fail(ErrMalformedBody, "body is not a JSON object: %v", err)
		}
	}
	if id == "" {
		return v.fail(ErrEventIDMissing, "no event id at %s%s", v.cfg.IDHeader, v.cfg.IDField)
	}
	typ := ""
	switch {
	case v.cfg.TypeHeader != "":
		typ = h.Get(v.cfg.TypeHeader)
	case v.typePath != nil:
		if typ, err = jsonPath(body, v.typePath); err != nil {
			return v.fail(ErrMalformedBody, "body is not a JSON object: %v", err)
		}
	}
	var names []string
	for _, n := range []string{v.cfg.IDHeader, v.cfg.TypeHeader, v.cfg.TimestampHeader} {
		if n != "" {
			names = append(names, n)
		}
	}
	ev := v.event(id, typ, body, pick(h, names...), ts)
	// validate made an id header part of the signed payload; a type
	// header never is.
	ev.TypeUnsigned = v.cfg.TypeHeader != ""
	return ev, nil
}

// parseHMACSignatures splits the header (when a separator is set), requires
// and strips the prefix (when set), and decodes each signature. Entries
// without the prefix or that do not decode are skipped; none left, or more
// than MaxSignatures entries, make the header invalid.
func parseHMACSignatures(s, prefix, sep, encoding string) ([][]byte, error) {
	entries := []string{s}
	if sep != "" {
		entries = strings.Split(s, sep)
	}
	if len(entries) > MaxSignatures {
		return nil, fmt.Errorf("more than %d signatures", MaxSignatures)
	}
	var sigs [][]byte
	for _, e := range entries {
		e = strings.TrimSpace(e)
		e, ok := strings.CutPrefix(e, prefix)
		if !ok || e == "" {
			continue
		}
		var b []byte
		var err error
		if encoding == "base64" {
			b, err = base64.StdEncoding.DecodeString(e)
			if err != nil {
				b, err = base64.RawStdEncoding.DecodeString(e)
			}
		} else {
			b, err = hex.DecodeString(e)
		}
		if err == nil {
			sigs = append(sigs, b)
		}
	}
	if len(sigs) == 0 {
		return nil, errors.New("no signature in the expected form")
	}
	return sigs, nil
}
