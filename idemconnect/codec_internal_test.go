package idemconnect

import "testing"

// TestCodecOf: the codec each protocol's Content-Type names.
func TestCodecOf(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]string{
		"application/proto":               codecProto,
		"application/json":                codecJSON,
		"application/json; charset=utf-8": codecJSON,
		"Application/JSON":                codecJSON,
		"application/grpc":                codecProto,
		"application/grpc+proto":          codecProto,
		"application/grpc+json":           codecJSON,
		"application/grpc-web":            codecProto,
		"application/grpc-web+proto":      codecProto,
		"application/grpc-web+json":       codecJSON,
		"application/grpc-web+json; a=b":  codecJSON,
		"application/cbor":                "cbor",
		"application/grpc-web+vtproto":    "vtproto",
	} {
		if got := codecOf(ct); got != want {
			t.Errorf("codecOf(%q) = %q, want %q", ct, got, want)
		}
	}
}
