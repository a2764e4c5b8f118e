package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/jsonfp"
)

// fingerprintByDefinition is the fingerprint as Fingerprint defines it,
// through the slowest path: the body decoded and marshalled again, then
// hashed with the operation framed by its length.
func fingerprintByDefinition(t *testing.T, operation string, body []byte, ignore []string) []byte {
	t.Helper()
	var canon []byte
	if len(bytes.TrimSpace(body)) > 0 {
		var err error
		if canon, err = canonicalDecoded(body, ignore); err != nil {
			return nil
		}
	}
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(operation)))
	h.Write(n[:])
	h.Write([]byte(operation))
	h.Write(canon)
	return h.Sum(nil)
}

// checkAsIs asserts that a body jsonfp.AsIs takes as it is is its own
// canonical form, and that Fingerprint and the definition agree on every
// body, whichever path it takes. It reports whether the body was taken as
// it is.
func checkAsIs(t *testing.T, body []byte, ignore []string) bool {
	t.Helper()
	const op = "POST /v1/transfers"
	asIs := jsonfp.AsIs(body, ignore)
	if asIs {
		canon, err := canonicalJSON(body, ignore)
		if err != nil || !bytes.Equal(canon, body) {
			t.Fatalf("%q ignoring %v taken as it is, but its canonical form is %q, %v", body, ignore, canon, err)
		}
	}
	want := fingerprintByDefinition(t, op, body, ignore)
	got, err := Fingerprint(op, body, ignore...)
	if (err == nil) != (want != nil) || !bytes.Equal(got, want) {
		t.Fatalf("Fingerprint(%q ignoring %v) = %x, %v; by definition %x", body, ignore, got, err, want)
	}
	if sum := jsonfp.Sum(body, "POST", " ", "/v1/transfers"); asIs && !bytes.Equal(sum[:], want) {
		t.Fatalf("jsonfp.Sum in parts of %q is %x; the fingerprint %x", body, sum, want)
	}
	return asIs
}

// A body in canonical form is fingerprinted as it is, and any other goes
// through the canonical form; both give the fingerprint of the definition,
// byte for byte, so that stored fingerprints stay comparable.
func TestFingerprintAsIs(t *testing.T) {
	t.Parallel()
	ignore := []string{"sent_at", "b"}
	for _, tc := range []struct {
		body   string
		ignore []string
		asIs   bool
	}{
		{``, nil, true},
		{`{}`, nil, true},
		{`[]`, nil, true},
		{`0`, nil, true},
		{`-0`, nil, true},
		{`1.0`, nil, true},
		{`1E+3`, nil, true},
		{`"x"`, nil, true},
		{`null`, nil, true},
		{`{"amount":100,"credit_account_id":"b","currency":"EUR","debit_account_id":"a"}`, nil, true},
		{`{"a":{"c":[1,{"d":null,"e":true}],"d":"x"},"z":[]}`, ignore, true},
		{`{"a":1,"z":{"b":2,"sent_at":3}}`, ignore, true}, // only top-level members are ignored
		{`{"":1,"a":2}`, nil, true},
		// Not canonical: the canonical form is built, to the same fingerprint.
		{`{"debit_account_id":"a","credit_account_id":"b","amount":100,"currency":"EUR"}`, nil, false},
		{` {}`, nil, false},
		{`{} `, nil, false},
		{"{\n}", nil, false},
		{`{"a": 1}`, nil, false},
		{`[1, 2]`, nil, false},
		{`   `, nil, false},
		{`{"a":1,"sent_at":"x"}`, ignore, false},
		{`{"a":1,"b":2}`, ignore, false},
		{`{"a":1,"a":1}`, nil, false},
		{`{"b":1,"a":1}`, nil, false},
		{`{"a":"<"}`, nil, false},
		{`{"a":"\u0041"}`, nil, false},
		{`{"a":"é"}`, nil, false},
		{"\ufeff{}", nil, false},
		{strings.Repeat("[", jsonfp.MaxDepth+1) + strings.Repeat("]", jsonfp.MaxDepth+1), nil, false},
		// Not JSON: refused on either path.
		{`{`, nil, false},
		{`01`, nil, false},
		{`{"a":1}{}`, nil, false},
		{`[1,]`, nil, false},
	} {
		if got := checkAsIs(t, []byte(tc.body), tc.ignore); got != tc.asIs {
			t.Errorf("AsIs(%q ignoring %v) = %v, want %v", tc.body, tc.ignore, got, tc.asIs)
		}
	}
	for _, s := range canonicalSamples {
		for _, ig := range [][]string{nil, ignore} {
			checkAsIs(t, []byte(s), ig)
		}
	}
	// A large canonical body takes Sum's streaming hash.
	big := []byte(`{"a":"` + strings.Repeat("x", 4096) + `"}`)
	if !checkAsIs(t, big, nil) {
		t.Error("a large canonical body was not taken as it is")
	}
}

// Many generated bodies: each one's canonical form is taken as it is, and
// each of its respellings (white space, members out of order, an ignored
// member, an escape) is not, all to one fingerprint.
func TestFingerprintAsIsGenerated(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(46, 4))
	ignore := []string{"sent_at"}
	taken, rebuilt := 0, 0
	for range 5000 {
		v := genValue(rng, 0)
		canon, err := canonicalDecoded([]byte(v), ignore)
		if err != nil {
			t.Fatalf("generated %s: %v", v, err)
		}
		// json.Marshal escapes what AsIs leaves to the canonical form's
		// reading; any other canonical form is taken as it is.
		plain := !bytes.ContainsRune(canon, '\\') && !slices.ContainsFunc(canon, func(c byte) bool { return c >= 0x7f })
		switch {
		case checkAsIs(t, canon, ignore):
			taken++
		case plain:
			t.Fatalf("canonical %s not taken as it is", canon)
		}
		for _, re := range respell(rng, canon) {
			if checkAsIs(t, re, ignore) {
				t.Fatalf("respelling %q of %s taken as it is", re, canon)
			}
			if want := fingerprintByDefinition(t, "POST /v1/transfers", canon, ignore); !bytes.Equal(want, fingerprintByDefinition(t, "POST /v1/transfers", re, ignore)) {
				t.Fatalf("respelling %q of %s has another fingerprint", re, canon)
			}
			rebuilt++
		}
		// The generated spelling itself, whichever path it takes.
		checkAsIs(t, []byte(v), ignore)
	}
	t.Logf("%d canonical forms taken as they are, %d respellings rebuilt", taken, rebuilt)
	if taken < 2500 || rebuilt < taken {
		t.Fatalf("%d of 5000 canonical forms taken as they are, %d respellings rebuilt", taken, rebuilt)
	}
}

// genValue is a random JSON value in a random spelling: members in any
// order, white space here and there, strings with and without escapes,
// numbers of every form, sometimes an ignored top-level member.
func genValue(rng *rand.Rand, depth int) string {
	ws := func() string {
		if rng.IntN(8) == 0 {
			return []string{" ", "\n", "\t", "  "}[rng.IntN(4)]
		}
		return ""
	}
	k := rng.IntN(10)
	if depth >= 4 {
		k = 4 + rng.IntN(6)
	}
	switch {
	case k < 2:
		n := rng.IntN(5)
		names := rng.Perm(8)[:n]
		var b strings.Builder
		b.WriteString("{" + ws())
		if depth == 0 && rng.IntN(4) == 0 {
			b.WriteString(`"sent_at":"` + strconv.Itoa(rng.IntN(100)) + `"`)
			if n > 0 {
				b.WriteString(",")
			}
		}
		for i, name := range names {
			if i > 0 {
				b.WriteString("," + ws())
			}
			fmt.Fprintf(&b, `"%c%d"%s:%s%s`, 'a'+rune(name%4), name, ws(), ws(), genValue(rng, depth+1))
		}
		b.WriteString(ws() + "}")
		return b.String()
	case k < 4:
		n := rng.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws() + genValue(rng, depth+1) + ws()
		}
		return "[" + strings.Join(parts, ",") + "]"
	case k < 7:
		return []string{`"x"`, `""`, `"acc-1"`, `"a b"`, `"\u00e9"`, `"é"`, `"<b>"`, `"a\"b"`, `"\n"`, `"\/"`}[rng.IntN(10)]
	case k < 9:
		return []string{`0`, `-0`, `100`, `-7`, `1.5`, `1.50`, `2e10`, `2E+10`, `1e-3`, `123456789012345678901234567890`}[rng.IntN(10)]
	}
	return []string{`true`, `false`, `null`}[rng.IntN(3)]
}

// respell returns spellings of canon that are JSON with the same canonical
// form but not canonical themselves.
func respell(rng *rand.Rand, canon []byte) [][]byte {
	out := [][]byte{
		append([]byte(" "), canon...),
		append(append([]byte{}, canon...), '\n'),
	}
	if i := bytes.IndexByte(canon, ':'); i > 0 {
		re := append(append(append([]byte{}, canon[:i+1]...), ' '), canon[i+1:]...)
		out = append(out, re)
	}
	if canon[0] == '{' && len(canon) > 2 {
		out = append(out, append([]byte(`{"sent_at":`+strconv.Itoa(rng.IntN(9))+`,`), canon[1:]...))
	}
	if i := bytes.Index(canon, []byte(`"x"`)); i >= 0 {
		out = append(out, append(append(append([]byte{}, canon[:i]...), `"\u0078"`...), canon[i+3:]...))
	}
	return out
}

func FuzzFingerprintAsIs(f *testing.F) {
	for _, s := range canonicalSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAsIs(t, body, nil)
		checkAsIs(t, body, []string{"sent_at", "b"})
	})
}
