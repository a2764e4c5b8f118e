package webhook

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Event is one verified delivery, named by the sender's stable id.
type Event struct {
	// Provider is the endpoint's profile ("stripe", "github", ...).
	Provider string
	// Endpoint is the endpoint's name.
	Endpoint string
	// ID is the id the sender keeps across redeliveries of this event.
	// Where the sender signs it (IDUnsigned false) it is the dedupe key;
	// where it does not (github, shopify) the dedupe key is the body's hash
	// (see DedupeKey). Empty only for a Slack url_verification, which is
	// answered, not deduplicated.
	ID string
	// IDUnsigned reports that ID came from a header the signature does not
	// cover (github, shopify): whoever holds one signed delivery can resend
	// it under another ID. Such an ID is informative only; never key
	// business rows on it.
	IDUnsigned bool
	// Type is the event type ("payment_intent.succeeded", "push", ...);
	// empty when the sender names none.
	Type string
	// TypeUnsigned reports that Type came from a header the signature does
	// not cover (github's X-GitHub-Event, shopify's X-Shopify-Topic, an hmac
	// type_header): whoever holds one signed delivery can resend its body
	// under another type, which selects another handler. A handler of such
	// an event checks that the body is of the type it handles.
	TypeUnsigned bool
	// Body is the raw request body, byte for byte as signed.
	Body []byte
	// Header holds the headers the profile read, other than the signature.
	Header http.Header
	// Timestamp is the signed delivery time, for profiles whose scheme signs
	// one; zero otherwise. It changes with every delivery: never key on it.
	Timestamp time.Time
	// Challenge is Slack's url_verification challenge: when set, answer it
	// (200, the challenge as text/plain or {"challenge": ...}) and run
	// nothing.
	Challenge string
}

// Verifier checks one endpoint's deliveries.
type Verifier interface {
	// Verify checks the signature over the raw body, then the signed
	// timestamp against now, and only then parses what it needs to name the
	// event. Every error is an *Error wrapping one of the sentinels.
	Verify(h http.Header, body []byte, now time.Time) (Event, error)
}

// NewVerifier validates e (after its defaults) and returns the verifier of
// its profile. Errors are *ConfigError.
func NewVerifier(e Endpoint) (Verifier, error) {
	tolSet := e.Tolerance != 0
	e = e.withDefaults()
	if err := e.validate(tolSet); err != nil {
		return nil, err
	}
	b := base{ep: e, newHash: sha256.New}
	for _, s := range e.Secrets {
		key := []byte(s)
		if e.Provider == ProviderStandard {
			key, _ = standardKey(s) // validate checked it
		}
		b.keys = append(b.keys, key)
	}
	switch e.Provider {
	case ProviderStripe:
		return &stripeVerifier{b}, nil
	case ProviderStandard:
		return &standardVerifier{b}, nil
	case ProviderGitHub:
		return &githubVerifier{b}, nil
	case ProviderShopify:
		return &shopifyVerifier{b}, nil
	case ProviderSlack:
		return &slackVerifier{b}, nil
	case ProviderSquare:
		return &squareVerifier{b, []byte(e.URL)}, nil
	case ProviderPaddle:
		return &paddleVerifier{b}, nil
	default: // ProviderHMAC; validate refused anything else
		return newHMACVerifier(b), nil
	}
}

// base holds what every profile shares: the endpoint, its keys and its hash.
type base struct {
	ep      Endpoint
	keys    [][]byte
	newHash func() hash.Hash
}

func (b *base) fail(sentinel error, format string, args ...any) (Event, error) {
	return Event{}, fail(b.ep.Provider, sentinel, fmt.Sprintf(format, args...))
}

// header returns a header's value, refusing one over MaxHeaderBytes.
func (b *base) header(h http.Header, name string) (string, *Error) {
	v := h.Get(name)
	if len(v) > MaxHeaderBytes {
		return "", fail(b.ep.Provider, ErrSignatureInvalid, fmt.Sprintf("%s is longer than %d bytes", name, MaxHeaderBytes))
	}
	return v, nil
}

func (b *base) checkBody(body []byte) *Error {
	if len(body) > b.ep.MaxBodyBytes {
		return fail(b.ep.Provider, ErrBodyTooLarge, fmt.Sprintf("%d bytes, limit %d", len(body), b.ep.MaxBodyBytes))
	}
	return nil
}

// match reports whether any signature equals the MAC, under any key, of the
// bytes write produces. Each comparison is constant-time (hmac.Equal).
func (b *base) match(sigs [][]byte, write func(hash.Hash)) bool {
	for _, key := range b.keys {
		m := hmac.New(b.newHash, key)
		write(m)
		sum := m.Sum(nil)
		for _, sig := range sigs {
			if hmac.Equal(sum, sig) {
				return true
			}
		}
	}
	return false
}

// fresh refuses a signed time further than the tolerance from now, in the
// past (a replay) or in the future (a clock far off, or a forged delay).
func (b *base) fresh(ts time.Time, now time.Time) *Error {
	d := now.Sub(ts)
	switch {
	case d > b.ep.Tolerance:
		return fail(b.ep.Provider, ErrTimestampStale, fmt.Sprintf("signed %s ago, tolerance %s", d.Round(time.Second), b.ep.Tolerance))
	case d < -b.ep.Tolerance:
		return fail(b.ep.Provider, ErrTimestampStale, fmt.Sprintf("signed %s in the future, tolerance %s", (-d).Round(time.Second), b.ep.Tolerance))
	}
	return nil
}

func (b *base) event(id, typ string, body []byte, h http.Header, ts time.Time) Event {
	return Event{Provider: b.ep.Provider, Endpoint: b.ep.Name, ID: id, Type: typ, Body: body, Header: h, Timestamp: ts}
}

// pick copies the named headers that are present.
func pick(h http.Header, names ...string) http.Header {
	out := make(http.Header, len(names))
	for _, n := range names {
		if v := h.Get(n); v != "" {
			out.Set(n, v)
		}
	}
	return out
}

// parseUnix parses a signed timestamp: 1 to 12 decimal digits of Unix
// seconds, nothing else (no sign, no spaces), so that the text that was
// signed and the time that is checked cannot disagree.
func parseUnix(s string) (time.Time, error) {
	if s == "" || len(s) > 12 {
		return time.Time{}, fmt.Errorf("timestamp %q is not 1 to 12 digits", clip(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return time.Time{}, fmt.Errorf("timestamp %q is not 1 to 12 digits", clip(s))
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(n, 0), nil
}

// clip shortens attacker-supplied text before it goes into an error.
func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// jsonFields decodes the body into dst (a struct of the fields the profile
// needs). Unknown fields are ignored: a new API version never refuses a
// delivery.
func (b *base) jsonFields(body []byte, dst any) *Error {
	if err := json.Unmarshal(body, dst); err != nil {
		return fail(b.ep.Provider, ErrMalformedBody, "body is not the JSON object the profile reads: "+err.Error())
	}
	return nil
}

// jsonPath finds a dot-separated path in a JSON object body. A string
// value is returned as is, a number as its literal; anything else (absent,
// null, object, array, boolean) is "". The error is for a body that is not
// a JSON object.
func jsonPath(body []byte, path []string) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return "", err
	}
	if obj == nil {
		return "", fmt.Errorf("body is null, not an object")
	}
	for i, p := range path {
		v, ok := obj[p]
		if !ok {
			return "", nil
		}
		if i == len(path)-1 {
			return scalar(v)
		}
		obj = nil
		if json.Unmarshal(v, &obj) != nil {
			return "", nil // an inner value that is not an object: not found
		}
	}
	return "", nil
}

func scalar(raw json.RawMessage) (string, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 {
		return "", nil
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case c == '-' || c >= '0' && c <= '9':
		return string(raw), nil
	}
	return "", nil
}

func hashFor(algorithm string) func() hash.Hash {
	switch algorithm {
	case "sha512":
		return sha512.New
	case "sha1":
		return sha1.New
	}
	return sha256.New
}
