// Package strictjson checks that a JSON text means exactly what was sent
// before encoding/json reads it. encoding/json keeps the last of a member
// sent twice, rewrites bytes that are not UTF-8 and \u escapes of half a
// surrogate pair to U+FFFD, and follows nesting as deep as it goes: each
// turns a request into one its sender did not write. Check refuses them.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Check returns an error when data is not exactly one JSON value, or when
// that value has an object with a member name twice (compared after
// unescaping, so "a" and "\u0061" are one name), a string (member names
// included) whose bytes are not UTF-8 or that escapes half a surrogate pair,
// or objects and arrays nested more than maxDepth deep (the outermost is
// depth 1; maxDepth 0 sets no bound). Those faults are an *Error, which
// names where the fault is; a text that is not JSON is encoding/json's
// error.
func Check(data []byte, maxDepth int) error {
	if quick(data, maxDepth) {
		return nil
	}
	return walk(data, maxDepth)
}

// walk is Check token by token through encoding/json, which names what is
// wrong and where. It is the judge; quick only spares it the texts that
// are plainly fine.
func walk(data []byte, maxDepth int) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	// Numbers stay text: a number too large for float64 is still JSON.
	dec.UseNumber()
	var (
		stack []frame
		prev  int64 // where the previous token ended
		done  bool  // the top-level value is complete
	)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			switch {
			case len(stack) > 0:
				return fault(stack, "the JSON text ends early")
			case !done:
				return &Error{Reason: "no JSON value"}
			}
			return nil
		}
		if err != nil {
			return err
		}
		if done {
			return &Error{Reason: "trailing data after the JSON value"}
		}
		// The bytes since the previous token: separators, white space and
		// this token, whose raw spelling a string's check needs.
		end := dec.InputOffset()
		raw := data[prev:end]
		prev = end

		switch tok := tok.(type) {
		case json.Delim:
			if tok == '{' || tok == '[' {
				if maxDepth > 0 && len(stack) >= maxDepth {
					return fault(stack, fmt.Sprintf("objects and arrays nest more than %d deep", maxDepth))
				}
				stack = append(stack, frame{object: tok == '{', wantName: tok == '{'})
				continue // the value ends with its closing delimiter
			}
			stack = stack[:len(stack)-1]
		case string:
			naming := len(stack) > 0 && stack[len(stack)-1].wantName
			if msg := checkString(raw[bytes.IndexByte(raw, '"'):]); msg != "" {
				if naming {
					return fault(stack, "member name "+msg)
				}
				return fault(stack, "string "+msg)
			}
			if naming {
				top := &stack[len(stack)-1]
				if _, dup := top.names[tok]; dup {
					return fault(stack, fmt.Sprintf("member %q is sent more than once", tok))
				}
				if top.names == nil {
					top.names = make(map[string]struct{})
				}
				top.names[tok] = struct{}{}
				top.name, top.wantName = tok, false
				continue // its value follows
			}
		}
		// A value is complete.
		if len(stack) == 0 {
			done = true
			continue
		}
		top := &stack[len(stack)-1]
		if top.object {
			top.wantName = true
		} else {
			top.index++
		}
	}
}

// frame is one object or array being read.
type frame struct {
	object   bool
	wantName bool                // an object's next token is a member name
	name     string              // the member whose value is being read
	names    map[string]struct{} // the member names seen
	index    int                 // an array's element being read
}

// Error is a fault Check found, and where.
type Error struct {
	// Path is where the fault is: member names joined with "." and array
	// indexes in brackets, such as "metadata.tags[2]"; "" for the top-level
	// value.
	Path string
	// Reason says what is wrong, for people.
	Reason string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// fault is reason at the value being read.
func fault(stack []frame, reason string) error {
	var b strings.Builder
	for _, f := range stack {
		switch {
		case f.object && f.wantName:
			// Between members: the fault is the object's own.
		case f.object:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.name)
		default:
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		}
	}
	return &Error{Path: b.String(), Reason: reason}
}

// checkString checks a string token as spelled, quotes and escapes
// included, and says what is wrong with it, or "" when nothing is. The
// token is valid JSON (the decoder read it), so every backslash begins an
// escape and every \u has four hex digits.
func checkString(s []byte) string {
	if !utf8.Valid(s) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		i++
		if s[i] != 'u' {
			continue
		}
		r, _ := hexAt(s, i+1)
		i += 4
		switch {
		case r >= 0xD800 && r < 0xDC00:
			// A high surrogate must be followed at once by a low one.
			if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if lo, _ := hexAt(s, i+3); lo >= 0xDC00 && lo < 0xE000 {
					i += 6
					continue
				}
			}
			return fmt.Sprintf(`has \u%04x, half of a surrogate pair`, r)
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Sprintf(`has \u%04x, half of a surrogate pair`, r)
		}
	}
	return ""
}
