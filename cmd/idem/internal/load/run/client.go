package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is the set of live base URLs requests are spread over. The chaos
// supervisor removes a server before it kills it and adds it back once it
// serves again. Safe for concurrent use.
type Pool struct {
	mu   sync.Mutex
	urls []string
	next atomic.Uint64
}

// NewPool returns a pool of urls.
func NewPool(urls ...string) *Pool {
	p := &Pool{}
	for _, u := range urls {
		p.Add(u)
	}
	return p
}

// Add puts u in the pool.
func (p *Pool) Add(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u = strings.TrimRight(u, "/")
	if !slices.Contains(p.urls, u) {
		p.urls = append(p.urls, u)
	}
}

// Remove takes u out of the pool.
func (p *Pool) Remove(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.urls = slices.DeleteFunc(p.urls, func(x string) bool { return x == u })
}

// URLs returns the live URLs.
func (p *Pool) URLs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.urls)
}

// pick returns the next live URL, round robin; false when none is live.
func (p *Pool) pick() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.urls) == 0 {
		return "", false
	}
	return p.urls[p.next.Add(1)%uint64(len(p.urls))], true
}

// Answer is one final HTTP answer.
type Answer struct {
	Status   int
	Body     []byte
	Replayed bool
}

// Client sends requests with bounded retries and records what happened.
type Client struct {
	http   *http.Client
	pool   *Pool
	apiKey string
	cfg    Config
	st     *Stats
	// whKey signs webhook deliveries (nil: the run sends none).
	whKey []byte

	rmu sync.Mutex
	rnd *rand.Rand
}

// NewClient returns a client for cfg that sends to pool's targets and
// records into st.
func NewClient(cfg Config, pool *Pool, st *Stats, seed uint64) *Client {
	var whKey []byte
	if cfg.WebhookSecret != "" {
		whKey, _ = webhookKey(cfg.WebhookSecret) // validated with the config
	}
	tr := &http.Transport{
		MaxIdleConns:        4 * cfg.Concurrency * cfg.Burst,
		MaxIdleConnsPerHost: 2 * cfg.Concurrency * cfg.Burst,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{http: &http.Client{Transport: tr, Timeout: cfg.Timeout}, pool: pool,
		apiKey: cfg.APIKey, cfg: cfg, st: st, whKey: whKey, rnd: rand.New(rand.NewPCG(seed, 11))}
}

// WithStats returns a client that shares c's connections and settings and
// records into st, with its own random source seeded by seed.
func (c *Client) WithStats(st *Stats, seed uint64) *Client {
	return &Client{http: c.http, pool: c.pool, apiKey: c.apiKey, cfg: c.cfg, st: st, whKey: c.whKey,
		rnd: rand.New(rand.NewPCG(seed, 11))}
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// errNoTarget is returned while every server is down.
var errNoTarget = errors.New("load: no live target")

// exchange is one HTTP round trip's raw result.
type exchange struct {
	status     int
	body       []byte
	header     http.Header
	retryAfter time.Duration
}

// roundTrip sends one request with hdr (nil for a GET: then only the API
// key) to the next live target.
func (c *Client) roundTrip(ctx context.Context, method, path string, hdr http.Header, body []byte) (exchange, error) {
	base, ok := c.pool.pick()
	if !ok {
		return exchange{}, errNoTarget
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return exchange{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if hdr == nil && c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return exchange{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	if err != nil {
		return exchange{}, err
	}
	if len(b) > maxBodyBytes {
		return exchange{}, fmt.Errorf("load: %s %s: answer larger than %d bytes", method, path, maxBodyBytes)
	}
	ex := exchange{status: resp.StatusCode, body: b, header: resp.Header}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		ex.retryAfter = time.Duration(s) * time.Second
	}
	return ex, nil
}

// retryable reports whether an answer is transient: the same key is sent
// again. Everything else (2xx, and 4xx but 408, 409, 425, 429) is final.
func retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return status >= 500
}

// Send sends one copy of o, retrying transient failures with the same key
// and body. It returns false when the retries ran out (or ctx ended)
// without a final answer.
func (c *Client) Send(ctx context.Context, o *Op) (Answer, bool) {
	body := []byte(o.Body)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			c.st.Retries.Add(1)
		}
		start := time.Now()
		ex, err := c.roundTrip(ctx, http.MethodPost, o.Path, c.headers(o), body)
		elapsed := time.Since(start)
		var wait time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return Answer{}, false
			}
			if !errors.Is(err, errNoTarget) {
				c.st.Requests.Add(1)
				c.st.observe(outcomeError, elapsed)
			}
		case retryable(ex.status):
			c.st.Requests.Add(1)
			if ex.status == http.StatusConflict {
				c.st.observe(outcomeInFlight, elapsed)
			} else {
				c.st.observe(outcomeUnavailable, elapsed)
			}
			if ex.status == http.StatusInternalServerError {
				// The contract never answers 500 to a duplicate, and a
				// 500 for a first copy is a bug the run must not hide.
				c.st.Violate(Violation{Check: "internal_error", Key: o.Key, ID: o.ID,
					Detail: fmt.Sprintf("500: %s", Truncate(ex.body))})
			}
			wait = min(ex.retryAfter, c.cfg.BackoffMax)
		default:
			c.st.Requests.Add(1)
			a := Answer{Status: ex.status, Body: ex.body, Replayed: ex.header.Get("Idempotent-Replayed") == "true"}
			switch {
			case a.Replayed:
				c.st.Replays.Add(1)
				c.st.observe(outcomeReplayed, elapsed)
			case a.Status < 300:
				c.st.observe(outcomeFirst, elapsed)
			default:
				c.st.observe(outcomeRefused, elapsed)
			}
			return a, true
		}
		if attempt >= c.cfg.Retries {
			return Answer{}, false
		}
		if wait == 0 {
			wait = c.backoff(attempt)
		}
		select {
		case <-ctx.Done():
			return Answer{}, false
		case <-time.After(wait):
		}
	}
}

// headers are one copy's request headers. An API operation carries its
// Idempotency-Key and the API key. A webhook delivery carries neither: it
// is signed as its sender would sign a redelivery, under a timestamp of its
// own (each copy and retry steps one second further back, within the
// spec's tolerance), so no two copies in a row share a signature and only
// the stable webhook-id can make them one.
func (c *Client) headers(o *Op) http.Header {
	if o.Kind == KindWebhook {
		o.mu.Lock()
		o.attempts++
		n := o.attempts
		o.mu.Unlock()
		ts := time.Now().Add(-time.Duration(n%redeliverySpread) * time.Second)
		return signStandard(c.whKey, o.Key, ts, []byte(o.Body))
	}
	h := http.Header{}
	h.Set("Idempotency-Key", o.Key)
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
	return h
}

// backoff is exponential with full jitter, from BackoffMax/40 up to
// BackoffMax.
func (c *Client) backoff(attempt int) time.Duration {
	base := max(c.cfg.BackoffMax/40, time.Millisecond)
	ceil := min(base<<min(attempt, 20), c.cfg.BackoffMax)
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return time.Duration(c.rnd.Int64N(int64(ceil))) + time.Millisecond
}

// Get reads path, retrying transport errors and 5xx; a 2xx or 4xx answer is
// returned as it is.
func (c *Client) Get(ctx context.Context, path string) (int, []byte, error) {
	var lastErr error
	for attempt := 0; attempt <= c.cfg.Retries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, nil, ctx.Err()
			case <-time.After(c.backoff(attempt)):
			}
		}
		ex, err := c.roundTrip(ctx, http.MethodGet, path, nil, nil)
		if err != nil {
			lastErr = err
			continue
		}
		if ex.status >= 500 || ex.status == http.StatusTooManyRequests {
			lastErr = fmt.Errorf("GET %s: %d %s", path, ex.status, Truncate(ex.body))
			continue
		}
		return ex.status, ex.body, nil
	}
	return 0, nil, fmt.Errorf("load: GET %s: retries exhausted: %w", path, lastErr)
}

// Truncate shortens a body for a message.
func Truncate(b []byte) string {
	const n = 300
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
