package idem

import (
	"bytes"
	"slices"

	"github.com/idemhq/idem/internal/jsonfp"
	"github.com/idemhq/idem/internal/strictjson"
)

// canonicalPlain is canonicalJSON by hand for the bodies most requests
// send: JSON whose strings are printable ASCII with nothing json.Marshal
// would escape, whose objects repeat no name, nested at most
// plainMaxDepth deep. Every request that is not answered from the HTTP
// replay cache is fingerprinted — every first arrival and every replay
// read from the database — and decoding into maps and marshalling them
// again cost more CPU and allocations there than the rest of the request
// in idem. It reports false, having decided nothing, for anything else,
// which canonicalDecoded then reads: the answer is the same either way
// (FuzzCanonicalPlain).
func canonicalPlain(body []byte, ignore []string) ([]byte, bool) {
	return canonicalPlainTo(&canonBuf{out: make([]byte, 0, len(body))}, body, ignore)
}

// canonicalPlainTo is canonicalPlain writing into buf's memory, which it
// keeps grown; the answer is valid until buf's next use.
func canonicalPlainTo(buf *canonBuf, body []byte, ignore []string) ([]byte, bool) {
	p := plainCanon{b: body, out: buf.out[:0], tmp: buf.tmp[:0]}
	p.space()
	ok := p.value(0, ignore)
	p.space()
	buf.out, buf.tmp = p.out, p.tmp
	if !ok || p.i != len(p.b) {
		return nil, false
	}
	return p.out, true
}

// canonBuf is the memory canonicalPlainTo writes in: the canonical form
// and the scratch an object's members are sorted through.
type canonBuf struct{ out, tmp []byte }

// plainMaxDepth bounds the nesting canonicalPlain reads; deeper bodies
// go to canonicalDecoded.
const plainMaxDepth = 32

// plainCanon reads b from i and writes the canonical form to out; tmp
// holds an object's members while they are written again sorted.
type plainCanon struct {
	b   []byte
	i   int
	out []byte
	tmp []byte
}

// space skips JSON's white space.
func (p *plainCanon) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value reads one value at depth; ignore names the members an object at
// depth 0 leaves out.
func (p *plainCanon) value(depth int, ignore []string) bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return depth < plainMaxDepth && p.object(depth, ignore)
	case c == '[':
		return depth < plainMaxDepth && p.array(depth)
	case c == '"':
		s, ok := p.str()
		if ok {
			p.out = append(p.out, '"')
			p.out = append(p.out, s...)
			p.out = append(p.out, '"')
		}
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return false
}

// member is one name of an object and where its value's canonical form
// was written in out.
type member struct {
	name     []byte
	from, to int
}

// object reads an object and writes its members sorted by name, as
// json.Marshal writes a map.
func (p *plainCanon) object(depth int, ignore []string) bool {
	p.i++ // {
	start := len(p.out)
	var stack [8]member
	ms := stack[:0]
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		p.out = append(p.out, '{', '}')
		return true
	}
	for {
		p.space()
		name, ok := p.str()
		if !ok {
			return false
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		p.space()
		from := len(p.out)
		if !p.value(depth+1, nil) {
			return false
		}
		ms = append(ms, member{name: name, from: from, to: len(p.out)})
		p.space()
		if p.i >= len(p.b) {
			return false
		}
		p.i++
		if p.b[p.i-1] == '}' {
			break
		}
		if p.b[p.i-1] != ',' {
			return false
		}
	}
	slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(a.name, b.name) })
	for k := 1; k < len(ms); k++ {
		if bytes.Equal(ms[k-1].name, ms[k].name) {
			return false // a repeated name: the last one wins, decoded
		}
	}
	// Only one object at a time is written again, its members done: one
	// scratch serves every object.
	p.tmp = append(p.tmp[:0], p.out[start:]...)
	values := p.tmp
	p.out = append(p.out[:start], '{')
	n := 0
	for _, m := range ms {
		if depth == 0 && len(ignore) > 0 && slices.Contains(ignore, string(m.name)) {
			continue
		}
		if n++; n > 1 {
			p.out = append(p.out, ',')
		}
		p.out = append(p.out, '"')
		p.out = append(p.out, m.name...)
		p.out = append(p.out, '"', ':')
		p.out = append(p.out, values[m.from-start:m.to-start]...)
	}
	p.out = append(p.out, '}')
	return true
}

// array reads an array and writes its elements in order.
func (p *plainCanon) array(depth int) bool {
	p.i++ // [
	p.out = append(p.out, '[')
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		p.out = append(p.out, ']')
		return true
	}
	for {
		p.space()
		if !p.value(depth+1, nil) {
			return false
		}
		p.space()
		if p.i >= len(p.b) {
			return false
		}
		c := p.b[p.i]
		p.i++
		p.out = append(p.out, c)
		if c == ']' {
			return true
		}
		if c != ',' {
			return false
		}
	}
}

// str reads a string whose bytes json.Marshal writes as they are
// (jsonfp.PlainString) and returns the bytes between the quotes.
func (p *plainCanon) str() ([]byte, bool) {
	v, end, ok := jsonfp.PlainString(p.b, p.i)
	if ok {
		p.i = end
	}
	return v, ok
}

// number reads a number as JSON writes one and copies it as written.
func (p *plainCanon) number() bool {
	end, ok := strictjson.NumberEnd(p.b, p.i)
	if !ok {
		return false
	}
	p.out = append(p.out, p.b[p.i:end]...)
	p.i = end
	return true
}

// literal reads true, false or null.
func (p *plainCanon) literal(word string) bool {
	if !bytes.HasPrefix(p.b[p.i:], []byte(word)) {
		return false
	}
	p.i += len(word)
	p.out = append(p.out, word...)
	return true
}
