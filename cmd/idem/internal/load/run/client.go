package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/idemclient"
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

// Client sends requests through idemclient's Transport, which keeps each
// copy's key and retries what is safe to retry, and records every attempt
// into its Stats. Its base transport spreads the attempts over the pool.
type Client struct {
	http   *http.Client
	conns  *http.Transport
	pool   *Pool
	apiKey string
	cfg    Config
	st     *Stats
	// whKey signs webhook deliveries (nil: the run sends none).
	whKey []byte
}

// NewClient returns a client for cfg that sends to pool's targets and
// records into st; seed drives the backoff's jitter.
func NewClient(cfg Config, pool *Pool, st *Stats, seed uint64) *Client {
	var whKey []byte
	if cfg.WebhookSecret != "" {
		whKey, _ = webhookKey(cfg.WebhookSecret) // validated with the config
	}
	conns := &http.Transport{
		MaxIdleConns:        4 * cfg.Concurrency * cfg.Burst,
		MaxIdleConnsPerHost: 2 * cfg.Concurrency * cfg.Burst,
		IdleConnTimeout:     30 * time.Second,
	}
	c := &Client{conns: conns, pool: pool, apiKey: cfg.APIKey, cfg: cfg, st: st, whKey: whKey}
	var rmu sync.Mutex
	rnd := rand.New(rand.NewPCG(seed, 11))
	tr, err := idemclient.NewTransport(&targets{c: c}, idemclient.Policy{
		MaxAttempts:    cfg.Retries + 1,
		BaseDelay:      max(cfg.BackoffMax/40, time.Millisecond),
		MaxDelay:       cfg.BackoffMax,
		AttemptTimeout: cfg.Timeout,
		// Every operation carries its own key, and a webhook delivery none.
		NewKey: func(*http.Request) (string, error) { return "", nil },
		Rand: func(n int64) int64 {
			rmu.Lock()
			defer rmu.Unlock()
			return rnd.Int64N(n)
		},
		OnAttempt: observeAttempt,
	})
	if err != nil {
		panic(fmt.Sprintf("load: a validated config made a bad retry policy: %v", err))
	}
	c.http = &http.Client{Transport: tr}
	return c
}

// WithStats returns a client that shares c's connections and settings and
// records into st.
func (c *Client) WithStats(st *Stats, seed uint64) *Client {
	cc := *c
	cc.st = st
	return &cc
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.conns.CloseIdleConnections() }

// errNoTarget is returned while every server is down.
var errNoTarget = errors.New("load: no live target")

// anyTarget is the host of the URLs the client builds: targets replaces
// it with a live target's on each attempt.
const anyTarget = "http://target.invalid"

// sending is what a Send's attempts record into, carried by its context.
type sending struct {
	c *Client
	o *Op
}

type sendingKey struct{}

// targets is the Transport's base: each attempt goes to the next live
// target, and a webhook delivery is signed again for each.
type targets struct{ c *Client }

func (t *targets) RoundTrip(r *http.Request) (*http.Response, error) {
	base, ok := t.c.pool.pick()
	if !ok {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, errNoTarget
	}
	u, err := url.Parse(base + r.URL.RequestURI())
	if err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, err
	}
	a := r.Clone(r.Context())
	a.URL, a.Host = u, u.Host
	if s, _ := r.Context().Value(sendingKey{}).(*sending); s != nil && s.o.Kind == KindWebhook {
		for k, v := range t.c.headers(s.o) {
			a.Header[k] = v
		}
	}
	return t.c.conns.RoundTrip(a)
}

// observeAttempt records one attempt of a Send into its client's stats.
func observeAttempt(a idemclient.Attempt) {
	s, _ := a.Request.Context().Value(sendingKey{}).(*sending)
	if s == nil {
		return // a verification's read
	}
	st := s.c.st
	if a.N > 1 {
		st.Retries.Add(1)
	}
	// kept: whether the attempt counts for the fault figures; failed:
	// whether the service was unavailable to it.
	kept, failed := true, false
	switch {
	case a.Err != nil:
		if errors.Is(a.Err, errNoTarget) || a.Request.Context().Err() != nil {
			return
		}
		st.observe(outcomeError, a.Elapsed)
		failed = true
	case a.Status == http.StatusConflict:
		st.observe(outcomeInFlight, a.Elapsed)
		kept = false
	case idemclient.RetryableStatus(a.Status) || a.Status == http.StatusInternalServerError:
		st.observe(outcomeUnavailable, a.Elapsed)
		failed = true
	case a.Header.Get(idemclient.HeaderReplayed) == "true":
		st.Replays.Add(1)
		st.observe(outcomeReplayed, a.Elapsed)
	case a.Status < 300:
		st.observe(outcomeFirst, a.Elapsed)
	default:
		st.observe(outcomeRefused, a.Elapsed)
	}
	if kept {
		end := time.Now()
		st.mark(end.Add(-a.Elapsed), end, failed)
	}
	st.Requests.Add(1)
}

// Send sends one copy of o; the Transport retries transient failures with
// the same key and body. It returns false when the retries ran out (or
// ctx ended) without a final answer, and for a 500, which the contract
// never answers to a duplicate: a violation the settle phase sends again.
func (c *Client) Send(ctx context.Context, o *Op) (Answer, bool) {
	ctx = context.WithValue(ctx, sendingKey{}, &sending{c: c, o: o})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, anyTarget+o.Path, strings.NewReader(o.Body))
	if err != nil {
		return Answer{}, false
	}
	req.Header.Set("Content-Type", "application/json")
	if o.Kind == KindWebhook {
		// A webhook delivery's key is its webhook-id, which idemclient's
		// Transport then retries by; targets signs each attempt.
		req.Header.Set("Webhook-Id", o.Key)
	} else {
		req.Header.Set(idemclient.HeaderKey, o.Key)
		if c.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+c.apiKey)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Answer{}, false
	}
	b, err := readAnswer(resp)
	if err != nil {
		return Answer{}, false
	}
	if resp.StatusCode == http.StatusInternalServerError {
		c.st.Violate(Violation{Check: "internal_error", Key: o.Key, ID: o.ID,
			Detail: fmt.Sprintf("500: %s", Truncate(b))})
		return Answer{}, false
	}
	return Answer{Status: resp.StatusCode, Body: b, Replayed: resp.Header.Get(idemclient.HeaderReplayed) == "true"}, true
}

// readAnswer reads and closes an answer's body, bounded.
func readAnswer(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBodyBytes {
		return nil, fmt.Errorf("load: %s %s: answer larger than %d bytes", resp.Request.Method, resp.Request.URL.Path, maxBodyBytes)
	}
	return b, nil
}

// headers are a webhook delivery's request headers. It carries no
// Idempotency-Key and no API key: it is signed as its sender would sign a
// redelivery, under a timestamp of its own (each copy and retry steps one
// second further back, within the spec's tolerance), so no two attempts in
// a row share a signature and only the stable webhook-id can make them
// one.
func (c *Client) headers(o *Op) http.Header {
	o.mu.Lock()
	o.attempts++
	n := o.attempts
	o.mu.Unlock()
	ts := time.Now().Add(-time.Duration(n%redeliverySpread) * time.Second)
	return signStandard(c.whKey, o.Key, ts, []byte(o.Body))
}

// Get reads path; the Transport retries transport errors, 409, 425, 429,
// 502, 503 and 504. Any other answer is returned as it is.
func (c *Client) Get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, anyTarget+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("load: GET %s: %w", path, err)
	}
	b, err := readAnswer(resp)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
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
