// Package idemhttp is net/http middleware that makes POST (and PATCH)
// handlers idempotent per the IETF Idempotency-Key draft, on top of the
// keeper of package idem.
//
// A guarded request must carry an Idempotency-Key header. Its first arrival
// runs the handler inside the keeper's transaction — the handler writes its
// rows through Tx(r.Context()) — and the response is stored in that same
// transaction. A later copy with the same key and the same request gets the
// stored status and body back, byte for byte, with Idempotent-Replayed: true.
// A copy with a different request gets 422, one that arrives while the first
// still runs waits (bounded) and then replays or gets 409, and a database
// that cannot be reached gets 503: the table in docs/idemhttp.md lists every
// answer. Errors are RFC 9457 problem details with a stable code member,
// mapped by ProblemFor, which the webhook intake and idem serve share.
//
// Every answer below 500 is stored, business refusals included, except
// that of a request the handler refused by validation and marked so with
// MarkInvalid: it rolls back and the key stays free for the corrected
// request. A 5xx answer rolls back too, so that a retry runs again.
//
// Batched is a route whose first arrivals share transactions (the keeper's
// group commit, idem.Batcher), with the same answers.
//
// Keys are scoped by tenant (Config.Scope) and operation: the method and the
// route pattern the request matched (r.Pattern), so that one key sent to
// /v1/transfers/a/reversals and /v1/transfers/b/reversals is the same
// operation with a different request (422), not two unrelated operations.
// Wrap each route, not the whole mux, so that the pattern is known.
package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/benchknob"
	"github.com/idemhq/idem/internal/jsonfp"
	"github.com/idemhq/idem/internal/opcount"
)

// Header names of the draft.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// Stable problem codes this package answers with (ProblemFor).
const (
	CodeKeyMissing   = "idempotency_key_missing"
	CodeKeyInvalid   = "idempotency_key_invalid"
	CodeKeyReused    = "idempotency_key_reused"
	CodeKeyExpired   = "idempotency_key_expired"
	CodeInFlight     = "request_in_flight"
	CodeInvalidBody  = "invalid_request"
	CodeBodyTooLarge = "body_too_large"
	CodeUnavailable  = "unavailable"
	CodeNotFound     = "not_found"
	CodeInternal     = "internal_error"
	// CodeAnswerForgotten: the key's stored answer belongs to a tenant
	// whose data was forgotten (idem tenants forget): it can never be
	// replayed, and the request is not run again (410).
	CodeAnswerForgotten = "answer_forgotten"
)

// Kind classifies how the middleware answered a guarded request, for
// metrics (Config.OnAnswer). It is a label, not the answer: the stored
// answer is an idem.Outcome. The values are stable (idem serve's
// idem_http_idempotency_outcomes_total counts by them).
type Kind string

const (
	KindFirst        Kind = "first"            // the handler ran and its outcome was stored
	KindReplayed     Kind = "replayed"         // a stored outcome was replayed
	KindReused       Kind = "reused"           // 422: same key, different request
	KindInFlight     Kind = "in_flight"        // 409: a twin still runs
	KindExpired      Kind = "expired"          // 409: done before, the answer no longer kept
	KindMissingKey   Kind = "missing_key"      // 400
	KindInvalidKey   Kind = "invalid_key"      // 400
	KindInvalidBody  Kind = "invalid_body"     // 400: the body is not JSON
	KindBodyTooLarge Kind = "body_too_large"   // 413
	KindUnavailable  Kind = "unavailable"      // 503: database unreachable, nothing stored
	KindInvalid      Kind = "invalid"          // the handler refused the request as invalid (MarkInvalid): rolled back, nothing stored
	KindHandlerError Kind = "handler_error"    // the handler answered 5xx: rolled back, nothing stored
	KindError        Kind = "error"            // 500: an unexpected error or a handler's panic, nothing stored
	KindForgotten    Kind = "answer_forgotten" // 410: the stored answer's tenant was forgotten; nothing ran
)

// DefaultReplayHeaders are the response headers stored and replayed when
// Config.ReplayHeaders is nil: the ones that describe the stored
// representation, never the ones that describe one exchange.
var DefaultReplayHeaders = []string{"Content-Type", "Content-Language", "Content-Location", "Location", "ETag"}

// forbiddenReplayHeaders describe one exchange or are recomputed; replaying
// the first response's copy would be wrong (a cookie set twice, a stale
// Date, a wrong length) or would let a handler forge the replay marker.
var forbiddenReplayHeaders = []string{
	"Set-Cookie", "Set-Cookie2", "Date", "Content-Length", "Transfer-Encoding", "Connection",
	"Keep-Alive", "Trailer", "Upgrade", "Proxy-Connection", HeaderReplayed,
}

// Config configures New; Keeper is required.
type Config struct {
	// Keeper claims keys and stores outcomes. Required. Its Wait bounds how
	// long a copy waits for a twin, its Retention how long an outcome is
	// replayed, its Clock the replay cache's notion of now.
	Keeper *idem.Keeper
	// Scope returns the tenant a request belongs to; keys of different
	// scopes never meet. It must not return "". Default: ScopeFrom(ctx), or
	// idem.DefaultTenant when that is empty.
	Scope func(*http.Request) string
	// Operation names what a request does. Default: the method and the route
	// pattern the request matched (r.Pattern without its method), or the
	// path when no ServeMux pattern is known.
	Operation func(*http.Request) string
	// Methods are the methods that require a key; requests with other
	// methods pass through untouched (and Tx is nil for them). Default POST
	// and PATCH; bound 1..16 methods.
	Methods []string
	// MaxBodyBytes bounds a request body, with or without a key
	// (AllowMissingKey); a larger one is answered 413 body_too_large
	// without running the handler. Default 1 MiB; bound
	// 1 B..64 MiB.
	MaxBodyBytes int64
	// MaxResponseBytes bounds a handler's response, which is buffered and
	// stored; a larger one rolls back and is answered 500. Default 4 MiB;
	// bound 1 KiB..64 MiB.
	MaxResponseBytes int64
	// ReplayHeaders is the allow-list of response headers stored and
	// replayed. Default DefaultReplayHeaders; bound 64 names. Set-Cookie,
	// Date, Content-Length and hop-by-hop headers are refused.
	ReplayHeaders []string
	// RedactFields are JSON fields of a handler's answer that are not
	// stored: dotted paths of object members ("card.number", "cvc"),
	// followed through arrays into each element. The first answer has
	// them; the stored answer, and so every replay (and every copy that
	// joined the first), does not: a replay then differs from the first
	// answer. An answer whose body is not JSON cannot be redacted and is
	// not stored: it rolls back and is answered 500. Default none; bound
	// MaxRedactFields paths.
	RedactFields []string
	// RetryAfter is sent as Retry-After (whole seconds, rounded up) with 409
	// in flight and 503 answers. Default 1s; bound 1s..1h.
	RetryAfter time.Duration
	// IgnoreFields are top-level JSON fields left out of the fingerprint
	// (for example a client's "sent_at"). Default: the keeper's
	// IgnoreFields; bound 64 names.
	IgnoreFields []string
	// ReplayCache bounds the entries of the in-process cache of completed
	// outcomes, which answers replays without a database round trip.
	// Default 10000, or off when the keeper seals its outcomes
	// (idem.Config.Sealer): a cached answer would go on replaying after its
	// tenant was forgotten (idem tenants forget), and would hold in memory
	// what the database holds only encrypted. -1 turns it off; bound
	// 1..1000000.
	ReplayCache int
	// ReplayCacheBytes bounds the cache's approximate size. Default 64 MiB;
	// bound 1 KiB..4 GiB.
	ReplayCacheBytes int64
	// AllowMissingKey is the rollout mode: a request with a guarded method
	// but no Idempotency-Key runs the handler unguarded — no claim, nothing
	// stored, Tx nil — and is counted apart (KindUnguarded, Unguarded per
	// operation). Turn it on while the clients of an API that never took
	// keys learn to send them; turn it off once Unguarded stops growing.
	// Default false: a request that needs a key and has none is refused 400
	// idempotency_key_missing, since a retry of it could do the work twice.
	// A request with a key is guarded either way; Batched routes always
	// require one.
	AllowMissingKey bool
	// Fingerprint computes a request's fingerprint from its method, path
	// and body (FingerprintFunc). Default: the canonical JSON of the body
	// without IgnoreFields (JSONFingerprint), which refuses a body that is
	// not JSON; FormFingerprint guards form-encoded bodies, BytesFingerprint
	// protobuf and other bodies with one encoding per request.
	Fingerprint FingerprintFunc
	// OnAnswer, when set, is called once per guarded request with the
	// kind of answer it got (metrics). It must be fast and must not write
	// to w. Default none.
	OnAnswer func(r *http.Request, kind Kind)
	// Logger receives unexpected errors (answered 500). A handler's panic,
	// also answered 500, is logged by the keeper, with its key and stack, on
	// the keeper's Config.Logger. Default slog.Default().
	Logger *slog.Logger
}

const (
	defaultMaxBodyBytes     = 1 << 20
	defaultMaxResponseBytes = 4 << 20
	defaultReplayCache      = 10000
	defaultReplayCacheBytes = 64 << 20
)

func (c Config) withDefaults() Config {
	if c.Scope == nil {
		c.Scope = defaultScope
	}
	if c.Operation == nil {
		c.Operation = defaultOperation
	}
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = defaultMaxBodyBytes
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = defaultMaxResponseBytes
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = DefaultReplayHeaders
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = time.Second
	}
	if c.IgnoreFields == nil && c.Keeper != nil {
		c.IgnoreFields = c.Keeper.Config().IgnoreFields
	}
	if c.ReplayCache == 0 {
		c.ReplayCache = defaultReplayCache
		if c.Keeper != nil && c.Keeper.Config().Sealer != nil {
			c.ReplayCache = -1
		}
	}
	if c.ReplayCacheBytes == 0 {
		c.ReplayCacheBytes = defaultReplayCacheBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Keeper == nil:
		return errors.New("idemhttp: Keeper is required")
	case len(c.Methods) < 1 || len(c.Methods) > 16:
		return fmt.Errorf("idemhttp: %d Methods is outside 1..16", len(c.Methods))
	case c.MaxBodyBytes < 1 || c.MaxBodyBytes > 64<<20:
		return fmt.Errorf("idemhttp: MaxBodyBytes %d is outside 1..64 MiB", c.MaxBodyBytes)
	case c.MaxResponseBytes < 1<<10 || c.MaxResponseBytes > 64<<20:
		return fmt.Errorf("idemhttp: MaxResponseBytes %d is outside 1 KiB..64 MiB", c.MaxResponseBytes)
	case len(c.ReplayHeaders) > 64:
		return fmt.Errorf("idemhttp: %d ReplayHeaders is more than 64", len(c.ReplayHeaders))
	case c.RetryAfter < time.Second || c.RetryAfter > time.Hour:
		return fmt.Errorf("idemhttp: RetryAfter %s is outside 1s..1h", c.RetryAfter)
	case len(c.IgnoreFields) > 64:
		return fmt.Errorf("idemhttp: %d IgnoreFields is more than 64", len(c.IgnoreFields))
	case c.ReplayCache != -1 && (c.ReplayCache < 1 || c.ReplayCache > 1000000):
		return fmt.Errorf("idemhttp: ReplayCache %d is outside 1..1000000 (or -1 for off)", c.ReplayCache)
	case c.ReplayCacheBytes < 1<<10 || c.ReplayCacheBytes > 4<<30:
		return fmt.Errorf("idemhttp: ReplayCacheBytes %d is outside 1 KiB..4 GiB", c.ReplayCacheBytes)
	}
	for _, m := range c.Methods {
		if m == "" || strings.ContainsAny(m, " \t/") {
			return fmt.Errorf("idemhttp: method %q is not a method", m)
		}
	}
	for _, h := range c.ReplayHeaders {
		if slices.Contains(forbiddenReplayHeaders, http.CanonicalHeaderKey(h)) {
			return fmt.Errorf("idemhttp: ReplayHeaders must not list %s: it belongs to one exchange, not to the stored outcome", h)
		}
	}
	return nil
}

// Middleware guards handlers with idempotency keys. It is safe for
// concurrent use; one Middleware may wrap many routes.
type Middleware struct {
	cfg        Config
	keeper     *idem.Keeper
	replay     []string // canonical header names
	retryAfter string
	cache      *replayCache
	unguarded  *opcount.Counter // requests run without a key (AllowMissingKey)
	// storeBody is the keeper's Request.StoreBody: RedactFields applied,
	// nil without them.
	storeBody func([]byte) ([]byte, error)
}

// New returns a Middleware, or an error naming the Config field out of
// bounds.
func New(cfg Config) (*Middleware, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{
		cfg:        cfg,
		keeper:     cfg.Keeper,
		retryAfter: retryAfterSeconds(cfg.RetryAfter),
		unguarded:  newUnguardedCounter(),
	}
	for _, h := range cfg.ReplayHeaders {
		m.replay = append(m.replay, http.CanonicalHeaderKey(h))
	}
	paths, err := parseRedactFields(cfg.RedactFields)
	if err != nil {
		return nil, err
	}
	if len(paths) > 0 {
		m.storeBody = func(body []byte) ([]byte, error) { return redact(body, paths) }
	}
	if cfg.ReplayCache > 0 && !benchknob.Off("replay-cache") {
		m.cache = newReplayCache(cfg.ReplayCache, cfg.ReplayCacheBytes)
	}
	return m, nil
}

// CacheStats reports the replay cache's hits, misses and size (zero when
// the cache is off).
func (m *Middleware) CacheStats() CacheStats { return m.cache.stats() }

func defaultScope(r *http.Request) string {
	if s := ScopeFrom(r.Context()); s != "" {
		return s
	}
	return idem.DefaultTenant
}

// defaultOperation is the method and the matched route pattern. ServeMux
// patterns read "[METHOD ][HOST]/[PATH]"; the method part is dropped and the
// request's own method used, so that "POST /x" and "/x" name one operation.
func defaultOperation(r *http.Request) string {
	p := r.Pattern
	if p == "" {
		return r.Method + " " + r.URL.Path
	}
	if i := strings.IndexAny(p, " \t"); i >= 0 && !strings.Contains(p[:i], "/") {
		rest := strings.TrimLeft(p[i:], " \t")
		if p[:i] == r.Method && p[i] == ' ' && len(rest) == len(p)-i-1 {
			return p // already the method, one space and the rest
		}
		p = rest
	}
	return r.Method + " " + p
}

// Wrap returns next guarded by idempotency keys for Config.Methods.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(m.cfg.Methods, r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		if m.passUnguarded(w, r, next) {
			return
		}
		m.serve(w, r, m.runHandler(next))
	})
}

func (m *Middleware) report(r *http.Request, kind Kind) {
	if m.cfg.OnAnswer != nil {
		m.cfg.OnAnswer(r, kind)
	}
}

// attempt is the one step in which Wrap and Batched differ: it runs a
// guarded request through the keeper once the middleware's checks passed
// and no cached outcome answered it. Wrap's runs the handler in Keeper.Do,
// Batched's the decoded item through a Batcher. sent is the answer made in
// this exchange: the key's first outcome (err nil, not replayed), or an
// answer not stored (errInvalid, errHandlerFailed), sent as it is.
type attempt func(r *http.Request, key idem.Key, fp, body []byte) (res idem.Result, sent answer, err error)

// answer is a response made in this exchange, with every header it set.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, try attempt) {
	// The key is checked before the body is read: a request without one is
	// rejected, never run (and its body never buffered).
	vals := r.Header.Values(HeaderKey)
	if len(vals) == 0 {
		m.answer(w, r, idem.ErrKeyMissing)
		return
	}
	if len(vals) > 1 {
		m.report(r, KindInvalidKey)
		Problem{Status: http.StatusBadRequest, Code: CodeKeyInvalid, Detail: "Idempotency-Key was sent more than once"}.Write(w)
		return
	}
	clientKey, err := idem.ParseKey(vals[0])
	if err != nil {
		m.answer(w, r, err)
		return
	}
	scope := m.cfg.Scope(r)
	if scope == "" {
		m.answer(w, r, errors.New("idemhttp: Config.Scope returned an empty scope"))
		return
	}
	body, ok := m.readBody(w, r)
	if !ok {
		return
	}
	key := idem.Key{Scope: scope, Operation: m.cfg.Operation(r), Key: clientKey}
	kcfg := m.keeper.Config()

	// A replay whose bytes equal those of a request already matched to the
	// stored outcome needs no canonical JSON: equal bytes canonicalize
	// equally. This skips most of a cached replay's cost. raw names the
	// method, the path and the body only while the method has no space
	// (every valid method): otherwise the cache is not used.
	raw := jsonfp.Sum(body, r.Method, " ", r.URL.Path)
	var cached *entry
	cacheable := strings.IndexByte(r.Method, ' ') < 0
	if cacheable {
		cached = m.cache.get(key, kcfg.Clock())
	}
	if cached != nil && cached.raw == raw {
		m.report(r, KindReplayed)
		m.writeReplay(w, cached.status, cached.header, cached.body)
		return
	}

	// The fingerprint holds the concrete path, the operation the pattern: a
	// key reused on another resource of the same route is caught as reuse.
	fp, err := m.fingerprint(r, body, &raw)
	if err != nil {
		m.answer(w, r, idem.ErrInvalidBody)
		return
	}
	if e := cached; e != nil {
		if !bytes.Equal(e.fp, fp) {
			m.answer(w, r, idem.ErrKeyReused)
			return
		}
		m.report(r, KindReplayed)
		m.writeReplay(w, e.status, e.header, e.body)
		return
	}

	res, sent, err := try(r, key, fp, body)
	switch {
	case errors.Is(err, http.ErrAbortHandler):
		// The handler asked net/http to abort the response (a panic with
		// http.ErrAbortHandler): everything rolled back, and the abort goes
		// on to the server, which drops the connection without logging.
		panic(http.ErrAbortHandler)
	case err == nil && !res.Replayed:
		m.report(r, KindFirst)
		m.writeFirst(w, sent.status, sent.header, sent.body)
		if cacheable {
			m.cacheResult(key, fp, raw, res)
		}
	case err == nil:
		m.report(r, KindReplayed)
		m.writeReplay(w, res.Status, res.Header, res.Body) // it sends only the allow-listed headers
		if cacheable {
			m.cacheResult(key, fp, raw, res)
		}
	case errors.Is(err, errInvalid):
		m.report(r, KindInvalid)
		m.writeFirst(w, sent.status, sent.header, sent.body)
	case errors.Is(err, errHandlerFailed):
		m.report(r, KindHandlerError)
		if sent.status == http.StatusServiceUnavailable && sent.header.Get("Retry-After") == "" {
			sent.header.Set("Retry-After", m.retryAfter)
		}
		m.writeFirst(w, sent.status, sent.header, sent.body)
	default:
		// The keeper's refusals and faults, and a handler's panic: a bug the
		// keeper recovered, rolled back (the key is free again) and logged
		// with the key and the stack; the client gets a 500 and its retry
		// runs the handler again.
		m.answer(w, r, err)
	}
}

// runHandler is Wrap's attempt: next runs in Keeper.Do, writing through
// the key's transaction, and its buffered answer is stored unless
// notStored says otherwise.
func (m *Middleware) runHandler(next http.Handler) attempt {
	return func(r *http.Request, key idem.Key, fp, body []byte) (idem.Result, answer, error) {
		var sent answer
		res, err := m.keeper.Do(r.Context(), idem.Request{Key: key, Fingerprint: fp, StoreHeaders: m.replay, StoreBody: m.storeBody},
			func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
				rec := newRecorder(m.cfg.MaxResponseBytes)
				hr, g := m.handlerRequest(ctx, r, tx, key, body)
				next.ServeHTTP(rec, hr)
				if rec.tooLong {
					return idem.Outcome{}, errResponseTooLarge
				}
				status, header := rec.result()
				sent = answer{status: status, header: header, body: rec.body}
				if err := notStored(status, g.invalid.Load()); err != nil {
					return idem.Outcome{}, err
				}
				return idem.Outcome{Status: status, Header: header, Body: rec.body}, nil
			})
		return res, sent, err
	}
}

const reusedDetail = "this Idempotency-Key was already used with a different request (method, path or body)"

var (
	errHandlerFailed = errors.New("idemhttp: handler answered 5xx")
	errInvalid       = errors.New("idemhttp: handler refused the request as invalid")
)

// notStored is the one rule of what becomes of a handler's answer: nil when
// it is the key's outcome, to store and replay; otherwise why it is not,
// and then everything the handler wrote rolls back, the answer is sent as
// the handler made it, and the key stays free for the next request.
//
//   - 5xx: a transient fault; a retry runs the handler again.
//   - 4xx of a request the handler marked invalid (MarkInvalid): refused
//     by validation before any work; the corrected request may reuse the
//     key.
//   - anything else, business refusals (422) included: the outcome.
//
// A marked request answered with anything but 4xx contradicts itself and
// is treated as a fault of the handler (answered 500).
func notStored(status int, invalid bool) error {
	switch {
	case status >= 500:
		return errHandlerFailed
	case invalid && status >= 400:
		return errInvalid
	case invalid:
		return fmt.Errorf("idemhttp: handler marked the request invalid (MarkInvalid) but answered %d, not 4xx", status)
	}
	return nil
}

// handlerRequest is r as the guarded handler sees it, and its guard: the
// context carries the guard (the transaction, the key, the handler's
// MarkInvalid), and the body, already read, can be read again.
func (m *Middleware) handlerRequest(ctx context.Context, r *http.Request, tx driver.Tx, key idem.Key, body []byte) (*http.Request, *guard) {
	gc := &guardCtx{Context: ctx}
	gc.g.tx, gc.g.key = tx, key
	r2 := r.WithContext(gc)
	r2.Body = newBodyReader(body)
	r2.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body), nil }
	r2.ContentLength = int64(len(body))
	return r2, &gc.g
}

// bodyReader is io.NopCloser(bytes.NewReader(b)) in one allocation.
type bodyReader struct{ bytes.Reader }

func newBodyReader(b []byte) *bodyReader {
	r := new(bodyReader)
	r.Reset(b)
	return r
}

func (*bodyReader) Close() error { return nil }

// readBody reads the whole body, bounded by MaxBodyBytes; on failure it has
// answered and returns false.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := func() ([]byte, bool) {
		m.report(r, KindBodyTooLarge)
		Problem{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
			Detail: fmt.Sprintf("the body is larger than %d bytes", m.cfg.MaxBodyBytes)}.Write(w)
		return nil, false
	}
	if r.ContentLength > m.cfg.MaxBodyBytes {
		return tooLarge()
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge()
		}
		m.report(r, KindInvalidBody)
		Problem{Status: http.StatusBadRequest, Code: CodeInvalidBody, Detail: "the body could not be read"}.Write(w)
		return nil, false
	}
	return body, true
}

// writeFirst sends a response the handler just made, with every header it
// set: it is the first answer, not a replay.
func (m *Middleware) writeFirst(w http.ResponseWriter, status int, header http.Header, body []byte) {
	dst := w.Header()
	for k, vs := range header {
		dst[k] = vs
	}
	// A handler that set the right length already (writeJSON does) keeps
	// its value, which is the one Set would make.
	if vs := dst["Content-Length"]; len(vs) != 1 || !isLength(vs[0], len(body)) {
		dst.Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// isLength reports whether v is n in decimal as strconv.Itoa writes it.
func isLength(v string, n int) bool {
	m, err := strconv.Atoi(v)
	return err == nil && m == n && (v == "0" || '1' <= v[0] && v[0] <= '9')
}

// writeReplay sends a stored outcome, with only its allow-listed headers
// (filtered when stored, and again here in case the list shrank since).
func (m *Middleware) writeReplay(w http.ResponseWriter, status int, header http.Header, body []byte) {
	dst := w.Header()
	for _, name := range m.replay {
		if vs := header[name]; len(vs) > 0 {
			dst[name] = vs // never written to: a stored header is immutable
		}
	}
	dst[HeaderReplayed] = replayedTrue
	dst["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

var replayedTrue = []string{"true"}

// cacheResult caches the keeper's answer, a first outcome or a replay
// read from the database: the result says when its record expires, so no
// second read is needed. A first arrival's header is the whole answer's
// and its body is redacted as stored (RedactFields): the cache keeps what
// the database keeps.
func (m *Middleware) cacheResult(key idem.Key, fp []byte, raw [sha256.Size]byte, res idem.Result) {
	if res.ExpiresAt.IsZero() {
		return
	}
	if !res.Replayed && m.storeBody != nil {
		// The cache answers replays: it keeps what was stored.
		body, err := m.storeBody(res.Body)
		if err != nil {
			return
		}
		res.Body = body
	}
	m.cache.put(&entry{key: key, fp: fp, raw: raw, status: res.Status, header: idem.KeepHeaders(res.Header, m.replay), body: res.Body, expires: res.ExpiresAt})
}

// rawHash is SHA-256 over a request's method, path and body bytes as sent,
// with their lengths framed so no two requests share an encoding
// (BytesFingerprint, FormFingerprint).
func rawHash(method, path string, body []byte) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(method), []byte(path), body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// answer answers err with ProblemFor's problem, reports its kind and logs
// an unexpected one. A guarded request's client reads the middleware's own
// words for the database and for a fault.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, err error) {
	p := ProblemFor(err, m.cfg.RetryAfter)
	var kind Kind
	switch p.Code {
	case CodeKeyMissing:
		kind = KindMissingKey
	case CodeKeyInvalid:
		kind = KindInvalidKey
	case CodeInvalidBody:
		kind = KindInvalidBody
	case CodeKeyReused:
		kind = KindReused
	case CodeInFlight:
		kind = KindInFlight
	case CodeKeyExpired:
		kind = KindExpired
	case CodeUnavailable:
		kind = KindUnavailable
	case CodeAnswerForgotten:
		kind = KindForgotten
	default:
		// The keeper returns no not_found, so anything else is a fault:
		// 500, nothing stored.
		kind = KindError
		if !errors.Is(err, idem.ErrPanicked) {
			m.cfg.Logger.ErrorContext(r.Context(), "idemhttp: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		p = Problem{Status: http.StatusInternalServerError, Code: CodeInternal, Detail: "the request failed; nothing was stored"}
	}
	m.report(r, kind)
	p.Write(w)
}
