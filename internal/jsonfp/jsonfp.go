// Package jsonfp holds the two steps of a JSON fingerprint (idem.Fingerprint)
// that idem's packages share on a request's path: the hash over an operation
// and a canonical body, and the test that a body's bytes already are their
// canonical form, so that a first arrival hashes its body once and builds
// no canonical copy of it.
package jsonfp

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"

	"github.com/idemhq/idem/internal/strictjson"
)

// Sum is SHA-256 over the length of the operation (8 bytes, big-endian),
// the operation and canon, where the operation is the concatenation of
// parts: Sum(canon, "POST", " ", "/x") equals Sum(canon, "POST /x"), with
// no string built. It is idem.Fingerprint's hash, and a pure function of
// the operation and the bytes of canon.
func Sum(canon []byte, parts ...string) [sha256.Size]byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	// Most requests fit a stack buffer: one call of Sum256, no hash state
	// on the heap.
	var buf [1024]byte
	if 8+n+len(canon) <= len(buf) {
		b := binary.BigEndian.AppendUint64(buf[:0], uint64(n))
		for _, p := range parts {
			b = append(b, p...)
		}
		b = append(b, canon...)
		return sha256.Sum256(b)
	}
	h := sha256.New()
	var l [8]byte
	binary.BigEndian.PutUint64(l[:], uint64(n))
	h.Write(l[:])
	for _, p := range parts {
		h.Write([]byte(p))
	}
	h.Write(canon)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// MaxDepth bounds the nesting AsIs reads; a deeper body is not taken as
// it is, and goes to the canonical form's own reading.
const MaxDepth = 32

// AsIs reports whether body is, byte for byte, its own canonical JSON
// without the top-level members named in ignore: one JSON value (or no
// bytes at all) with no white space, every object's names in strictly
// increasing byte order, no top-level member named in ignore, every string
// printable ASCII that json.Marshal writes as it is (no escape, no '<',
// '>', '&'), nesting at most MaxDepth deep. Numbers are canonical as
// written. It reads body once and allocates nothing. A false decides
// nothing: the body may still be canonical, or not JSON at all.
func AsIs(body []byte, ignore []string) bool {
	if len(body) == 0 {
		return true // an empty body's canonical form is empty
	}
	s := scan{b: body}
	return s.value(0, ignore) && s.i == len(body)
}

// scan reads b from i.
type scan struct {
	b []byte
	i int
}

// value reads one value at depth; ignore names the members an object at
// depth 0 must not have.
func (s *scan) value(depth int, ignore []string) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return depth < MaxDepth && s.object(depth, ignore)
	case c == '[':
		return depth < MaxDepth && s.array(depth)
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

func (s *scan) object(depth int, ignore []string) bool {
	s.i++ // {
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	var prev []byte
	for k := 0; ; k++ {
		name, ok := s.str()
		if !ok {
			return false
		}
		if k > 0 && bytes.Compare(prev, name) >= 0 {
			return false // out of order, or repeated
		}
		if depth == 0 && len(ignore) > 0 && slices.Contains(ignore, string(name)) {
			return false
		}
		prev = name
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		if !s.value(depth+1, nil) {
			return false
		}
		if done, ok := s.next('}'); done || !ok {
			return ok
		}
	}
}

func (s *scan) array(depth int) bool {
	s.i++ // [
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(depth+1, nil) {
			return false
		}
		if done, ok := s.next(']'); done || !ok {
			return ok
		}
	}
}

// next reads what follows a member or an element: end, which closes the
// object or array (done), or a comma before the next; ok is false for
// anything else.
func (s *scan) next(end byte) (done, ok bool) {
	if s.i >= len(s.b) {
		return false, false
	}
	s.i++
	switch s.b[s.i-1] {
	case end:
		return true, true
	case ',':
		return false, true
	}
	return false, false
}

// str reads a string whose bytes json.Marshal writes as they are and
// returns the bytes between the quotes.
func (s *scan) str() ([]byte, bool) {
	v, end, ok := PlainString(s.b, s.i)
	if ok {
		s.i = end
	}
	return v, ok
}

// PlainString reads the JSON string that starts at b[i] when json.Marshal
// writes its bytes as they are (printable ASCII but for '"', '\\' and the
// HTML-escaped '<', '>', '&'), and returns the bytes between the quotes
// and the index after it; ok is false for any other string.
func PlainString(b []byte, i int) (s []byte, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\' || c == '<' || c == '>' || c == '&':
			return nil, i, false
		}
	}
	return nil, i, false
}

// number reads a number as JSON's grammar writes one.
func (s *scan) number() bool {
	end, ok := strictjson.NumberEnd(s.b, s.i)
	if ok {
		s.i = end
	}
	return ok
}

func (s *scan) literal(word string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}
