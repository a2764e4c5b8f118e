package idem

import (
	"encoding/json"
	"net/http"
	"slices"
	"unicode/utf8"
)

// decodeHeader decodes a stored outcome's header as json.Unmarshal into an
// http.Header does. Every replay read from the database decodes one, and
// json.Unmarshal spends more there (reflection, a dozen allocations) than
// the rest of the replay after the read, so the shape json.Marshal gives an
// http.Header — an object of arrays of strings, no white space, no escapes
// — is read by hand. Anything else goes to json.Unmarshal: the answer is
// the same either way.
func decodeHeader(b []byte) (http.Header, error) {
	if h, ok := decodePlainHeader(b); ok {
		return h, nil
	}
	var h http.Header
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, err
	}
	return h, nil
}

// decodePlainHeader reads b when it has json.Marshal's plain shape, and
// reports false, having decided nothing, for anything else.
func decodePlainHeader(b []byte) (http.Header, bool) {
	if len(b) < 2 || b[0] != '{' {
		return nil, false
	}
	h := make(http.Header, 4)
	i := 1
	if b[i] == '}' {
		return h, len(b) == 2
	}
	for {
		name, j, ok := plainString(b, i)
		if !ok || j+1 >= len(b) || b[j] != ':' || b[j+1] != '[' {
			return nil, false
		}
		i = j + 2
		vs := []string{}
		if i < len(b) && b[i] == ']' {
			i++
		} else {
			for {
				v, j, ok := plainString(b, i)
				if !ok || j >= len(b) {
					return nil, false
				}
				vs = append(vs, v)
				i = j + 1
				if b[j] == ']' {
					break
				}
				if b[j] != ',' {
					return nil, false
				}
			}
		}
		h[name] = vs // a repeated name: the last wins, as in json.Unmarshal
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case '}':
			return h, i+1 == len(b)
		case ',':
			i++
		default:
			return nil, false
		}
	}
}

// plainString reads the JSON string that starts at b[i] when it holds no
// escape and no control character and is valid UTF-8 (json.Unmarshal would
// replace invalid bytes); j is the index just past its closing quote.
func plainString(b []byte, i int) (s string, j int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j = i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			if !utf8.Valid(b[i+1 : j]) {
				return "", 0, false
			}
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

// encodeHeader is the stored form of h's headers named in keep (all of h
// when keep is nil): json.Marshal of the http.Header that holds only them
// (with keep, only those with values), or nil when it is empty. Every
// first arrival stores one, and json.Marshal of a map spends a handful of
// allocations on reflection there, so a header whose names and values are
// plain — printable ASCII that json.Marshal writes as it is, no nil value —
// is written by hand, in the same bytes; anything else goes to
// json.Marshal (TestEncodeHeader).
func encodeHeader(h http.Header, keep []string) ([]byte, error) {
	var stack [16]string
	names := stack[:0]
	if keep != nil {
		for _, name := range keep {
			if len(h[name]) > 0 {
				names = append(names, name)
			}
		}
	} else {
		for name := range h {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	names = slices.Compact(names) // keep may name a header twice
	n := 1
	for _, name := range names {
		vs := h[name]
		if vs == nil || !plainJSON(name) {
			return marshalHeader(h, names)
		}
		n += len(name) + 5 // "name":[ and ] or }
		for _, v := range vs {
			if !plainJSON(v) {
				return marshalHeader(h, names)
			}
			n += len(v) + 3
		}
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':', '[')
		for j, v := range h[name] {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// marshalHeader is json.Marshal of the http.Header of h's names.
func marshalHeader(h http.Header, names []string) ([]byte, error) {
	kept := make(http.Header, len(names)) // only marshalled: no copy of the values
	for _, name := range names {
		kept[name] = h[name]
	}
	return json.Marshal(kept)
}

// plainJSON reports whether json.Marshal writes s between quotes as it
// is: printable ASCII but for '"', '\\' and the HTML-escaped '<', '>', '&'.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// KeepHeaders returns the headers of h named in names (canonical names,
// as http.CanonicalHeaderKey gives them), or nil when there are none. It
// is the one filter of what an outcome carries to storage and to replays
// (Request.StoreHeaders; idemhttp's Config.ReplayHeaders).
func KeepHeaders(h http.Header, names []string) http.Header {
	n := 0
	for _, name := range names {
		n += len(h[name])
	}
	if n == 0 {
		return nil
	}
	// The copies share one array, each with its capacity cut at its
	// length: an append to one never writes into another.
	values := make([]string, n)
	out := make(http.Header, len(names))
	for _, name := range names {
		if vs := h[name]; len(vs) > 0 {
			if _, kept := out[name]; kept {
				continue // names repeats it
			}
			k := copy(values, vs)
			out[name] = values[:k:k]
			values = values[k:]
		}
	}
	return out
}
