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

// KeepHeaders returns the headers of h named in names (canonical names,
// as http.CanonicalHeaderKey gives them), or nil when there are none. It
// is the one filter of what an outcome carries to storage and to replays
// (Request.StoreHeaders; idemhttp's Config.ReplayHeaders).
func KeepHeaders(h http.Header, names []string) http.Header {
	var out http.Header
	for _, name := range names {
		if vs := h[name]; len(vs) > 0 {
			if out == nil {
				out = make(http.Header, len(names))
			}
			out[name] = slices.Clone(vs)
		}
	}
	return out
}
