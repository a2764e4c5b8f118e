package idem

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
)

var headerSamples = []string{
	`{}`,
	`{"Content-Type":["application/json"],"Location":["/v1/transfers/0193a1b2"]}`,
	`{"X-A":["1","2",""],"X-B":[]}`,
	`{"X-A":["1"],"X-A":["2"]}`,
	`{"Café":["crème brûlée"]}`,
	`{"X-A":["a\"b"]}`,
	`{"X-A":["\u003chtml\u003e"]}`,
	`{"X-A":["` + "\xff" + `"]}`,
	`{"X-A":null}`,
	`{"X-A":[null]}`,
	`{ "X-A": ["1"] }`,
	`{"X-A":["1"]}x`,
	`{"X-A":["1"],}`,
	`{"X-A":["1",]}`,
	`{"X-A":["1"]`,
	`{"X-A":["1`,
	`{"X-A":"1"}`,
	`{"X-A":["` + "\t" + `"]}`,
	`{"X-A":[1]}`,
	`[]`,
	`null`,
	`{`,
	`"x"`,
}

// decodeHeader answers what json.Unmarshal answers, whichever way it
// takes: the same header, or an error for the same inputs.
func TestDecodeHeader(t *testing.T) {
	t.Parallel()
	for _, s := range headerSamples {
		checkDecodeHeader(t, []byte(s))
	}
	plain, _ := json.Marshal(http.Header{"Content-Type": {"application/json"}, "Etag": {`W/"1"`}})
	if _, ok := decodePlainHeader(plain); ok {
		t.Fatalf("%s has an escape, yet was read by hand", plain)
	}
	plain, _ = json.Marshal(http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/x"}})
	if _, ok := decodePlainHeader(plain); !ok {
		t.Fatalf("%s, as json.Marshal writes it, went to json.Unmarshal", plain)
	}
}

func FuzzDecodeHeader(f *testing.F) {
	for _, s := range headerSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 0 {
			checkDecodeHeader(t, b)
		}
	})
}

func checkDecodeHeader(t *testing.T, b []byte) {
	t.Helper()
	var want http.Header
	wantErr := json.Unmarshal(b, &want)
	got, err := decodeHeader(b)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("%q: error %v, json.Unmarshal's %v", b, err, wantErr)
	case err == nil && !reflect.DeepEqual(got, want):
		t.Fatalf("%q: %#v, json.Unmarshal's %#v", b, got, want)
	}
}

// encodeHeaderByDefinition is the stored header as json.Marshal writes it.
func encodeHeaderByDefinition(h http.Header, keep []string) ([]byte, error) {
	kept := h
	if keep != nil {
		kept = make(http.Header, len(keep))
		for _, name := range keep {
			if vs := h[name]; len(vs) > 0 {
				kept[name] = vs
			}
		}
	}
	if len(kept) == 0 {
		return nil, nil
	}
	return json.Marshal(kept)
}

// encodeHeader writes the bytes json.Marshal writes, for every header and
// allow-list, by hand or not.
func TestEncodeHeader(t *testing.T) {
	t.Parallel()
	check := func(h http.Header, keep []string) {
		t.Helper()
		want, _ := encodeHeaderByDefinition(h, keep)
		got, err := encodeHeader(h, keep)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("encodeHeader(%q, %q) = %s, %v; json.Marshal %s", h, keep, got, err, want)
		}
	}
	keeps := [][]string{nil, {}, {"Content-Type", "Location"}, {"Location", "Content-Type", "Location"}, {"X-Absent"}}
	for _, h := range []http.Header{
		nil,
		{},
		{"Content-Type": {"application/json"}, "Location": {"/v1/transfers/t-1"}},
		{"Location": {"/a"}, "Content-Type": {"application/json"}, "Etag": {`"v1"`}},
		{"Content-Type": {"a", "b"}, "Location": {}},
		{"Location": nil, "Content-Type": {"x"}},
		{"Location": {"/a?b=<c>&d"}},
		{"Location": {"/é"}},
		{"Location": {"a\\b"}, "Content-Type": {"\x00"}},
		{"Content-Type": {""}},
	} {
		for _, keep := range keeps {
			check(h, keep)
		}
	}
	rng := rand.New(rand.NewPCG(46, 5))
	names := []string{"Content-Type", "Location", "Etag", "X-A", "Content-Language", "Z"}
	values := []string{"", "application/json", "/v1/x", `"e"`, "<", "&", "é", "\t", "a b", "\x7f"}
	for range 2000 {
		h := http.Header{}
		for range rng.IntN(5) {
			name := names[rng.IntN(len(names))]
			switch rng.IntN(8) {
			case 0:
				h[name] = nil
			case 1:
				h[name] = []string{}
			default:
				for range 1 + rng.IntN(2) {
					h[name] = append(h[name], values[rng.IntN(len(values))])
				}
			}
		}
		check(h, nil)
		check(h, names[:rng.IntN(len(names))])
	}
}

// KeepHeaders keeps the named headers, each a copy of its own: writing
// to the original or appending to one copy changes no other.
func TestKeepHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/a", "/b"}, "Etag": {}, "Date": {"now"}}
	for _, tc := range []struct {
		names []string
		want  http.Header
	}{
		{nil, nil},
		{[]string{"Date"}, http.Header{"Date": {"now"}}},
		{[]string{"Etag", "X-None"}, nil},
		{[]string{"Location", "Content-Type", "Location", "Etag"}, http.Header{"Content-Type": {"application/json"}, "Location": {"/a", "/b"}}},
	} {
		got := KeepHeaders(h, tc.names)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("KeepHeaders(%v) = %v, want %v", tc.names, got, tc.want)
		}
	}
	got := KeepHeaders(h, []string{"Content-Type", "Location"})
	got["Content-Type"] = append(got["Content-Type"], "x")
	h["Location"][0] = "/changed"
	if want := (http.Header{"Content-Type": {"application/json", "x"}, "Location": {"/a", "/b"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("copies not independent: %v, want %v", got, want)
	}
}
