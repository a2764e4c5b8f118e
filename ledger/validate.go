package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/strictjson"
)

const (
	maxIDLen       = 128
	maxTenantLen   = 128
	maxReasonLen   = 1024
	maxMetadataLen = 16 << 10
	minCurrencyLen = 3
	maxCurrencyLen = 12
)

func checkTenant(tenant string) error {
	if tenant == "" || len(tenant) > maxTenantLen || !utf8.ValidString(tenant) {
		return invalid("tenant", fmt.Sprintf("tenant must be 1..%d bytes of UTF-8", maxTenantLen))
	}
	return nil
}

// checkID accepts ids that are safe in a URL path segment and in logs
// without escaping: letters, digits and "-_.:~", except "." and "..",
// which a URL path reads as "this" and "parent" segments: an account or
// transfer with such an id could be created but never named in a URL.
func checkID(field, id string) error {
	if id == "" {
		return invalid(field, field+" is empty")
	}
	if id == "." || id == ".." {
		return invalid(field, fmt.Sprintf("%s %q is a dot segment, which a URL path cannot name", field, id))
	}
	if len(id) > maxIDLen {
		return invalid(field, fmt.Sprintf("%s is %d bytes, longer than %d", field, len(id), maxIDLen))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '~'
		if !ok {
			return invalid(field, fmt.Sprintf("%s %q has a character outside letters, digits and \"-_.:~\"", field, id))
		}
	}
	return nil
}

// checkCurrency accepts ISO 4217 codes and longer upper-case codes for
// assets ISO does not list (points, tokens): a letter, then 2..11 letters or
// digits.
func checkCurrency(field, c string) error {
	ok := len(c) >= minCurrencyLen && len(c) <= maxCurrencyLen && c[0] >= 'A' && c[0] <= 'Z'
	for i := 1; ok && i < len(c); i++ {
		ok = c[i] >= 'A' && c[i] <= 'Z' || c[i] >= '0' && c[i] <= '9'
	}
	if !ok {
		return invalid(field, fmt.Sprintf("currency %q is not %d..%d upper-case letters or digits starting with a letter", c, minCurrencyLen, maxCurrencyLen))
	}
	return nil
}

// checkReason accepts at most maxReasonLen bytes of UTF-8 without NUL,
// which PostgreSQL's text cannot hold (SQLite's can): one reason is
// refused or stored alike on both drivers.
func checkReason(r string) error {
	if len(r) > maxReasonLen || !utf8.ValidString(r) || strings.IndexByte(r, 0) >= 0 {
		return invalid("reason", fmt.Sprintf("reason must be at most %d bytes of UTF-8 without NUL", maxReasonLen))
	}
	return nil
}

// canonicalMetadata returns metadata as compact JSON with sorted keys, so
// that two requests meaning the same object compare equal however they were
// spaced or ordered; nil for none (absent or null). Numbers keep their
// exact text. Metadata that encoding/json would read as something else
// than was sent is refused: a member twice (it keeps the last), strings
// that are not UTF-8 or escape half a surrogate pair (it writes U+FFFD).
func canonicalMetadata(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if len(raw) > maxMetadataLen {
		return nil, invalid("metadata", fmt.Sprintf("metadata is %d bytes, more than %d", len(raw), maxMetadataLen))
	}
	// Its size bounds its nesting well below encoding/json's own bound.
	if err := strictjson.Check(raw, 0); err != nil {
		if se, ok := errors.AsType[*strictjson.Error](err); ok {
			return nil, invalid("metadata", "metadata"+joinPath(se.Path)+": "+se.Reason)
		}
		return nil, invalid("metadata", "metadata must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, invalid("metadata", "metadata must be a JSON object")
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return nil, invalid("metadata", "metadata must be one JSON object and nothing after it")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, invalid("metadata", "metadata cannot be encoded: "+err.Error())
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(out) > maxMetadataLen {
		return nil, invalid("metadata", fmt.Sprintf("metadata is %d bytes, more than %d", len(out), maxMetadataLen))
	}
	return out, nil
}

// joinPath is a strictjson path below a member, as it continues that
// member's name.
func joinPath(p string) string {
	if p == "" || p[0] == '[' {
		return p
	}
	return "." + p
}
