package idem_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	ok := map[string]string{
		"abc":                                "abc",
		`"abc"`:                              "abc",
		`"a\"b"`:                             `a"b`,
		`"a\\b"`:                             `a\b`,
		"8e03978e-40d5-43e8-bc93":            "8e03978e-40d5-43e8-bc93",
		strings.Repeat("k", 255):             strings.Repeat("k", 255),
		`"` + strings.Repeat("q", 255) + `"`: strings.Repeat("q", 255),
		"!~":                                 "!~",
	}
	for in, want := range ok {
		got, err := idem.ParseKey(in)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{
		"", `""`, strings.Repeat("k", 256), `"` + strings.Repeat("q", 256) + `"`,
		"a b", "a\tb", "a\x00b", "a\nb", "é", `"abc`, `"`, `"a"b"`, `"a\xb"`, `"a\"`, `"a b"`,
	}
	for _, in := range bad {
		_, err := idem.ParseKey(in)
		var ke *idem.KeyError
		if !errors.Is(err, idem.ErrKeyInvalid) || !errors.As(err, &ke) || ke.Reason == "" {
			t.Errorf("ParseKey(%q) = %v; want a *KeyError", in, err)
		}
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(op, body string, ignore ...string) []byte {
		t.Helper()
		b, err := idem.Fingerprint(op, []byte(body), ignore...)
		if err != nil {
			t.Fatalf("Fingerprint(%q, %q): %v", op, body, err)
		}
		return b
	}
	same := [][2]string{
		{`{"a":1,"b":[1,2]}`, `{ "b" : [1, 2], "a":1 }`},
		{``, `   `},
		{`{"n":1e3}`, `{"n":1e3}`},
	}
	for _, p := range same {
		if !bytes.Equal(fp("op", p[0]), fp("op", p[1])) {
			t.Errorf("%q and %q differ", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":1}`, `{"a":"1"}`},
		{`{"n":1}`, `{"n":1.0}`}, // numbers as written: the client changed it
		{`{}`, ``},
		{`[1,2]`, `[2,1]`},
	}
	for _, p := range differ {
		if bytes.Equal(fp("op", p[0]), fp("op", p[1])) {
			t.Errorf("%q and %q collide", p[0], p[1])
		}
	}
	if bytes.Equal(fp("POST /a", `{}`), fp("POST /b", `{}`)) {
		t.Error("operation is not in the fingerprint")
	}
	// The operation and body are framed: no ambiguity at their boundary.
	if bytes.Equal(fp("ab", `"c"`), fp("a", `"bc"`)) {
		t.Error("operation/body boundary is ambiguous")
	}
	if !bytes.Equal(fp("op", `{"a":1,"sent_at":"x"}`, "sent_at"), fp("op", `{"a":1,"sent_at":"y"}`, "sent_at")) {
		t.Error("ignored field changed the fingerprint")
	}
	for _, bad := range []string{`{`, `{"a":1} {"b":2}`, `nope`} {
		if _, err := idem.Fingerprint("op", []byte(bad)); !errors.Is(err, idem.ErrInvalidBody) {
			t.Errorf("Fingerprint(%q) = %v, want ErrInvalidBody", bad, err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"`, `"\`, strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := idem.ParseKey(s)
		if err != nil {
			return
		}
		if k == "" || len(k) > idem.MaxKeyLength {
			t.Fatalf("ParseKey(%q) accepted %q", s, k)
		}
		// A valid key round-trips through its bare form.
		if k2, err := idem.ParseKey(k); err != nil || k2 != k {
			t.Fatalf("bare form of %q: %q, %v", k, k2, err)
		}
	})
}

func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,{"b":null}]}`, `"x"`, `1`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		a, err := idem.Fingerprint("op", []byte(body))
		if err != nil {
			return
		}
		b, err := idem.Fingerprint("op", []byte(body))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("fingerprint of %q is not stable", body)
		}
	})
}
