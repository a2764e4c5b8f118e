package idem

import (
	"bytes"
	"strings"
	"testing"
)

var canonicalSamples = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e-3`, `1E+3`, `true`, `false`, `null`,
	`{"debit_account_id":"acc-1","credit_account_id":"acc-2","amount":100,"currency":"EUR"}`,
	` { "b" : [ 1 , 2 ] , "a" : { "d" : null , "c" : true } } `,
	"{\n\t\"a\":\r\n1}",
	`{"a":1,"sent_at":"x","z":[{"sent_at":1}]}`,
	`{"a":1,"a":2}`, `{"b":1,"a":2,"b":3}`,
	`{"a":"<tag>"}`, `{"a":"x&y"}`, `{"a":"\u00e9"}`, `{"a":"é"}`, `{"a":"a\"b"}`, `{"a":"\n"}`,
	"{\"a\":\"\x7f\"}", "{\"a\":\"\xff\"}", "{\"a\":\"\t\"}",
	`{"<":1}`, `{"":1}`, `{"a":[]}`, `{"a":[{}]}`,
	`01`, `1.`, `.5`, `-`, `1e`, `1e+`, `+1`, `0x10`, `1.0`, `100000000000000000000000000`,
	`tru`, `truex`, `nul`, `[1,]`, `[,1]`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{a:1}`,
	`{"a":1} {"b":2}`, `{"a":1}}`, `[1]]`, `"x" `, ` "x`, `{`, `[`, `"`,
	"\ufeff{}", `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
}

// canonicalPlain answers what canonicalDecoded answers for every body it
// reads, and leaves to it every body it cannot.
func TestCanonicalPlain(t *testing.T) {
	t.Parallel()
	for _, s := range canonicalSamples {
		for _, ignore := range [][]string{nil, {"sent_at", "b"}} {
			checkCanonicalPlain(t, []byte(s), ignore)
		}
	}
	for _, s := range []string{`{"a":1,"b":[true,null,"x"]}`, ` [ 1 , -2.5E3 ] `, `"plain"`} {
		if _, ok := canonicalPlain([]byte(s), nil); !ok {
			t.Errorf("%s went to canonicalDecoded", s)
		}
	}
	deep := strings.Repeat("[", plainMaxDepth+1) + strings.Repeat("]", plainMaxDepth+1)
	if _, ok := canonicalPlain([]byte(deep), nil); ok {
		t.Errorf("nesting deeper than %d read by hand", plainMaxDepth)
	}
}

func FuzzCanonicalPlain(f *testing.F) {
	for _, s := range canonicalSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkCanonicalPlain(t, body, nil)
		checkCanonicalPlain(t, body, []string{"sent_at", "b"})
	})
}

func checkCanonicalPlain(t *testing.T, body []byte, ignore []string) {
	t.Helper()
	got, ok := canonicalPlain(body, ignore)
	if !ok {
		return
	}
	want, err := canonicalDecoded(body, ignore)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%q ignoring %v: %s, canonicalDecoded %s, %v", body, ignore, got, want, err)
	}
}
