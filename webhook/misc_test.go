package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
)

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fail("stripe", ErrSignatureMissing, ""), 401, "signature_missing"},
		{fail("stripe", ErrSignatureInvalid, ""), 401, "signature_invalid"},
		{fail("stripe", ErrTimestampStale, ""), 401, "timestamp_stale"},
		{fail("stripe", ErrMalformedBody, ""), 400, "malformed_body"},
		{fail("stripe", ErrEventIDMissing, ""), 400, "event_id_missing"},
		{fail("stripe", ErrBodyTooLarge, ""), 413, "body_too_large"},
		{fmt.Errorf("intake: %w", fail("stripe", ErrTimestampStale, "")), 401, "timestamp_stale"},
		{errors.New("database down"), 500, "internal_error"},
	} {
		status, code := HTTPStatus(tc.err)
		if status != tc.status || code != tc.code {
			t.Errorf("HTTPStatus(%v) = %d %s, want %d %s", tc.err, status, code, tc.status, tc.code)
		}
		var we *Error
		if errors.As(tc.err, &we) && we.Code != tc.code {
			t.Errorf("%v: Code = %s", tc.err, we.Code)
		}
	}
}

func TestErrorsLeakNoSecret(t *testing.T) {
	t.Parallel()
	for _, c := range profileCases() {
		v := mustVerifier(t, c.ep)
		d := delivery{body: c.body("evt_1"), ts: t0, id: "evt_1"}
		_, err := v.Verify(c.sign([]string{c.ep.Secrets[0]}, d), append([]byte(" "), d.body...), t0)
		for _, s := range c.ep.Secrets {
			if err == nil || strings.Contains(err.Error(), s) {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
	}
}

func TestDedupeKey(t *testing.T) {
	t.Parallel()
	ep := Endpoint{Name: "stripe-main", Tenant: "acme"}
	k := DedupeKey(ep, Event{ID: "evt_123"})
	if k != (idem.Key{Scope: "acme", Operation: "webhook:stripe-main", Key: "evt_123"}) {
		t.Fatalf("key = %+v", k)
	}
	if k := DedupeKey(Endpoint{Name: "x"}, Event{ID: "a"}); k.Scope != "default" {
		t.Fatalf("scope = %q", k.Scope)
	}
	long := strings.Repeat("a", idem.MaxKeyLength+1)
	for _, id := range []string{long, "with space", "tab\t", "é"} {
		k := DedupeKey(ep, Event{ID: id})
		if !strings.HasPrefix(k.Key, "sha256:") || len(k.Key) != 7+64 {
			t.Fatalf("%q -> %q", id, k.Key)
		}
		if _, err := idem.ParseKey(k.Key); err != nil {
			t.Fatalf("%q: hashed key is not a valid key: %v", id, err)
		}
		if DedupeKey(ep, Event{ID: id}) != k {
			t.Fatal("hashing is not stable")
		}
	}
	if DedupeKey(ep, Event{ID: strings.Repeat("a", idem.MaxKeyLength)}).Key != strings.Repeat("a", idem.MaxKeyLength) {
		t.Fatal("a 255-character id should be kept as is")
	}
	// A key of the hashed form is always a hash: an id that has that form
	// is hashed too, so it cannot take the key of the id it is the hash of.
	// Ids of any other form, "sha256:"-prefixed or not, keep their key.
	hashed := DedupeKey(ep, Event{ID: long}).Key
	if k := DedupeKey(ep, Event{ID: hashed}).Key; k == hashed || !strings.HasPrefix(k, "sha256:") || len(k) != 7+64 {
		t.Fatalf("the literal id %q has key %q", hashed, k)
	}
	for _, id := range []string{
		"evt_1", "sha256:", "sha256:abc", strings.ToUpper(hashed), "SHA256:" + hashed[7:], hashed[:70], hashed + "0",
		"sha256:" + strings.Repeat("g", 64), strings.Repeat("0", 64),
	} {
		if k := DedupeKey(ep, Event{ID: id}).Key; k != id {
			t.Fatalf("%q -> %q, want it kept as is", id, k)
		}
	}
	// The fingerprint follows the key only: a redelivered body that differs
	// in a byte replays instead of being refused as key reuse.
	r1 := DedupeRequest(ep, Event{ID: "evt_1", Body: []byte(`{"a":1}`)})
	r2 := DedupeRequest(ep, Event{ID: "evt_1", Body: []byte(`{"a":1,"b":2}`)})
	if string(r1.Fingerprint) != string(r2.Fingerprint) || r1.Key != r2.Key {
		t.Fatal("same id, different requests")
	}
	if r3 := DedupeRequest(ep, Event{ID: "evt_2"}); string(r3.Fingerprint) == string(r1.Fingerprint) {
		t.Fatal("different ids, same fingerprint")
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	var got []string
	mk := func(name string) Handler {
		return func(ctx context.Context, tx driver.Tx, e Event) error { got = append(got, name); return nil }
	}
	r.Handle("stripe", "payment_intent.succeeded", mk("pi"))
	r.Handle("stripe", AnyType, mk("stripe-any"))
	r.Handle("github", "push", mk("push"))
	for _, tc := range []struct {
		provider, typ, want string
	}{
		{"stripe", "payment_intent.succeeded", "pi"},
		{"stripe", "charge.refunded", "stripe-any"},
		{"github", "push", "push"},
	} {
		h, ok := r.Lookup(Event{Provider: tc.provider, Type: tc.typ})
		if !ok {
			t.Fatalf("%s %s: no handler", tc.provider, tc.typ)
		}
		_ = h(context.Background(), nil, Event{})
		if got[len(got)-1] != tc.want {
			t.Fatalf("%s %s ran %s", tc.provider, tc.typ, got[len(got)-1])
		}
	}
	if _, ok := r.Lookup(Event{Provider: "github", Type: "issues"}); ok {
		t.Fatal("github issues has no handler")
	}
	for name, f := range map[string]func(){
		"duplicate":        func() { r.Handle("github", "push", mk("again")) },
		"nil":              func() { r.Handle("github", "issues", nil) },
		"unknown provider": func() { r.Handle("gitlab", "push", mk("x")) },
		"empty type":       func() { r.Handle("github", "", mk("x")) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestEventHeaderHoldsNoSignature(t *testing.T) {
	t.Parallel()
	v := mustVerifier(t, Endpoint{Name: "gh", Provider: "github", Secrets: []string{"k"}})
	h := signGitHub([]string{"k"}, delivery{body: []byte(`{}`), id: "d-1"})
	h.Set("Cookie", "session=1")
	ev, err := v.Verify(h, []byte(`{}`), t0)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Header.Get("Cookie") != "" || ev.Header.Get("X-Hub-Signature-256") != "" || ev.Header.Get("X-GitHub-Delivery") != "d-1" {
		t.Fatalf("header = %v", ev.Header)
	}
}

// What the sender signs decides the key and the marks: an hmac type header
// is marked unsigned, a type field is not; a github delivery is keyed by
// its body, whatever its delivery header says.
func TestUnsignedMarks(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"e1","kind":"paid"}`)
	sign := func(secret string, b []byte) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(b)
		return hex.EncodeToString(m.Sum(nil))
	}
	for _, tc := range []struct {
		name string
		cfg  HMACConfig
		want bool
	}{
		{"type header", HMACConfig{Header: "X-Sig", IDField: "id", TypeHeader: "X-Type"}, true},
		{"type field", HMACConfig{Header: "X-Sig", IDField: "id", TypeField: "kind"}, false},
	} {
		cfg := tc.cfg
		v := mustVerifier(t, Endpoint{Name: "h", Provider: ProviderHMAC, Secrets: []string{"k"}, HMAC: &cfg})
		h := http.Header{}
		h.Set("X-Sig", sign("k", body))
		h.Set("X-Type", "paid")
		ev, err := v.Verify(h, body, time.Now())
		if err != nil || ev.TypeUnsigned != tc.want || ev.IDUnsigned || ev.Type != "paid" {
			t.Errorf("%s: %+v %v; want TypeUnsigned %v", tc.name, ev, err, tc.want)
		}
	}

	ep := Endpoint{Name: "gh", Provider: ProviderGitHub, Secrets: []string{"k"}}
	v := mustVerifier(t, ep)
	var keys []string
	for _, delivery := range []string{"d-1", "d-2"} {
		h := http.Header{}
		h.Set("X-Hub-Signature-256", "sha256="+sign("k", body))
		h.Set("X-GitHub-Hook-ID", "1")
		h.Set("X-GitHub-Delivery", delivery)
		ev, err := v.Verify(h, body, time.Now())
		if err != nil || !ev.IDUnsigned || !ev.TypeUnsigned {
			t.Fatalf("%s: %+v %v", delivery, ev, err)
		}
		keys = append(keys, DedupeKey(ep, ev).Key)
	}
	if keys[0] != keys[1] || !strings.HasPrefix(keys[0], "body-sha256:") {
		t.Fatalf("keys %q, want one body-sha256: key", keys)
	}
}
