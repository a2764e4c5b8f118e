package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/idemhq/idem"
)

// DedupeKey names a verified event for the keeper: Scope is the endpoint's
// tenant, Operation is "webhook:<endpoint name>", Key is the sender's stable
// event id — never anything that changes per delivery (timestamp,
// signature, attempt counter), so a redelivery meets the first copy's key.
//
// An id the sender does not sign (ev.IDUnsigned: github, shopify) cannot
// be the key: whoever holds one signed delivery would resend its body under
// a fresh id and be taken for a new event. The key of such an event is
// "body-sha256:" and the lowercase hex SHA-256 of the signed body, so a
// resent body is the same event whatever its id header says. Two distinct
// events with byte-identical bodies are therefore one event; the senders
// concerned put the resource and its change time in every body.
//
// An id the keeper cannot store as is (longer than idem.MaxKeyLength or
// with a byte outside visible ASCII 0x21-0x7E) becomes "sha256:" followed
// by the lowercase hex SHA-256 of its bytes: still one key per id, and the
// prefix keeps it from meeting a sender's id that happens to be 64 hex
// characters.
//
// A key of that form, "sha256:" and 64 lowercase hex digits, is therefore
// always a hash: an id that itself has that form is hashed too, never kept
// as is, or a sender could name its event after another event's hashed key
// and be answered as that event's replay. Every other id is kept as is, so
// no two ids share a key (short of a SHA-256 collision), and the keys of
// ids of any other form are the ones earlier versions stored. Call it only
// for events with an ID (not a Slack challenge).
func DedupeKey(e Endpoint, ev Event) idem.Key {
	tenant := e.Tenant
	if tenant == "" {
		tenant = idem.DefaultTenant
	}
	key := keyFor(ev.ID)
	if ev.IDUnsigned {
		sum := sha256.Sum256(ev.Body)
		key = bodyPrefix + hex.EncodeToString(sum[:])
	}
	return idem.Key{Scope: tenant, Operation: "webhook:" + e.Name, Key: key}
}

// DedupeRequest is the keeper request of a verified event: DedupeKey, and a
// fingerprint derived from the key alone. A provider that resends an event
// id resends the same event, even if a byte of the body differed (a
// re-serialised payload, a field added by a newer API version; for a
// body-keyed event a differing body is another key); refusing
// it as "key reused" would make the provider retry until it disables the
// endpoint. So every copy of an id replays the first outcome.
func DedupeRequest(e Endpoint, ev Event) idem.Request {
	k := DedupeKey(e, ev)
	fp := sha256.Sum256([]byte("webhook\x00" + k.Scope + "\x00" + k.Operation + "\x00" + k.Key))
	return idem.Request{Key: k, Body: ev.Body, Fingerprint: fp[:]}
}

// hashedPrefix begins every key that is the hash of an id; bodyPrefix
// every key that is the hash of a body. An endpoint's keys are all of one
// kind (its profile decides whether ids are signed), and the prefixes
// differ so that a stored key says which.
const (
	hashedPrefix = "sha256:"
	bodyPrefix   = "body-sha256:"
)

func keyFor(id string) string {
	if storable(id) && !looksHashed(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// storable reports whether the keeper takes id as a key: 1 to
// idem.MaxKeyLength bytes of visible ASCII.
func storable(id string) bool {
	if len(id) < 1 || len(id) > idem.MaxKeyLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// looksHashed reports whether id has the form keyFor gives a hashed id:
// the prefix and 64 lowercase hex digits.
func looksHashed(id string) bool {
	digits, ok := strings.CutPrefix(id, hashedPrefix)
	if !ok || len(digits) != hex.EncodedLen(sha256.Size) {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if c := digits[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
