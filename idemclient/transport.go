package idemclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"time"
)

// HeaderKey and HeaderReplayed are the headers of idem's contract.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// MaxKeyLength bounds a key, as idem's server does.
const MaxKeyLength = 255

// Policy is the retry policy of a Transport. The zero Policy is the
// defaults.
type Policy struct {
	// MaxAttempts bounds the attempts of one request, the first included:
	// the retry budget. Default 5; bound 1..1000 (1: never retry).
	MaxAttempts int
	// BaseDelay bounds the first backoff; the bound doubles with each
	// retry. Default 100ms; bound 1ms..1m.
	BaseDelay time.Duration
	// MaxDelay caps every wait, a Retry-After included. Default 5s; bound
	// BaseDelay..1h.
	MaxDelay time.Duration
	// AttemptTimeout bounds one attempt, its answer's headers included; an
	// attempt that runs out is a transport error and is retried. Default
	// 0: only the request's context bounds it; bound 0..1h.
	AttemptTimeout time.Duration
	// NewKey makes the Idempotency-Key of a request that needs one (POST,
	// PATCH) and has none. It is called once per request, never per
	// attempt. Default: a UUIDv7. A key derived from the caller's own
	// record (an order id) survives a crash of the caller; see WithKey.
	// "" sends the request without a key (a route that takes none); such a
	// request is sent once, and again only after a dial error.
	NewKey func(*http.Request) (string, error)
	// RequireReplayableBody refuses, before sending, a request whose body
	// cannot be sent again (no GetBody). Default false: such a request is
	// sent once and never retried.
	RequireReplayableBody bool

	// Now, Sleep and Rand replace the clock, the wait and the jitter's
	// random source (tests). Rand returns a number in [0, n).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func(n int64) int64
	// OnAttempt, when set, is called after every attempt, from the
	// goroutine of the request.
	OnAttempt func(Attempt)
}

// Attempt is what one attempt got, for Policy.OnAttempt.
type Attempt struct {
	Request *http.Request
	N       int           // 1 for the first attempt
	Status  int           // 0 after a transport error
	Header  http.Header   // the answer's headers; nil after a transport error
	Err     error         // the transport error, if any
	Elapsed time.Duration // on Policy.Now's clock
	Final   bool          // the answer is returned (or the error is)
}

const (
	defaultMaxAttempts = 5
	defaultBaseDelay   = 100 * time.Millisecond
	defaultMaxDelay    = 5 * time.Second
	// drainBytes bounds what is read of a retried answer's body, to find
	// its problem code and to let the connection be reused.
	drainBytes = 64 << 10
)

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = defaultMaxAttempts
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = defaultBaseDelay
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = max(defaultMaxDelay, p.BaseDelay)
	}
	if p.NewKey == nil {
		p.NewKey = func(*http.Request) (string, error) { return NewKey() }
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	if p.Rand == nil {
		p.Rand = rand.Int64N
	}
	return p
}

func (p Policy) validate() error {
	switch {
	case p.MaxAttempts < 1 || p.MaxAttempts > 1000:
		return badInput("MaxAttempts %d is outside 1..1000", p.MaxAttempts)
	case p.BaseDelay < time.Millisecond || p.BaseDelay > time.Minute:
		return badInput("BaseDelay %s is outside 1ms..1m", p.BaseDelay)
	case p.MaxDelay < p.BaseDelay || p.MaxDelay > time.Hour:
		return badInput("MaxDelay %s is outside BaseDelay (%s)..1h", p.MaxDelay, p.BaseDelay)
	case p.AttemptTimeout < 0 || p.AttemptTimeout > time.Hour:
		return badInput("AttemptTimeout %s is outside 0..1h", p.AttemptTimeout)
	}
	return nil
}

// Transport is an http.RoundTripper that keeps the client's half of the
// Idempotency-Key contract: a request that needs a key (POST, PATCH) gets
// one when it has none, the same key on every attempt, and what is safe to
// retry is retried (docs/clients.md, "Retry rules"):
//
//   - a transport error, before or after the request was written: the key
//     makes a second arrival of a processed request a replay;
//   - 409 (in flight; not idempotency_key_expired, which is final: the
//     work was done and its answer is no longer kept), 425, 429, 502,
//     503 and 504, after Retry-After
//     (seconds or an HTTP date) when the answer has one, else after an
//     exponential backoff with full jitter; every wait capped at MaxDelay;
//   - within MaxAttempts and the request's context: a wait that would end
//     past the context's deadline is not started;
//   - but a POST or PATCH sent without a key (NewKey returned "") is sent
//     once, and again only when the connection could not be made (a dial
//     error: nothing was written): without a key a second arrival is a
//     second operation, not a replay. A Standard Webhooks delivery (a
//     webhook-id header) counts as keyed: its receiver dedupes by that id.
//
// Every other answer is final and returned as it is: 2xx, a 4xx refusal
// (400, 422 and the others), a 500 (idem stores nothing for its own 500,
// and a stored one replays the same). The body is sent again from GetBody
// (http.NewRequest sets it for byte and string readers); a request whose
// body cannot be sent again is sent once. Safe for concurrent use.
type Transport struct {
	base http.RoundTripper
	p    Policy
}

// NewTransport returns a Transport sending each attempt through base
// (nil: http.DefaultTransport) under policy p.
func NewTransport(base http.RoundTripper, p Policy) (*Transport, error) {
	p = p.withDefaults()
	if err := p.validate(); err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{base: base, p: p}, nil
}

// needsKey reports whether a request of method must carry a key: the
// methods HTTP does not define as idempotent.
func needsKey(method string) bool {
	return method == http.MethodPost || method == http.MethodPatch
}

// RoundTrip sends req, retrying as the Transport's doc says. It returns
// the final answer, or an error: ErrBadInput (nothing sent), a
// *BudgetError (ErrBudgetExhausted), the context's error, or a final
// transport error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	r, err := t.prepare(req, replayable)
	if err != nil {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body, errors included
		}
		return nil, err
	}
	maxAttempts := t.p.MaxAttempts
	if !replayable {
		maxAttempts = 1
	}
	// A POST or PATCH without a key (NewKey gave "") has no replay to
	// fall back on: a second arrival would do the work again. It is sent
	// again only when its attempt never reached the server.
	// A Standard Webhooks delivery is keyed by its webhook-id, which the
	// receiver deduplicates by: it is retried as a keyed request is.
	keyless := needsKey(r.Method) && r.Header.Get(HeaderKey) == "" && r.Header.Get("Webhook-Id") == ""
	var last lastAnswer
	for n := 1; ; n++ {
		// Each attempt is a request of its own: a transport may still
		// hold the previous one (its body, closed in another goroutine)
		// after RoundTrip returned.
		ra := r
		if n > 1 {
			ra = r.Clone(ctx)
			if ra.Body, err = bodyAgain(req); err != nil {
				return nil, err
			}
		}
		start := t.p.Now()
		resp, err := t.attempt(ra)
		a := Attempt{Request: ra, N: n, Err: err, Elapsed: t.p.Now().Sub(start)}
		if resp != nil {
			a.Status, a.Header = resp.StatusCode, resp.Header
		}
		retry := t.retryable(ctx, resp, err)
		if keyless && !notSent(err) {
			retry = false
		}
		if !retry || n >= maxAttempts {
			a.Final = true
		}
		if t.p.OnAttempt != nil {
			t.p.OnAttempt(a)
		}
		switch {
		case !retry && err != nil:
			if ctx.Err() != nil {
				return nil, fmt.Errorf("idemclient: %s %s: %w", req.Method, req.URL.Path, ctx.Err())
			}
			return nil, err
		case !retry:
			return resp, nil
		case !replayable && err != nil:
			return nil, err
		case !replayable:
			// Sent once because it cannot be sent again: the answer is
			// the caller's to read.
			return resp, nil
		}
		wait := time.Duration(-1)
		if resp != nil {
			wait = t.retryAfter(resp.Header.Get("Retry-After"))
			last = readLast(resp)
		} else {
			last = lastAnswer{err: err}
		}
		if n >= maxAttempts {
			return nil, &BudgetError{Attempts: n, Status: last.status, Code: last.code, Err: last.err}
		}
		if wait < 0 {
			wait = t.backoff(n)
		}
		if dl, ok := ctx.Deadline(); ok && dl.Sub(t.p.Now()) < wait {
			return nil, fmt.Errorf("idemclient: %s %s: waiting %s before attempt %d would pass the deadline: %w",
				req.Method, req.URL.Path, wait, n+1, context.DeadlineExceeded)
		}
		if err := t.p.Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("idemclient: %s %s: waiting before attempt %d: %w", req.Method, req.URL.Path, n+1, err)
		}
	}
}

// prepare checks req and returns the copy every attempt sends, with its
// key: nothing is sent when it fails.
func (t *Transport) prepare(req *http.Request, replayable bool) (*http.Request, error) {
	if req.URL == nil || req.URL.Scheme == "" || req.URL.Host == "" {
		return nil, badInput("%s %v: the URL has no scheme and host", req.Method, req.URL)
	}
	if !replayable && t.p.RequireReplayableBody {
		return nil, fmt.Errorf("%w: %s %s", ErrBodyNotReplayable, req.Method, req.URL.Path)
	}
	r := req.Clone(req.Context())
	r.Body = req.Body
	key := req.Header.Get(HeaderKey)
	if key == "" && needsKey(req.Method) {
		k, err := t.p.NewKey(req)
		if err != nil {
			return nil, badInput("%s %s: making the Idempotency-Key: %v", req.Method, req.URL.Path, err)
		}
		if k != "" {
			key = k
			r.Header.Set(HeaderKey, key)
		}
	}
	if key != "" {
		if err := CheckKey(key); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// attempt sends r once, bounded by AttemptTimeout.
func (t *Transport) attempt(r *http.Request) (*http.Response, error) {
	if t.p.AttemptTimeout == 0 {
		return t.base.RoundTrip(r)
	}
	ctx, cancel := context.WithTimeout(r.Context(), t.p.AttemptTimeout)
	resp, err := t.base.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	// The answer's body is read after RoundTrip returns: the attempt's
	// context ends when it is closed.
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// retryable reports whether the attempt that got resp or err is sent
// again. The request's context ending makes nothing retryable.
func (t *Transport) retryable(ctx context.Context, resp *http.Response, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		var cv *tls.CertificateVerificationError
		return !errors.As(err, &cv) && !errors.Is(err, ErrBadInput)
	}
	return RetryableStatus(resp.StatusCode) && !keyExpired(resp)
}

// keyExpired reports whether resp is idem's 409 idempotency_key_expired,
// which every retry would get again. It reads the body's first drainBytes
// to find the problem's code and puts them back in front of the rest, so
// that a final answer reaches the caller whole.
func keyExpired(resp *http.Response) bool {
	if resp.StatusCode != http.StatusConflict || resp.Body == nil {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, drainBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return err == nil && problemCode(resp.Header, head) == string(ErrIdempotencyKeyExpired)
}

// notSent reports whether the attempt that failed with err never reached
// the server: the connection could not be made (a dial error, DNS
// included), so nothing of the request was written. An answer, or any
// error once connected, may follow work the server did.
func notSent(err error) bool {
	var op *net.OpError
	return err != nil && errors.As(err, &op) && op.Op == "dial"
}

// RetryableStatus reports whether an answer of this status is sent again:
// 409 (idem's request_in_flight), 425, 429, 502, 503, 504. A 409 whose
// problem code is idempotency_key_expired is final all the same; the
// Transport reads the code.
func RetryableStatus(status int) bool {
	switch status {
	case http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryAfter is the wait a Retry-After value asks for, capped at
// MaxDelay; -1 when there is none or it is neither seconds nor a date.
func (t *Transport) retryAfter(v string) time.Duration {
	if v == "" {
		return -1
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return -1
		}
		if s > int64(t.p.MaxDelay/time.Second) {
			return t.p.MaxDelay
		}
		return time.Duration(s) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return -1
	}
	return min(max(at.Sub(t.p.Now()), 0), t.p.MaxDelay)
}

// backoff is the full-jitter wait after attempt n: uniform in
// [0, min(MaxDelay, BaseDelay·2^(n-1))].
func (t *Transport) backoff(n int) time.Duration {
	bound := t.p.MaxDelay
	if n-1 < 40 {
		bound = min(t.p.BaseDelay<<(n-1), t.p.MaxDelay)
	}
	return time.Duration(t.p.Rand(int64(bound) + 1))
}

// bodyAgain is req's body for another attempt.
func bodyAgain(req *http.Request) (io.ReadCloser, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req.Body, nil
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("idemclient: %s %s: the body for another attempt: %w", req.Method, req.URL.Path, err)
	}
	return b, nil
}

// lastAnswer is what the last retried attempt got, for a BudgetError.
type lastAnswer struct {
	status int
	code   string
	err    error
}

// readLast reads (bounded) and closes a retried answer, keeping its
// problem code.
func readLast(resp *http.Response) lastAnswer {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, drainBytes))
	return lastAnswer{status: resp.StatusCode, code: problemCode(resp.Header, b)}
}

// problemCode is the code member of a problem+json body ("" if none).
func problemCode(h http.Header, body []byte) string {
	if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); mt != "application/problem+json" && mt != "application/json" {
		return ""
	}
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
