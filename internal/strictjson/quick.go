package strictjson

import (
	"bytes"
	"unicode/utf8"
)

// quickDepth bounds quick's recursion. A text nested deeper goes to walk,
// which keeps its own stack.
const quickDepth = 64

// quickNames bounds the members quick compares in one object, pairwise. An
// object with more goes to walk, which keeps them in a map.
const quickNames = 32

// quick reports true only for a text Check accepts: one JSON value in
// RFC 8259's grammar, strings in UTF-8 with every \u escape of a surrogate
// paired, no member name twice in an object, nesting within maxDepth. It
// reads the bytes once and allocates nothing for a request's usual body,
// where walk's encoding/json tokens cost an allocation each. It reports
// false for anything else, and for texts it does not try to prove fine: a
// member name spelled with an escape (names are compared as sent), an
// object of more than quickNames members, nesting deeper than quickDepth.
// walk then decides, and says what is wrong.
func quick(data []byte, maxDepth int) bool {
	s := scan{data: data, maxDepth: maxDepth}
	s.space()
	if !s.value(1) {
		return false
	}
	s.space()
	return s.i == len(s.data)
}

// scan is quick's position in the text.
type scan struct {
	data     []byte
	i        int
	maxDepth int
}

func (s *scan) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next is the byte at the position, 0 at the end of the text.
func (s *scan) next() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

// value reads one value at depth (the depth an object or array there has).
func (s *scan) value(depth int) bool {
	switch c := s.next(); {
	case c == '{':
		return s.object(depth)
	case c == '[':
		return s.array(depth)
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
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

func (s *scan) deep(depth int) bool {
	return depth > quickDepth || s.maxDepth > 0 && depth > s.maxDepth
}

func (s *scan) object(depth int) bool {
	if empty, ok := s.open(depth, '}'); !ok || empty {
		return ok
	}
	var room [8][]byte
	names := room[:0]
	for {
		if s.next() != '"' {
			return false
		}
		name, ok := s.str()
		if !ok || name == nil || len(names) == quickNames {
			return false
		}
		for _, n := range names {
			if bytes.Equal(n, name) {
				return false
			}
		}
		names = append(names, name)
		s.space()
		if s.next() != ':' {
			return false
		}
		s.i++
		s.space()
		if !s.value(depth + 1) {
			return false
		}
		if more, ok := s.after('}'); !more {
			return ok
		}
	}
}

func (s *scan) array(depth int) bool {
	if empty, ok := s.open(depth, ']'); !ok || empty {
		return ok
	}
	for {
		if !s.value(depth + 1) {
			return false
		}
		if more, ok := s.after(']'); !more {
			return ok
		}
	}
}

// open reads the { or [ of an object or array at depth, and reports
// whether it is empty (its close read too); ok is false when it nests too
// deep.
func (s *scan) open(depth int, close byte) (empty, ok bool) {
	if s.deep(depth) {
		return false, false
	}
	s.i++
	s.space()
	if s.next() == close {
		s.i++
		return true, true
	}
	return false, true
}

// after reads what follows a member or element: a comma (more is true) or
// the close (more is false, ok true). Anything else is not JSON.
func (s *scan) after(close byte) (more, ok bool) {
	s.space()
	switch s.next() {
	case ',':
		s.i++
		s.space()
		return true, true
	case close:
		s.i++
		return false, true
	}
	return false, false
}

// str reads a string. It returns its bytes between the quotes when it has
// no escape, nil when it has one, and ok false when it is not a string
// Check accepts.
func (s *scan) str() (plain []byte, ok bool) {
	d := s.data
	start := s.i + 1
	escaped := false
	for i := start; i < len(d); {
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			if !utf8.Valid(d[start:i]) {
				return nil, false
			}
			if escaped {
				return nil, true
			}
			return d[start:i], true
		case c < 0x20:
			return nil, false
		case c != '\\':
			i++
			continue
		}
		escaped = true
		if i+1 >= len(d) {
			return nil, false
		}
		switch d[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
			continue
		case 'u':
		default:
			return nil, false
		}
		r, ok := hexAt(d, i+2)
		switch {
		case !ok:
			return nil, false
		case r >= 0xD800 && r < 0xDC00:
			// A high surrogate must be followed at once by a low one.
			if i+7 >= len(d) || d[i+6] != '\\' || d[i+7] != 'u' {
				return nil, false
			}
			if lo, ok := hexAt(d, i+8); !ok || lo < 0xDC00 || lo >= 0xE000 {
				return nil, false
			}
			i += 12
		case r >= 0xDC00 && r < 0xE000:
			return nil, false
		default:
			i += 6
		}
	}
	return nil, false
}

// hexAt reads four hex digits at d[i:].
func hexAt(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (s *scan) number() bool {
	end, ok := NumberEnd(s.data, s.i)
	if ok {
		s.i = end
	}
	return ok
}

// NumberEnd reads the JSON number (RFC 8259) that starts at d[i] and
// returns the index after it, or false when none starts there.
func NumberEnd(d []byte, i int) (int, bool) {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		return i, false
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func digits(d []byte, i int) int {
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

func (s *scan) literal(word string) bool {
	if end := s.i + len(word); end > len(s.data) || string(s.data[s.i:end]) != word {
		return false
	}
	s.i += len(word)
	return true
}
