// Package idemconnect is a Connect (connectrpc.com/connect) unary handler
// interceptor that makes unary calls idempotent with the keeper of package
// idem, with the same answers as idemgrpc. It is a module of its own, so
// that a program that uses only idem and idemhttp never gets connect in
// its module graph.
//
// A guarded call carries its key in the Idempotency-Key header (Connect's
// metadata; gRPC clients send it as idempotency-key). Its first arrival
// runs the handler inside the keeper's transaction — the handler writes its
// rows through Tx(ctx) (idemhttp.Tx is the same) — and the reply's
// marshalled bytes and its code are stored in that same transaction. A
// later copy with the same key and the same request gets the stored reply
// back, byte for byte, or the stored error, with Idempotent-Replayed: true
// in the response headers. The refusals are those of idemgrpc, with the
// same connect codes and an ErrorInfo detail of the same stable reasons:
// no key or an invalid one InvalidArgument, reuse FailedPrecondition, in
// flight Aborted with RetryInfo, database unreachable Unavailable with
// RetryInfo, a fault Internal.
//
// The handler's error is stored and replayed when it is the call's
// outcome (FailedPrecondition, NotFound, ...); a transient one
// (Unavailable, Internal, Unknown, Aborted, DeadlineExceeded,
// ResourceExhausted, Unimplemented, DataLoss, Canceled) or InvalidArgument
// rolls back, is sent as it is, and leaves the key free.
//
// Guarded calls may use any codec. The request's fingerprint is its
// message marshalled deterministically in binary, so a call in JSON and
// its copy in binary Protobuf with the same meaning are the same request.
// The stored reply is its binary Protobuf bytes, its message's full name
// and, for a call in JSON, the JSON as first sent; a copy in binary gets
// the stored bytes verbatim (the unknown fields of a *emptypb.Empty, which
// the binary codec writes as they are), a copy in JSON the stored JSON
// verbatim through the codec of WithVerbatimJSON (without it, the reply
// re-marshalled by protojson, which is byte-identical only within one
// build: protojson varies its whitespace between builds), and a copy in
// any other codec the reply's message as the codec marshals it.
// Put the interceptor last, so that no other interceptor reads a replayed
// reply's fields. Streaming calls and GET requests (allowed only for
// methods without side effects) pass through untouched, as do the calls of
// a client the interceptor is given to.
package idemconnect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/rpcguard"
)

// Header names of the interceptor.
const (
	HeaderKey      = idemhttp.HeaderKey
	HeaderReplayed = idemhttp.HeaderReplayed
)

// Domain and the ErrorInfo reasons of the interceptor's refusals.
const (
	Domain            = rpcguard.Domain
	ReasonKeyMissing  = rpcguard.ReasonKeyMissing
	ReasonKeyInvalid  = rpcguard.ReasonKeyInvalid
	ReasonKeyReused   = rpcguard.ReasonKeyReused
	ReasonKeyExpired  = rpcguard.ReasonKeyExpired
	ReasonInFlight    = rpcguard.ReasonInFlight
	ReasonUnavailable = rpcguard.ReasonUnavailable
	ReasonInternal    = rpcguard.ReasonInternal
	// ReasonAnswerForgotten (FailedPrecondition): the key's stored reply
	// belongs to a forgotten tenant; the call did not run again.
	ReasonAnswerForgotten = rpcguard.ReasonAnswerForgotten
)

// MaxUnguardedOperations bounds the operations Unguarded counts apart.
const MaxUnguardedOperations = rpcguard.MaxUnguardedOperations

// Config configures New; Keeper is required.
type Config struct {
	// Keeper claims keys and stores replies. Required.
	Keeper *idem.Keeper
	// Scope returns the tenant of a call; it must not return "". Default:
	// idemhttp.ScopeFrom(ctx), or idem.DefaultTenant when that is empty.
	Scope func(ctx context.Context, procedure string) string
	// Operation names what a call does. Default: the procedure,
	// "/pkg.Service/Method".
	Operation func(procedure string) string
	// Procedures are the procedures that require a key; the unary calls of
	// others pass through untouched (Tx nil). Default nil: every unary
	// procedure; an empty list is refused. Bound 1024.
	Procedures []string
	// AllowMissingKey is the rollout mode: a guarded call without a key
	// runs the handler unguarded and is counted apart (Unguarded per
	// operation, idemhttp.KindUnguarded to OnAnswer). Default false: a call
	// that needs a key and has none is refused InvalidArgument, since a
	// retry of it could do the work twice.
	AllowMissingKey bool
	// MaxReplyBytes bounds a reply's marshalled size, which is stored (for
	// a call in JSON, its binary and JSON forms together); a larger one
	// rolls back and is answered Internal. Default 4 MiB; bound
	// 1 KiB..64 MiB.
	MaxReplyBytes int
	// RetryAfter is the RetryInfo delay of Aborted (in flight) and
	// Unavailable answers. Default 1s; bound 1ms..1h.
	RetryAfter time.Duration
	// OnAnswer, when set, is called once per guarded call with the kind of
	// answer it got (metrics), in idemhttp's words. Default none.
	OnAnswer func(ctx context.Context, procedure string, kind idemhttp.Kind)
	// Logger receives unexpected errors (answered Internal). Default
	// slog.Default().
	Logger *slog.Logger
}

// Interceptor guards unary calls; it is a connect.Interceptor for
// connect.WithInterceptors. It is safe for concurrent use.
type Interceptor struct {
	g *rpcguard.Guard
}

var _ connect.Interceptor = (*Interceptor)(nil)

// New returns an Interceptor, or an error naming the Config field out of
// bounds.
func New(cfg Config) (*Interceptor, error) {
	g, err := rpcguard.New(rpcguard.Config{
		Keeper: cfg.Keeper, Scope: cfg.Scope, Operation: cfg.Operation, Methods: cfg.Procedures,
		AllowMissingKey: cfg.AllowMissingKey, MaxReplyBytes: cfg.MaxReplyBytes, RetryAfter: cfg.RetryAfter,
		OnAnswer: cfg.OnAnswer, Logger: cfg.Logger, Name: "idemconnect",
	})
	if err != nil {
		return nil, err
	}
	return &Interceptor{g: g}, nil
}

// Unguarded returns, per operation, how many calls ran unguarded because
// they came without a key under Config.AllowMissingKey (at most
// MaxUnguardedOperations operations, the rest as "_other").
func (i *Interceptor) Unguarded() map[string]uint64 { return i.g.Unguarded() }

// Tx returns the transaction a guarded handler writes its rows in; nil
// outside a guarded call (an unguarded procedure, or no key under
// AllowMissingKey), which idem's packages refuse with driver.ErrNoTx. It
// is idemhttp.Tx.
func Tx(ctx context.Context) driver.Tx { return idemhttp.Tx(ctx) }

// KeyFrom returns the scoped key of the guarded call ctx belongs to. It is
// idemhttp.KeyFrom.
func KeyFrom(ctx context.Context) (idem.Key, bool) { return idemhttp.KeyFrom(ctx) }

// WrapUnary guards a handler's unary calls.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient || req.HTTPMethod() == http.MethodGet {
			return next(ctx, req)
		}
		proc, keys := req.Spec().Procedure, req.Header().Values(HeaderKey)
		codec := codecOf(req.Header().Get("Content-Type"))
		var resp connect.AnyResponse
		var herr error
		d := i.g.Do(ctx, proc, keys,
			func() ([]byte, error) { return marshalRequest(req.Any()) },
			func(ctx context.Context) (rpcguard.Reply, error) {
				resp, herr = next(ctx, req)
				return replyOf(resp, herr, codec)
			})
		switch d.Answer {
		case rpcguard.Pass:
			return next(ctx, req)
		case rpcguard.Handled:
			return resp, herr
		case rpcguard.Replay:
			return replayOf(d.Reply, codec, req.Spec())
		}
		return nil, refusal(d.Refusal)
	}
}

// WrapStreamingClient passes streams through untouched.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler passes streams through untouched: a stream is never
// stored or replayed.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

var errNotProto = errors.New("idemconnect: the message is not a proto.Message")

func marshalRequest(req any) ([]byte, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, errNotProto
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// replyOf is the handler's answer as stored: the reply's bytes as the
// binary codec marshals them with its message's full name and, for a call
// in JSON, the JSON as the codec sends it; or the error as a
// google.rpc.Status.
func replyOf(resp connect.AnyResponse, err error, codec string) (rpcguard.Reply, error) {
	if err != nil {
		st := &spb.Status{Code: int32(connect.CodeOf(err)), Message: err.Error()}
		if ce := new(connect.Error); errors.As(err, &ce) {
			st.Message = ce.Message()
			for _, d := range ce.Details() {
				st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
			}
		}
		b, merr := proto.Marshal(st)
		return rpcguard.Reply{Code: uint32(st.Code), Body: b}, merr
	}
	m, ok := resp.Any().(proto.Message)
	if !ok {
		return rpcguard.Reply{}, errNotProto
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return rpcguard.Reply{}, err
	}
	h := http.Header{headerReplyType: {string(m.ProtoReflect().Descriptor().FullName())}}
	if codec == codecJSON {
		// The bytes connect's JSON codec (and WithVerbatimJSON's) sends:
		// the same function on the same message in the same build.
		j, err := protojson.MarshalOptions{}.Marshal(m)
		if err != nil {
			return rpcguard.Reply{}, err
		}
		h[headerReplyJSON] = []string{string(j)}
	}
	return rpcguard.Reply{Code: rpcguard.OK, Header: h, Body: b}, nil
}

// replayOf is a stored answer as the handler's values in the call's
// codec, marked replayed.
func replayOf(r rpcguard.Reply, codec string, spec connect.Spec) (connect.AnyResponse, error) {
	if r.Code == rpcguard.OK {
		if codec == codecProto {
			e := &emptypb.Empty{}
			e.ProtoReflect().SetUnknown(protoreflect.RawFields(r.Body))
			return replayed(connect.NewResponse(e)), nil
		}
		typed, err := typedReply(r, spec)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		m := &storedReply{Message: typed}
		if j := r.Header.Get(headerReplyJSON); codec == codecJSON && j != "" {
			m.json = []byte(j)
		}
		return replayed(connect.NewResponse(m)), nil
	}
	st := &spb.Status{}
	if err := proto.Unmarshal(r.Body, st); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("idemconnect: the stored status cannot be decoded: %w", err))
	}
	ce := connect.NewError(connect.Code(st.Code), errors.New(st.Message)) // not a wire error: connect drops its metadata
	for _, a := range st.Details {
		if d, err := connect.NewErrorDetail(a); err == nil {
			ce.AddDetail(d)
		}
	}
	ce.Meta().Set(HeaderReplayed, "true")
	return nil, ce
}

// replayed marks res as a replay (Idempotent-Replayed: true).
func replayed[T any](res *connect.Response[T]) *connect.Response[T] {
	res.Header().Set(HeaderReplayed, "true")
	return res
}

// typedReply is a stored reply as its own message type: the type stored
// with it, or (a reply stored by idemgrpc, which keeps no type) the
// procedure's output type from the handler's schema.
func typedReply(r rpcguard.Reply, spec connect.Spec) (proto.Message, error) {
	var m proto.Message
	name := protoreflect.FullName(r.Header.Get(headerReplyType))
	md, _ := spec.Schema.(protoreflect.MethodDescriptor)
	if name == "" && md != nil {
		name = md.Output().FullName()
	}
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(name); err == nil {
		m = mt.New().Interface()
	} else if md != nil && md.Output().FullName() == name {
		m = dynamicpb.NewMessage(md.Output())
	} else {
		return nil, fmt.Errorf("idemconnect: the stored reply's type %q is unknown: it cannot be replayed in this codec", name)
	}
	if err := proto.Unmarshal(r.Body, m); err != nil {
		return nil, fmt.Errorf("idemconnect: the stored reply cannot be decoded as %s: %w", name, err)
	}
	return m, nil
}

// refusal is the interceptor's own answer, with its ErrorInfo (and
// RetryInfo) detail.
func refusal(r rpcguard.Refusal) error {
	ce := connect.NewError(connect.Code(r.Code), errors.New(r.Message))
	details := []proto.Message{&errdetails.ErrorInfo{Reason: r.Reason, Domain: Domain}}
	if r.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)})
	}
	for _, m := range details {
		if d, err := connect.NewErrorDetail(m); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}
