// Package sealframe frames the two parts of a stored record — headers and
// a body (a keeper's outcome, an outbox message's headers and payload) —
// as the one plaintext a seal.Sealer encrypts, so that a sealed row holds
// one ciphertext and its parts cannot be swapped apart.
package sealframe

import "encoding/binary"

// Pack frames header and body: the header's length (uvarint), the
// header, the body.
func Pack(header, body []byte) []byte {
	out := make([]byte, 0, binary.MaxVarintLen64+len(header)+len(body))
	out = binary.AppendUvarint(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, body...)
}

// Unpack is Pack's inverse; ok is false for bytes Pack did not make. An
// empty header is nil, as the drivers store none.
func Unpack(plain []byte) (header, body []byte, ok bool) {
	n, w := binary.Uvarint(plain)
	if w <= 0 || n > uint64(len(plain)-w) {
		return nil, nil, false
	}
	if n > 0 {
		header = plain[w : w+int(n)]
	}
	return header, plain[w+int(n):], true
}
