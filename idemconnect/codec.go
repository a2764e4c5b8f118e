package idemconnect

import (
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The codecs a call's reply is stored and replayed for: binary Protobuf
// (Connect's application/proto, gRPC's and gRPC-Web's default), JSON
// (application/json with or without its charset, +json), and any other.
const (
	codecProto = "proto"
	codecJSON  = "json"
)

// The stored reply's header (idem.Outcome.Header): its message's full name,
// and the JSON a call in JSON was first answered with.
const (
	headerReplyType = "Idem-Reply-Type"
	headerReplyJSON = "Idem-Reply-Json"
)

// codecOf is the codec a unary call's Content-Type names, "proto" or
// "json" for those two, else the codec's name.
func codecOf(contentType string) string {
	ct := strings.ToLower(strings.TrimSpace(contentType))
	var name string
	switch {
	case strings.HasPrefix(ct, "application/grpc-web"):
		name = strings.TrimPrefix(strings.TrimPrefix(ct, "application/grpc-web"), "+")
	case strings.HasPrefix(ct, "application/grpc"):
		name = strings.TrimPrefix(strings.TrimPrefix(ct, "application/grpc"), "+")
	default:
		name = strings.TrimPrefix(ct, "application/")
	}
	if i := strings.IndexByte(name, ';'); i >= 0 {
		name = strings.TrimSpace(name[:i]) // "json; charset=utf-8"
	}
	if name == "" {
		return codecProto // gRPC's and gRPC-Web's default
	}
	return name
}

// storedReply is a replayed reply for a call not in binary Protobuf: the
// reply's message, which any codec can marshal (it is a proto.Message),
// and for a call in JSON the JSON stored at its first arrival, if any,
// which WithVerbatimJSON's codec sends as it is.
type storedReply struct {
	proto.Message
	json []byte
}

// WithVerbatimJSON returns the handler option that makes a replay in JSON
// the stored JSON, byte for byte, even when the replaying process is a
// later build than the one that answered first: it replaces connect's two
// JSON codecs ("json" and "json; charset=utf-8") by ones that marshal and
// unmarshal as connect's do (protojson, unknown fields discarded) and
// send a replayed reply's stored bytes verbatim. Without it a replay in
// JSON is the reply re-marshalled by protojson, whose whitespace may
// differ between builds. Give it to the handlers the interceptor guards:
//
//	connect.WithInterceptors(ic), idemconnect.WithVerbatimJSON()
func WithVerbatimJSON() connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithCodec(&verbatimJSON{name: "json"}),
		connect.WithCodec(&verbatimJSON{name: "json; charset=utf-8"}),
	)
}

type verbatimJSON struct{ name string }

var _ connect.Codec = (*verbatimJSON)(nil)

func (c *verbatimJSON) Name() string { return c.name }

func (c *verbatimJSON) Marshal(message any) ([]byte, error) {
	return c.MarshalAppend(nil, message)
}

// MarshalAppend is connect's optional appending marshal.
func (c *verbatimJSON) MarshalAppend(dst []byte, message any) ([]byte, error) {
	if r, ok := message.(*storedReply); ok && len(r.json) > 0 {
		return append(dst, r.json...), nil
	}
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("idemconnect: %T is not a proto.Message", message)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, m)
}

func (c *verbatimJSON) Unmarshal(b []byte, message any) error {
	m, ok := message.(proto.Message)
	if !ok {
		return fmt.Errorf("idemconnect: %T is not a proto.Message", message)
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	// Unknown fields are discarded, as connect's codec does, so that
	// clients and servers need not share one version of the schema.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, m); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", message, err)
	}
	return nil
}

func (c *verbatimJSON) IsBinary() bool { return false }
