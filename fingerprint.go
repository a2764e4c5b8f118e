package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/idemhq/idem/internal/jsonfp"
)

// Fingerprint is SHA-256 over the operation and the canonical form of a JSON
// body: objects with sorted keys, no insignificant white space, numbers as
// written, and the top-level fields named in ignore removed. Two requests
// with the same fingerprint are the same request; an empty body has a
// fingerprint of its own. A body that is not JSON is ErrInvalidBody.
//
// A body already in canonical form (jsonfp.AsIs), as most clients send
// one, is hashed as it is: no canonical copy is built.
func Fingerprint(operation string, body []byte, ignore ...string) ([]byte, error) {
	if jsonfp.AsIs(body, ignore) {
		sum := jsonfp.Sum(body, operation)
		return sum[:], nil
	}
	return fingerprintCanonical(operation, body, ignore)
}

// fingerprintCanonical is Fingerprint over the canonical form built, in
// memory reused from one request to the next: the form is hashed, never
// kept.
func fingerprintCanonical(operation string, body []byte, ignore []string) ([]byte, error) {
	buf := canonBufs.Get().(*canonBuf)
	defer func() {
		if cap(buf.out)+cap(buf.tmp) <= canonBufMaxBytes {
			canonBufs.Put(buf)
		}
	}()
	canon, err := canonicalJSONTo(buf, body, ignore)
	if err != nil {
		return nil, err
	}
	sum := jsonfp.Sum(canon, operation)
	return sum[:], nil
}

var canonBufs = sync.Pool{New: func() any { return new(canonBuf) }}

// canonBufMaxBytes bounds the memory a pooled canonBuf keeps: a larger
// body's is left to the collector.
const canonBufMaxBytes = 64 << 10

func canonicalJSON(body []byte, ignore []string) ([]byte, error) {
	return canonicalJSONTo(&canonBuf{out: make([]byte, 0, len(body))}, body, ignore)
}

// canonicalJSONTo is canonicalJSON writing into buf's memory when the
// body is read by hand (canonicalPlainTo).
func canonicalJSONTo(buf *canonBuf, body []byte, ignore []string) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	if canon, ok := canonicalPlainTo(buf, body, ignore); ok {
		return canon, nil
	}
	return canonicalDecoded(body, ignore)
}

// canonicalDecoded is the canonical form by definition: the body decoded
// and marshalled again.
func canonicalDecoded(body []byte, ignore []string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the JSON value", ErrInvalidBody)
	}
	if obj, ok := v.(map[string]any); ok {
		for _, f := range ignore {
			delete(obj, f)
		}
	}
	// encoding/json writes map keys sorted and json.Number as written.
	return json.Marshal(v)
}
