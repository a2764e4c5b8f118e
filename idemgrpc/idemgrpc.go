// Package idemgrpc is a gRPC unary server interceptor that makes unary
// calls idempotent with the keeper of package idem, as idemhttp does for
// net/http handlers. It is a module of its own, so that a program that
// uses only idem and idemhttp never gets grpc in its module graph.
//
// A guarded call carries its key in the metadata, idempotency-key. Its
// first arrival runs the handler inside the keeper's transaction — the
// handler writes its rows through Tx(ctx) (idemhttp.Tx is the same) — and
// the reply's marshalled bytes and its status code are stored in that same
// transaction. A later copy with the same key and the same request gets the
// stored reply back, byte for byte, or the stored error status, with
// idempotent-replayed: true in the response header metadata.
//
// The answers, with a google.rpc.ErrorInfo of domain Domain and a stable
// reason in the status details:
//
//	no key, two keys, an invalid key   InvalidArgument  IDEMPOTENCY_KEY_MISSING / _INVALID
//	same key, another request          FailedPrecondition IDEMPOTENCY_KEY_REUSED
//	a copy still runs past the wait    Aborted          REQUEST_IN_FLIGHT, with RetryInfo
//	database unreachable               Unavailable      UNAVAILABLE, with RetryInfo
//	the handler panicked, a fault      Internal         INTERNAL_ERROR
//
// The handler's error is stored and replayed like a reply when it is the
// call's outcome (FailedPrecondition, NotFound, AlreadyExists, ...); when it
// is transient (Unavailable, Internal, Unknown, Aborted, DeadlineExceeded,
// ResourceExhausted, Unimplemented, DataLoss, Canceled) or InvalidArgument
// (refused before any work), it rolls back, is sent as it is, and the key
// stays free for the retry.
//
// Keys are scoped by tenant (Config.Scope; by default the scope an
// authentication interceptor put in the context with idemhttp.WithScope)
// and operation (Config.Operation; by default the full method,
// "/pkg.Service/Method"). The fingerprint is the full method and the
// request message marshalled deterministically.
//
// Streaming calls are not guarded: there is no stream interceptor, and a
// stream is never stored or replayed. A replayed reply reaches the codec
// as a *emptypb.Empty whose unknown fields are the stored bytes, which the
// proto codec sends verbatim: put this interceptor last in the chain, so
// that no other interceptor reads a replayed reply's fields.
package idemgrpc

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/rpcguard"
)

// Metadata keys of the interceptor.
const (
	MetadataKey      = "idempotency-key"
	MetadataReplayed = "idempotent-replayed"
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
	Scope func(ctx context.Context, fullMethod string) string
	// Operation names what a call does. Default: the full method,
	// "/pkg.Service/Method".
	Operation func(fullMethod string) string
	// Methods are the full methods that require a key; the unary calls of
	// other methods pass through untouched (Tx nil). Default nil: every
	// unary method; an empty list is refused. Bound 1024 methods.
	Methods []string
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
	OnAnswer func(ctx context.Context, fullMethod string, kind idemhttp.Kind)
	// Logger receives unexpected errors (answered Internal). Default
	// slog.Default().
	Logger *slog.Logger
}

// Interceptor guards unary calls. It is safe for concurrent use.
type Interceptor struct {
	g   *rpcguard.Guard
	log *slog.Logger
}

// New returns an Interceptor, or an error naming the Config field out of
// bounds.
func New(cfg Config) (*Interceptor, error) {
	g, err := rpcguard.New(rpcguard.Config{
		Keeper: cfg.Keeper, Scope: cfg.Scope, Operation: cfg.Operation, Methods: cfg.Methods,
		AllowMissingKey: cfg.AllowMissingKey, MaxReplyBytes: cfg.MaxReplyBytes, RetryAfter: cfg.RetryAfter,
		OnAnswer: cfg.OnAnswer, Logger: cfg.Logger, Name: "idemgrpc",
	})
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Interceptor{g: g, log: log}, nil
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

// Unary returns the interceptor for grpc.ChainUnaryInterceptor (last).
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		var resp any
		var herr error
		d := i.g.Do(ctx, info.FullMethod, md.Get(MetadataKey),
			func() ([]byte, error) { return marshalRequest(req) },
			func(ctx context.Context) (rpcguard.Reply, error) {
				resp, herr = handler(ctx, req)
				return replyOf(resp, herr)
			})
		switch d.Answer {
		case rpcguard.Pass:
			return handler(ctx, req)
		case rpcguard.Handled:
			return resp, herr
		case rpcguard.Replay:
			// The replay is answered without its marker rather than not
			// at all: the header fails only on a stream already sending.
			if err := grpc.SetHeader(ctx, metadata.Pairs(MetadataReplayed, "true")); err != nil {
				i.log.WarnContext(ctx, "idemgrpc: replay answered without its "+MetadataReplayed+" header",
					"method", info.FullMethod, "err", err)
			}
			return replayOf(d.Reply)
		}
		return nil, refusal(d.Refusal)
	}
}

var errNotProto = errors.New("idemgrpc: the message is not a proto.Message")

func marshalRequest(req any) ([]byte, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, errNotProto
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// replyOf is the handler's answer as stored: the reply's bytes as the
// proto codec marshals them, or the error's status.
func replyOf(resp any, err error) (rpcguard.Reply, error) {
	if err != nil {
		st := status.Convert(err)
		b, merr := proto.Marshal(st.Proto())
		return rpcguard.Reply{Code: uint32(st.Code()), Body: b}, merr
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return rpcguard.Reply{}, errNotProto
	}
	b, err := proto.Marshal(m)
	return rpcguard.Reply{Code: rpcguard.OK, Body: b}, err
}

// replayOf is a stored answer as the handler's values: the reply's stored
// bytes, which the codec sends as they are, or the stored status.
func replayOf(r rpcguard.Reply) (any, error) {
	if r.Code == rpcguard.OK {
		m := &emptypb.Empty{}
		m.ProtoReflect().SetUnknown(protoreflect.RawFields(r.Body))
		return m, nil
	}
	st := &spb.Status{}
	if err := proto.Unmarshal(r.Body, st); err != nil {
		return nil, status.Error(codes.Internal, "idemgrpc: the stored status cannot be decoded")
	}
	return nil, status.ErrorProto(st)
}

// refusal is the interceptor's own answer, with its ErrorInfo (and
// RetryInfo) detail.
func refusal(r rpcguard.Refusal) error {
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: r.Reason, Domain: Domain}}
	if r.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)})
	}
	st := status.New(codes.Code(r.Code), r.Message)
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}
