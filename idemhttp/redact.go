package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxRedactFields bounds Config.RedactFields.
const MaxRedactFields = 64

// errNotRedactable: RedactFields is set and an answer's body is not JSON,
// so what to leave out of it cannot be found: it is not stored.
var errNotRedactable = errors.New("idemhttp: RedactFields is set and the answer's body is not JSON; not stored")

// parseRedactFields splits each dotted path ("card.number") into its
// member names.
func parseRedactFields(fields []string) ([][]string, error) {
	if len(fields) > MaxRedactFields {
		return nil, fmt.Errorf("idemhttp: %d RedactFields is more than %d", len(fields), MaxRedactFields)
	}
	paths := make([][]string, 0, len(fields))
	for _, f := range fields {
		path := strings.Split(f, ".")
		for _, name := range path {
			if name == "" {
				return nil, fmt.Errorf("idemhttp: RedactFields %q has an empty member name", f)
			}
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// redact returns body without the members paths name: each path walks
// object members by name, and through an array into each of its
// elements. Members and elements left alone keep their bytes, and the
// objects it changes keep their members' order; only the white space
// between the members of a changed object is dropped. An empty body is
// returned as is; a body that is not JSON is errNotRedactable.
func redact(body []byte, paths [][]string) ([]byte, error) {
	if len(paths) == 0 || len(bytes.TrimSpace(body)) == 0 {
		return body, nil
	}
	if !json.Valid(body) {
		return nil, errNotRedactable
	}
	return redactValue(bytes.TrimSpace(body), paths)
}

func redactValue(v []byte, paths [][]string) ([]byte, error) {
	switch v[0] {
	case '{':
		return redactObject(v, paths)
	case '[':
		return redactArray(v, paths)
	}
	return v, nil
}

func redactObject(v []byte, paths [][]string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteByte('{')
	first := true
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string) // a member's name is a string in valid JSON
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		var rest [][]string
		drop := false
		for _, p := range paths {
			if p[0] != name {
				continue
			}
			if len(p) == 1 {
				drop = true
				break
			}
			rest = append(rest, p[1:])
		}
		if drop {
			continue
		}
		if len(rest) > 0 {
			if raw, err = redactValue(raw, rest); err != nil {
				return nil, err
			}
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		writeName(&out, name)
		out.WriteByte(':')
		out.Write(raw)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

func redactArray(v []byte, paths [][]string) ([]byte, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteByte('[')
	for i, e := range elems {
		r, err := redactValue(e, paths)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(r)
	}
	out.WriteByte(']')
	return out.Bytes(), nil
}

// writeName writes a member's name as a JSON string, without the HTML
// escapes json.Marshal adds.
func writeName(out *bytes.Buffer, name string) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(name)        // a string always encodes
	out.Truncate(out.Len() - 1) // Encode's newline
}
