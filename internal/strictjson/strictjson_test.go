package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// refused are texts Check refuses, with what its error says.
var refused = []struct {
	name, body, want string
}{
	{"duplicate member", `{"amount":1,"amount":2}`, `member "amount" is sent more than once`},
	{"duplicate spelled with an escape", `{"a":1,"\u0061":2}`, `member "a" is sent more than once`},
	{"duplicate nested", `{"metadata":{"tags":[{"k":1,"k":1}]}}`, `metadata.tags[0]: member "k" is sent more than once`},
	{"not UTF-8 in a value", "{\"currency\":\"EU\xffR\"}", "currency: string is not valid UTF-8"},
	{"not UTF-8 in a name", "{\"metadata\":{\"\xc3\":1}}", "metadata: member name is not valid UTF-8"},
	{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", "a: string is not valid UTF-8"},
	{"lone high surrogate", `{"a":"\ud800"}`, `a: string has \ud800, half of a surrogate pair`},
	{"high surrogate then a letter", `{"a":"\uD800\u0041"}`, `a: string has \ud800`},
	{"high surrogate at the end", `{"a":["x","\ud83d"]}`, `a[1]: string has \ud83d`},
	{"lone low surrogate", `{"a":"x\udc00y"}`, `a: string has \udc00`},
	{"low then high", `{"a":"\udc00\ud800"}`, `a: string has \udc00`},
	{"too deep", `{"a":{"b":{"c":[[1]]}}}`, "a.b.c[0]: objects and arrays nest more than 4 deep"},
	{"trailing value", `{"a":1} {"a":2}`, "trailing data after the JSON value"},
	{"empty", ``, "no JSON value"},
	{"cut short", `{"a":[1,`, "a[1]: the JSON text ends early"},
	{"cut after a name", `{"a":`, "the JSON text ends early"},
	{"not JSON", `{"a":}`, "invalid character"},
	{"leading zero", `{"a":01}`, "invalid character"},
	{"bare fraction", `{"a":1.}`, "invalid character"},
	{"bare exponent", `{"a":1e}`, "invalid character"},
	{"control character in a string", "{\"a\":\"x\ty\"}", "invalid character"},
	{"unknown escape", `{"a":"\x41"}`, "invalid character"},
	{"short \\u escape", `{"a":"\u12"}`, "invalid character"},
	{"literal cut short", `[tru]`, "invalid character"},
	{"missing comma", `{"a":1 "b":2}`, "invalid character"},
	{"trailing comma", `[1,]`, "invalid character"},
}

// accepted are texts Check accepts at maxDepth 4, each one quick proves.
var accepted = []string{
	`{}`, `[]`, `"x"`, `1e999`, `null`, ` {"a" : [1, 2.5, -3e-7, true, false, null] } `,
	`{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}`, // one name in different objects
	`{"emoji":"\ud83d\ude00","raw":"😀","escapes":"\" \\ \/ \b \f \n \r \t \u00e9"}`,
	`{"A":1,"a":2}`, // names compare exactly
	`{"a":{"b":{"c":[1]}}}`,
	`-0.5E+10`, `[0,-0,10.25e-3]`,
}

func TestCheckRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if quick([]byte(tt.body), 4) {
				t.Fatalf("quick(%q) passed it", tt.body)
			}
			err := Check([]byte(tt.body), 4)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check(%q) = %v, want an error with %q", tt.body, err, tt.want)
			}
		})
	}
}

func TestCheckAccepts(t *testing.T) {
	t.Parallel()
	for _, body := range accepted {
		if err := walk([]byte(body), 4); err != nil {
			t.Errorf("walk(%q) = %v", body, err)
		}
		if !quick([]byte(body), 4) {
			t.Errorf("quick(%q) did not prove it", body)
		}
	}
	// What quick leaves to walk, walk accepts.
	for _, body := range []string{
		strings.Repeat("[", 100) + strings.Repeat("]", 100), // deeper than quickDepth
		`{"\u0061":1,"b":2}`,                  // a name spelled with an escape
		"{" + manyMembers(quickNames+1) + "}", // more members than quickNames
	} {
		if quick([]byte(body), 0) {
			t.Errorf("quick(%.40q…) proved a text it leaves to walk", body)
		}
		if err := Check([]byte(body), 0); err != nil {
			t.Errorf("Check(%.40q…) = %v", body, err)
		}
	}
}

// manyMembers is n members with distinct names, comma-separated.
func manyMembers(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"m%d":%d`, i, i)
	}
	return strings.Join(parts, ",")
}

func TestErrorPath(t *testing.T) {
	t.Parallel()
	err := Check([]byte(`{"metadata":{"tags":["ok","\udfff"]}}`), 0)
	se, ok := errors.AsType[*Error](err)
	if !ok || se.Path != "metadata.tags[1]" {
		t.Fatalf("error %#v, want *Error at metadata.tags[1]", err)
	}
}

// FuzzCheck: Check never panics, and a text it accepts is one JSON value
// that encoding/json reads without losing a member or rewriting a string:
// encoding it again gives the same tokens (in key order), and every U+FFFD
// read was sent as one.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[true,null,"x"]}`, `{"a":1,"a":2}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}",
		`{"a":"\ud83d\ude00"}`, `[[[[1]]]]`, `{"a":{"a":{"a":1}}}`, `1 2`, `{"\u0061":1,"a":1}`,
		`{"b":"\ufffd","a":"\uFFFD \ufffd"}`,
	} {
		f.Add([]byte(s))
	}
	for _, tt := range refused {
		f.Add([]byte(tt.body))
	}
	for _, body := range accepted {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if quick(data, 8) {
			if err := walk(data, 8); err != nil {
				t.Fatalf("quick proved %q, which walk refuses: %v", data, err)
			}
		}
		if Check(data, 8) != nil {
			return
		}
		if !json.Valid(data) || !utf8.Valid(data) {
			t.Fatalf("accepted %q, which is not JSON in UTF-8", data)
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", data, err)
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, want := tokens(t, again), tokens(t, data)
		if !slices.Equal(got, want) {
			t.Fatalf("accepted %q, read as %s:\n%q\n%q", data, again, got, want)
		}
		sent := bytes.Count(data, []byte("\uFFFD")) + bytes.Count(bytes.ToLower(data), []byte(`\ufffd`))
		if read := strings.Count(strings.Join(want, ""), "\uFFFD"); read > sent {
			t.Fatalf("accepted %q, read with %d U+FFFD, sent with %d", data, read, sent)
		}
	})
}

// tokens lists a JSON text's tokens, strings as read, numbers as "#",
// sorted: encoding again reorders members and may respell numbers.
func tokens(t *testing.T, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			slices.Sort(out)
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch tok := tok.(type) {
		case string:
			out = append(out, `"`+tok)
		case json.Delim:
			out = append(out, tok.String())
		case json.Number:
			out = append(out, "#")
		default:
			out = append(out, fmt.Sprint(tok))
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	body := []byte(`{"debit_account_id":"acc-17","credit_account_id":"acc-503","amount":100,` +
		`"currency":"EUR","metadata":{"order":"o-8812","tags":["web","eu"]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(body, 32); err != nil {
			b.Fatal(err)
		}
	}
}
