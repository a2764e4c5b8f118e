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
// Guarded calls must use a binary Protobuf codec (application/proto,
// application/grpc, application/grpc-web): a replayed reply is the stored
// bytes, sent as the unknown fields of a *emptypb.Empty, which only the
// binary codec writes verbatim. A guarded call in JSON is refused
// InvalidArgument with the reason REQUEST_CODEC_UNSUPPORTED before it runs.
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
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/rpcguard"
)

// Header names of the interceptor.
const (
	HeaderKey      = idemhttp.HeaderKey
	HeaderReplayed = idemhttp.HeaderReplayed
)

// Domain and the ErrorInfo reasons of the interceptor's refusals.
const (
	Domain                 = rpcguard.Domain
	ReasonKeyMissing       = rpcguard.ReasonKeyMissing
	ReasonKeyInvalid       = rpcguard.ReasonKeyInvalid
	ReasonKeyReused        = rpcguard.ReasonKeyReused
	ReasonInFlight         = rpcguard.ReasonInFlight
	ReasonUnavailable      = rpcguard.ReasonUnavailable
	ReasonInternal         = rpcguard.ReasonInternal
	ReasonCodecUnsupported = "REQUEST_CODEC_UNSUPPORTED"
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
	// MaxReplyBytes bounds a reply's marshalled size, which is stored; a
	// larger one rolls back and is answered Internal. Default 4 MiB; bound
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

func (c Config) withDefaults() Config {
	if c.Scope == nil {
		c.Scope = func(ctx context.Context, _ string) string {
			if s := idemhttp.ScopeFrom(ctx); s != "" {
				return s
			}
			return idem.DefaultTenant
		}
	}
	if c.Operation == nil {
		c.Operation = func(p string) string { return p }
	}
	if c.MaxReplyBytes == 0 {
		c.MaxReplyBytes = 4 << 20
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
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
	cfg = cfg.withDefaults()
	rc := rpcguard.Config{
		Keeper: cfg.Keeper, Scope: cfg.Scope, Operation: cfg.Operation, Methods: cfg.Procedures,
		AllowMissingKey: cfg.AllowMissingKey, MaxReplyBytes: cfg.MaxReplyBytes, RetryAfter: cfg.RetryAfter,
		OnAnswer: cfg.OnAnswer, Logger: cfg.Logger, Name: "idemconnect",
	}
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	return &Interceptor{g: rpcguard.New(rc)}, nil
}

// Unguarded returns, per operation, how many calls ran unguarded because
// they came without a key under Config.AllowMissingKey (at most
// MaxUnguardedOperations operations, the rest as "_other").
func (i *Interceptor) Unguarded() map[string]uint64 { return i.g.Unguarded() }

// Tx returns the transaction a guarded handler writes its rows in; nil
// outside a guarded call. It is idemhttp.Tx.
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
		if len(keys) > 0 && i.g.Guards(proc) && strings.HasSuffix(req.Header().Get("Content-Type"), "json") {
			return nil, refusal(i.g.RefuseRequest(ctx, proc, ReasonCodecUnsupported,
				"a call guarded by an idempotency key must use a binary Protobuf codec, not JSON").Refusal)
		}
		var resp connect.AnyResponse
		var herr error
		d := i.g.Do(ctx, proc, keys,
			func() ([]byte, error) { return marshalRequest(req.Any()) },
			func(ctx context.Context) (rpcguard.Reply, error) {
				resp, herr = next(ctx, req)
				return replyOf(resp, herr)
			})
		switch d.Answer {
		case rpcguard.Pass:
			return next(ctx, req)
		case rpcguard.Handled:
			return resp, herr
		case rpcguard.Replay:
			return replayOf(d.Reply)
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
// binary codec marshals them, or the error as a google.rpc.Status.
func replyOf(resp connect.AnyResponse, err error) (rpcguard.Reply, error) {
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
	return rpcguard.Reply{Code: rpcguard.OK, Body: b}, err
}

// replayOf is a stored answer as the handler's values, marked replayed.
func replayOf(r rpcguard.Reply) (connect.AnyResponse, error) {
	if r.Code == rpcguard.OK {
		m := &emptypb.Empty{}
		m.ProtoReflect().SetUnknown(protoreflect.RawFields(r.Body))
		res := connect.NewResponse(m)
		res.Header().Set(HeaderReplayed, "true")
		return res, nil
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
