package idem

import (
	"fmt"
	"strings"

	"github.com/idemhq/idem/driver"
)

// Key names one idempotent operation: the tenant it belongs to (Scope), what
// it does (Operation, e.g. "POST /v1/transfers"), and the client's key. Keys
// of different scopes or operations never meet.
type Key struct {
	Scope     string
	Operation string
	Key       string
}

func (k Key) id() driver.KeyID {
	return driver.KeyID{Scope: k.Scope, Operation: k.Operation, Key: k.Key}
}

// MaxKeyLength bounds a client key, in bytes after unquoting.
const MaxKeyLength = 255

// DefaultTenant is the tenant of whatever names none: a request idemhttp
// finds no scope for (WithScope), an outbox message or a webhook endpoint
// without a Tenant, and every request of idem serve without API keys.
const DefaultTenant = "default"

// ParseKey validates a client's idempotency key as sent in the
// Idempotency-Key header: 1 to 255 visible ASCII characters (0x21-0x7E),
// either bare (abc) or as an RFC 8941 sf-string ("abc", where \" and \\ are
// the only escapes). It returns the key without quotes, or a *KeyError.
//
// The key names the operation before the handler runs: it is an id the
// sender promises is stable, never a hash of a request that carries a
// delivery timestamp or an attempt counter.
func ParseKey(s string) (string, error) {
	if s == "" {
		return "", &KeyError{Reason: "empty"}
	}
	if s[0] == '"' {
		return parseQuoted(s)
	}
	if err := checkKey(s); err != nil {
		return "", err
	}
	return s, nil
}

func parseQuoted(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", &KeyError{Reason: "quoted form is not closed"}
	}
	inner := s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch c {
		case '\\':
			if i+1 >= len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
				return "", &KeyError{Reason: "quoted form has an invalid escape"}
			}
			i++
			b.WriteByte(inner[i])
		case '"':
			return "", &KeyError{Reason: "quoted form has an unescaped quote"}
		default:
			b.WriteByte(c)
		}
	}
	key := b.String()
	if key == "" {
		return "", &KeyError{Reason: "empty"}
	}
	if err := checkKey(key); err != nil {
		return "", err
	}
	return key, nil
}

func checkKey(k string) error {
	if len(k) > MaxKeyLength {
		return &KeyError{Reason: fmt.Sprintf("longer than %d characters", MaxKeyLength)}
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x21 || c > 0x7e {
			return &KeyError{Reason: fmt.Sprintf("character %d is not visible ASCII", i+1)}
		}
	}
	return nil
}
