// Package rpcguard is the shared core of the RPC interceptors, the
// modules idemgrpc and idemconnect: the key's checks, the claim, the
// handler's run inside the keeper's transaction, which replies are stored,
// which refusal answers each error of the keeper, and the defaults and
// bounds of their configuration. It speaks in gRPC status codes as numbers
// (Connect's codes are the same), so that it needs neither grpc nor
// connect and the library's module stays lean.
//
// Applications use idemgrpc or idemconnect, not this package; a new RPC
// framework's interceptor is built on it as those two are.
//
// Compatibility: rpcguard is part of the library's module
// (github.com/idemhq/idem) and follows its semantic versioning, like every
// exported package of it. Within a major version an identifier keeps its
// name, type and meaning, and fields, codes and reasons are only added, so
// an interceptor module built against one release of the library builds
// and behaves the same against any later release of the same major
// version. This is why the interceptors import it and not a package under
// internal/, whose API no version promises anything about.
package rpcguard

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/guardctx"
	"github.com/idemhq/idem/internal/opcount"
)

// The gRPC status codes the guard stores or answers with.
const (
	OK                 uint32 = 0
	Canceled           uint32 = 1
	Unknown            uint32 = 2
	InvalidArgument    uint32 = 3
	DeadlineExceeded   uint32 = 4
	FailedPrecondition uint32 = 9
	Aborted            uint32 = 10
	ResourceExhausted  uint32 = 8
	Unimplemented      uint32 = 12
	Internal           uint32 = 13
	Unavailable        uint32 = 14
	DataLoss           uint32 = 15
)

// Reasons are the stable ErrorInfo reasons of the guard's refusals, in
// ErrorInfo's UPPER_SNAKE_CASE; Domain is their domain.
const (
	Domain            = "idem.github.com/idemhq/idem"
	ReasonKeyMissing  = "IDEMPOTENCY_KEY_MISSING"
	ReasonKeyInvalid  = "IDEMPOTENCY_KEY_INVALID"
	ReasonKeyReused   = "IDEMPOTENCY_KEY_REUSED"
	ReasonKeyExpired  = "IDEMPOTENCY_KEY_EXPIRED"
	ReasonInFlight    = "REQUEST_IN_FLIGHT"
	ReasonUnavailable = "UNAVAILABLE"
	ReasonInternal    = "INTERNAL_ERROR"
	// ReasonAnswerForgotten: the key's stored reply belongs to a tenant
	// whose data was forgotten; it is not replayed and the call is not
	// run again (FailedPrecondition).
	ReasonAnswerForgotten = "ANSWER_FORGOTTEN"
)

// MaxUnguardedOperations bounds the operations counted apart by Unguarded.
const MaxUnguardedOperations = 256

// Config is the shared part of the interceptors' configs. Each interceptor
// documents its fields' defaults and bounds on its own Config; New applies
// the defaults with WithDefaults and the bounds with Validate.
type Config struct {
	// Keeper claims keys and stores replies. Required.
	Keeper *idem.Keeper
	// Scope returns a call's tenant; it must not return "". Default:
	// idemhttp.ScopeFrom(ctx), or idem.DefaultTenant when that is empty.
	Scope func(ctx context.Context, method string) string
	// Operation names what a call does. Default: the method itself.
	Operation func(method string) string
	// Methods are the methods that require a key. Default nil: every
	// unary method; an empty list is refused. Bound 1024.
	Methods []string
	// AllowMissingKey runs a guarded call without a key unguarded and
	// counts it apart (Unguarded). Default false: such a call is refused.
	AllowMissingKey bool
	// MaxReplyBytes bounds a stored reply (Reply's body and header
	// values). Default DefaultMaxReplyBytes; bound 1 KiB..64 MiB.
	MaxReplyBytes int
	// RetryAfter is the delay suggested with Aborted (in flight) and
	// Unavailable refusals. Default DefaultRetryAfter; bound 1ms..1h.
	RetryAfter time.Duration
	// OnAnswer, when set, is called once per guarded call with the kind of
	// answer it got. Default none.
	OnAnswer func(ctx context.Context, method string, kind idemhttp.Kind)
	// Logger receives unexpected errors (answered Internal). Default
	// slog.Default().
	Logger *slog.Logger
	// Name prefixes the messages: "idemgrpc", "idemconnect". Default
	// "rpcguard".
	Name string
}

// The defaults of Config's bounded fields.
const (
	DefaultMaxReplyBytes = 4 << 20
	DefaultRetryAfter    = time.Second
)

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Scope == nil {
		c.Scope = func(ctx context.Context, _ string) string {
			if s := idemhttp.ScopeFrom(ctx); s != "" {
				return s
			}
			return idem.DefaultTenant
		}
	}
	if c.Operation == nil {
		c.Operation = func(m string) string { return m }
	}
	if c.MaxReplyBytes == 0 {
		c.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Name == "" {
		c.Name = "rpcguard"
	}
	return c
}

// Validate checks the fields' bounds; it expects the defaults applied.
func (c Config) Validate() error {
	switch {
	case c.Keeper == nil:
		return fmt.Errorf("%s: Keeper is required", c.Name)
	case c.Methods != nil && len(c.Methods) == 0:
		return fmt.Errorf("%s: Methods is empty, which would guard nothing; leave it nil to guard every unary method", c.Name)
	case len(c.Methods) > 1024:
		return fmt.Errorf("%s: %d Methods is more than 1024", c.Name, len(c.Methods))
	case c.MaxReplyBytes < 1<<10 || c.MaxReplyBytes > 64<<20:
		return fmt.Errorf("%s: MaxReplyBytes %d is outside 1 KiB..64 MiB", c.Name, c.MaxReplyBytes)
	case c.RetryAfter < time.Millisecond || c.RetryAfter > time.Hour:
		return fmt.Errorf("%s: RetryAfter %s is outside 1ms..1h", c.Name, c.RetryAfter)
	}
	return nil
}

// Guard runs unary calls once per key.
type Guard struct {
	cfg       Config
	unguarded *opcount.Counter
}

// New returns a Guard on cfg with its defaults applied, or an error naming
// the field out of bounds.
func New(cfg Config) (*Guard, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Guard{cfg: cfg, unguarded: opcount.New(MaxUnguardedOperations)}, nil
}

// Unguarded returns the calls without a key run under AllowMissingKey, per
// operation.
func (g *Guard) Unguarded() map[string]uint64 { return g.unguarded.Snapshot() }

// Reply is a call's answer as stored: Code OK with the reply message's
// bytes, or an error's code with its google.rpc.Status bytes. Header is
// what an interceptor stores beside them to replay the reply in another
// encoding (idemconnect: the reply's type and its JSON as first sent).
type Reply struct {
	Code   uint32
	Header http.Header
	Body   []byte
}

// size is what MaxReplyBytes bounds: the body and the header's values.
func (r Reply) size() int {
	n := len(r.Body)
	for _, vs := range r.Header {
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// Answer says what the interceptor sends.
type Answer int

const (
	// Pass: the call is not guarded (a method outside Methods, or no key
	// under AllowMissingKey): run the handler as is.
	Pass Answer = iota
	// Handled: the handler ran in this call; send its own reply or error
	// (stored, or not stored because it was transient or a refusal).
	Handled
	// Replay: send Decision.Reply, marked replayed.
	Replay
	// Refuse: send Decision.Refusal.
	Refuse
)

// Refusal is an answer of the guard itself.
type Refusal struct {
	Code    uint32
	Reason  string
	Message string
	// RetryAfter, when positive, goes in a RetryInfo detail.
	RetryAfter time.Duration
}

// Decision is what Do decided.
type Decision struct {
	Answer  Answer
	Reply   Reply
	Refusal Refusal
}

// Run runs the handler inside the key's transaction (ctx carries the
// guard) and returns its reply as it would be stored. An error means the
// reply could not be made into one (it could not be marshalled).
type Run func(ctx context.Context) (Reply, error)

// errNotStored: the handler's answer is transient or a refusal of the
// request; the transaction rolls back and the key stays free.
var errNotStored = errors.New("rpcguard: the handler's answer is not stored")

// Guards reports whether method's calls are guarded (Config.Methods).
func (g *Guard) Guards(method string) bool {
	return g.cfg.Methods == nil || slices.Contains(g.cfg.Methods, method)
}

// Do guards one unary call of method with the key values keys (the
// metadata's idempotency-key values). request returns the request's bytes
// for the fingerprint; it is called only for a guarded call.
func (g *Guard) Do(ctx context.Context, method string, keys []string, request func() ([]byte, error), run Run) Decision {
	if !g.Guards(method) {
		return Decision{Answer: Pass}
	}
	if len(keys) == 0 && g.cfg.AllowMissingKey {
		g.unguarded.Add(g.cfg.Operation(method))
		g.report(ctx, method, idemhttp.KindUnguarded)
		return Decision{Answer: Pass}
	}
	switch {
	case len(keys) == 0:
		return g.refuse(ctx, method, idemhttp.KindMissingKey, Refusal{Code: InvalidArgument, Reason: ReasonKeyMissing,
			Message: "this call needs an idempotency-key metadata value"})
	case len(keys) > 1:
		return g.refuse(ctx, method, idemhttp.KindInvalidKey, Refusal{Code: InvalidArgument, Reason: ReasonKeyInvalid,
			Message: "idempotency-key was sent more than once"})
	}
	clientKey, err := idem.ParseKey(keys[0])
	if err != nil {
		return g.refuse(ctx, method, idemhttp.KindInvalidKey, Refusal{Code: InvalidArgument, Reason: ReasonKeyInvalid, Message: err.Error()})
	}
	scope := g.cfg.Scope(ctx, method)
	if scope == "" {
		return g.fail(ctx, method, fmt.Errorf("%s: Config.Scope returned an empty scope", g.cfg.Name))
	}
	body, err := request()
	if err != nil {
		return g.fail(ctx, method, fmt.Errorf("%s: marshal the request: %w", g.cfg.Name, err))
	}
	key := idem.Key{Scope: scope, Operation: g.cfg.Operation(method), Key: clientKey}

	ran, invalid := false, false
	res, err := g.cfg.Keeper.Do(ctx, idem.Request{Key: key, Fingerprint: fingerprint(method, body)},
		func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			ran = true
			gd := &guard{tx: tx, key: key}
			reply, err := run(guardctx.With(ctx, gd))
			if err != nil {
				return idem.Outcome{}, err
			}
			if n := reply.size(); n > g.cfg.MaxReplyBytes {
				return idem.Outcome{}, fmt.Errorf("%s: reply of %d bytes is larger than MaxReplyBytes %d", g.cfg.Name, n, g.cfg.MaxReplyBytes)
			}
			if notStored(reply.Code) || gd.invalid.Load() {
				invalid = reply.Code == InvalidArgument || gd.invalid.Load()
				return idem.Outcome{}, errNotStored
			}
			return idem.Outcome{Status: int(reply.Code), Header: reply.Header, Body: reply.Body}, nil
		})
	switch {
	case err == nil && !res.Replayed:
		g.report(ctx, method, idemhttp.KindFirst)
		return Decision{Answer: Handled}
	case err == nil:
		g.report(ctx, method, idemhttp.KindReplayed)
		return Decision{Answer: Replay, Reply: Reply{Code: uint32(res.Status), Header: res.Header, Body: res.Body}}
	case errors.Is(err, errNotStored) && ran && invalid:
		g.report(ctx, method, idemhttp.KindInvalid)
		return Decision{Answer: Handled}
	case errors.Is(err, errNotStored) && ran:
		g.report(ctx, method, idemhttp.KindHandlerError)
		return Decision{Answer: Handled}
	}
	return g.refuseErr(ctx, method, err)
}

// notStored reports whether a reply with code is a transient failure, not
// the call's outcome: the codes gRPC maps to a 5xx (and Canceled), which a
// retry may answer otherwise, and InvalidArgument, a refusal of the request
// before any work (the corrected request may reuse the key). Every other
// code — OK, and business refusals such as FailedPrecondition or NotFound —
// is stored and replayed.
func notStored(code uint32) bool {
	switch code {
	case Canceled, Unknown, InvalidArgument, DeadlineExceeded, ResourceExhausted, Aborted,
		Unimplemented, Internal, Unavailable, DataLoss:
		return true
	}
	return false
}

// refuseErr maps an error of the keeper to its refusal, as idemhttp's
// ProblemFor maps it to a problem.
func (g *Guard) refuseErr(ctx context.Context, method string, err error) Decision {
	p := idemhttp.ProblemFor(err, g.cfg.RetryAfter)
	switch p.Code {
	case idemhttp.CodeKeyReused:
		return g.refuse(ctx, method, idemhttp.KindReused, Refusal{Code: FailedPrecondition, Reason: ReasonKeyReused,
			Message: "this idempotency-key was already used with a different request"})
	case idemhttp.CodeKeyExpired:
		return g.refuse(ctx, method, idemhttp.KindExpired, Refusal{Code: FailedPrecondition, Reason: ReasonKeyExpired,
			Message: "the call with this idempotency-key was done; its answer is no longer kept, and it is not done again"})
	case idemhttp.CodeAnswerForgotten:
		return g.refuse(ctx, method, idemhttp.KindForgotten, Refusal{Code: FailedPrecondition, Reason: ReasonAnswerForgotten,
			Message: "this idempotency-key was used, and its reply belonged to a tenant whose data was forgotten; it cannot be replayed"})
	case idemhttp.CodeInFlight:
		return g.refuse(ctx, method, idemhttp.KindInFlight, Refusal{Code: Aborted, Reason: ReasonInFlight,
			Message: "a call with this idempotency-key is still being processed; retry later", RetryAfter: g.cfg.RetryAfter})
	case idemhttp.CodeKeyInvalid, idemhttp.CodeKeyMissing:
		return g.refuse(ctx, method, idemhttp.KindInvalidKey, Refusal{Code: InvalidArgument, Reason: ReasonKeyInvalid, Message: err.Error()})
	case idemhttp.CodeUnavailable:
		if errors.Is(err, context.Canceled) {
			return g.refuse(ctx, method, idemhttp.KindUnavailable, Refusal{Code: Canceled, Reason: ReasonUnavailable, Message: "call canceled"})
		}
		return g.refuse(ctx, method, idemhttp.KindUnavailable, Refusal{Code: Unavailable, Reason: ReasonUnavailable,
			Message: unavailableMessage(err), RetryAfter: g.cfg.RetryAfter})
	}
	return g.fail(ctx, method, err)
}

// unavailableMessage says what an Unavailable refusal left behind: nothing,
// unless the commit was sent (its answer lost, or its standbys not
// confirmed), when a retry with the same key is the way to learn it.
func unavailableMessage(err error) string {
	switch {
	case errors.Is(err, idem.ErrCommitUnknown):
		return "the database's answer to this call's commit was lost: it may have committed; " +
			"retry with the same idempotency-key, which replays it if it committed"
	case errors.Is(err, idem.ErrUnreplicated):
		return "the database committed this call but could not confirm it reached its standbys; " +
			"retry with the same idempotency-key"
	}
	return "the service cannot reach its database; nothing was done, retry later"
}

// fail answers an unexpected error: Internal, nothing stored, logged
// (a handler's panic was logged by the keeper with its stack).
func (g *Guard) fail(ctx context.Context, method string, err error) Decision {
	if !errors.Is(err, idem.ErrPanicked) {
		g.cfg.Logger.ErrorContext(ctx, g.cfg.Name+": call failed", "method", method, "err", err)
	}
	return g.refuse(ctx, method, idemhttp.KindError, Refusal{Code: Internal, Reason: ReasonInternal, Message: "the call failed; nothing was stored"})
}

func (g *Guard) refuse(ctx context.Context, method string, kind idemhttp.Kind, r Refusal) Decision {
	g.report(ctx, method, kind)
	return Decision{Answer: Refuse, Refusal: r}
}

func (g *Guard) report(ctx context.Context, method string, kind idemhttp.Kind) {
	if g.cfg.OnAnswer != nil {
		g.cfg.OnAnswer(ctx, method, kind)
	}
}

// fingerprint is SHA-256 over the full method and the request's bytes,
// framed: the interceptors marshal the request deterministically, so equal
// messages give equal bytes.
func fingerprint(method string, body []byte) []byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(method), body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// guard is a guarded call's guard (internal/guardctx): idemhttp.Tx,
// KeyFrom and MarkInvalid read it, as the interceptors' own Tx does.
type guard struct {
	tx      driver.Tx
	key     idem.Key
	invalid atomic.Bool // MarkInvalid was called
}

func (g *guard) Tx() driver.Tx { return g.tx }
func (g *guard) Key() idem.Key { return g.key }
func (g *guard) MarkInvalid()  { g.invalid.Store(true) }
