package idemhttp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

// FuzzParseKey: the Idempotency-Key parser never panics, accepts only 1 to
// 255 visible ASCII characters, and a key it accepts survives being sent
// again, quoted and (unless it starts with a quote) bare.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"abc", `"abc"`, `"a\"b"`, `"a\\b"`, `"a\qb"`, `"abc`, `""`, `"`, "", "a b", "a\tb", "clé",
		strings.Repeat("k", 255), strings.Repeat("k", 256), `"` + strings.Repeat("k", 255) + `"`, `"\"x"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := idem.ParseKey(header)
		if err != nil {
			if !errors.Is(err, idem.ErrKeyInvalid) {
				t.Fatalf("ParseKey(%q) error %v is not ErrKeyInvalid", header, err)
			}
			return
		}
		if len(key) < 1 || len(key) > idem.MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q, length %d", header, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q holds byte %#x", header, key, key[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := idem.ParseKey(quoted); err != nil || again != key {
			t.Fatalf("quoted round trip of %q: %q, %v", key, again, err)
		}
		if key[0] != '"' {
			if again, err := idem.ParseKey(key); err != nil || again != key {
				t.Fatalf("bare round trip of %q: %q, %v", key, again, err)
			}
		}
	})
}

// FuzzFingerprint: the body canonicalisation never panics, refuses
// non-JSON with ErrInvalidBody, and gives one fingerprint to every spelling
// of the same JSON (indented, compacted, members reordered by a decode and
// re-encode), and a different one to another operation.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{
		`{"amount": 100, "currency": "EUR"}`, `{"b":1,"a":[1,2,{"z":null,"y":true}]}`, `[]`, `"x"`, `1e400`,
		`-0`, `1.0`, `{"a":1,"a":2}`, `{"sent_at":"2026-01-01T00:00:00Z","amount":1}`, ``, ` `, `{`, `{} {}`,
		`{"s":"\u00e9\ud83d\ude00"}`, "{\"bad\":\"\xff\"}", `nul`,
	} {
		f.Add([]byte(s))
	}
	const op = "POST /v1/transfers/t_1/reversals"
	f.Fuzz(func(t *testing.T, body []byte) {
		fp, err := idem.Fingerprint(op, body, "sent_at")
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidBody) {
				t.Fatalf("Fingerprint(%q) error %v is not ErrInvalidBody", body, err)
			}
			return
		}
		if len(fp) != 32 {
			t.Fatalf("fingerprint of %d bytes", len(fp))
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return
		}
		var spellings [][]byte
		var indented, compacted bytes.Buffer
		if err := json.Indent(&indented, body, " ", "\t"); err != nil {
			t.Fatalf("Fingerprint accepted %q, json.Indent refused it: %v", body, err)
		}
		if err := json.Compact(&compacted, body); err != nil {
			t.Fatalf("Fingerprint accepted %q, json.Compact refused it: %v", body, err)
		}
		spellings = append(spellings, indented.Bytes(), compacted.Bytes(), append([]byte("\n "), body...))
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("Fingerprint accepted %q, the decoder refused it: %v", body, err)
		}
		if re, err := json.Marshal(v); err == nil {
			spellings = append(spellings, re)
		}
		for _, s := range spellings {
			again, err := idem.Fingerprint(op, s, "sent_at")
			if err != nil || !bytes.Equal(again, fp) {
				t.Fatalf("%q and %q are the same JSON with different fingerprints (%v)", body, s, err)
			}
		}
		other, err := idem.Fingerprint(op+"x", body, "sent_at")
		if err != nil || bytes.Equal(other, fp) {
			t.Fatalf("another operation, same fingerprint for %q (%v)", body, err)
		}
	})
}
