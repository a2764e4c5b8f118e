package idem

import (
	"encoding/json"
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
