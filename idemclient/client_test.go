package idemclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemclient"
)

// recorder is a base transport that answers with answer and records
// every request it is sent, with its body.
type recorder struct {
	mu     sync.Mutex
	reqs   []*http.Request
	bodies []string
	answer func(n int, r *http.Request) *http.Response
}

func (rc *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	var b []byte
	if r.Body != nil {
		b, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, r)
	rc.bodies = append(rc.bodies, string(b))
	n := len(rc.reqs)
	rc.mu.Unlock()
	resp := rc.answer(n, r)
	resp.Request = r
	return resp, nil
}

func answer(status int, hdr map[string]string, body string) *http.Response {
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

// fakeClock is an injected clock whose sleeps advance it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (c *fakeClock) policy(p idemclient.Policy) idemclient.Policy {
	p.Now = func() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
	p.Sleep = func(ctx context.Context, d time.Duration) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.waits = append(c.waits, d)
		c.now = c.now.Add(d)
		return ctx.Err()
	}
	p.Rand = func(n int64) int64 { return n - 1 }
	return p
}

const problemJSON = "application/problem+json"

// TestBadInputSendsNothing: each bad input is an error wrapping
// ErrBadInput, and the base transport never sees a request.
func TestBadInputSendsNothing(t *testing.T) {
	t.Parallel()
	never := func(n int, r *http.Request) *http.Response {
		t.Errorf("a request was sent: %s %s", r.Method, r.URL)
		return answer(500, nil, "")
	}
	tests := []struct {
		name string
		run  func(base http.RoundTripper) error
	}{
		{"a base URL without a scheme", func(base http.RoundTripper) error {
			_, err := idemclient.New(idemclient.Config{BaseURL: "localhost:8080", Base: base})
			return err
		}},
		{"a base URL without a host", func(base http.RoundTripper) error {
			_, err := idemclient.New(idemclient.Config{BaseURL: "http://", Base: base})
			return err
		}},
		{"a negative budget", func(base http.RoundTripper) error {
			_, err := idemclient.New(idemclient.Config{BaseURL: "http://localhost:8080", Base: base,
				Policy: idemclient.Policy{MaxAttempts: -1}})
			return err
		}},
		{"a negative delay", func(base http.RoundTripper) error {
			_, err := idemclient.NewTransport(base, idemclient.Policy{BaseDelay: -time.Second})
			return err
		}},
		{"a key over 255 characters", func(base http.RoundTripper) error {
			c, err := idemclient.New(idemclient.Config{BaseURL: "http://localhost:8080", Base: base})
			if err != nil {
				return err
			}
			_, err = c.CreateTransfer(t.Context(), idemclient.TransferParams{DebitAccountID: "a", CreditAccountID: "b",
				Amount: 1, Currency: "EUR"}, idemclient.WithKey(strings.Repeat("k", 256)))
			return err
		}},
		{"a key over 255 characters on the round tripper", func(base http.RoundTripper) error {
			tr, err := idemclient.NewTransport(base, idemclient.Policy{})
			if err != nil {
				return err
			}
			req, _ := http.NewRequest("POST", "http://localhost:8080/v1/transfers", strings.NewReader("{}"))
			req.Header.Set(idemclient.HeaderKey, strings.Repeat("k", 256))
			_, err = (&http.Client{Transport: tr}).Do(req)
			return err
		}},
		{"a body that cannot be replayed where retries need it", func(base http.RoundTripper) error {
			tr, err := idemclient.NewTransport(base, idemclient.Policy{RequireReplayableBody: true})
			if err != nil {
				return err
			}
			req, _ := http.NewRequest("POST", "http://localhost:8080/v1/transfers", io.MultiReader(strings.NewReader("{}")))
			_, err = (&http.Client{Transport: tr}).Do(req)
			if !errors.Is(err, idemclient.ErrBodyNotReplayable) {
				t.Errorf("error %v; want ErrBodyNotReplayable", err)
			}
			return err
		}},
		{"an empty batch", func(base http.RoundTripper) error {
			c, err := idemclient.New(idemclient.Config{BaseURL: "http://localhost:8080", Base: base})
			if err != nil {
				return err
			}
			_, err = c.CreateTransfers(t.Context(), nil)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := &recorder{answer: never}
			err := tt.run(base)
			if !errors.Is(err, idemclient.ErrBadInput) {
				t.Fatalf("error %v; want one wrapping ErrBadInput", err)
			}
			if len(base.reqs) != 0 {
				t.Fatalf("%d requests sent", len(base.reqs))
			}
		})
	}
}

// TestTypedClientRetriesWithOneKey: a transfer answered 503 then 201
// replayed is one call, with one key on both attempts, the body sent twice
// byte for byte, the Retry-After waited and Replayed set.
func TestTypedClientRetriesWithOneKey(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	base := &recorder{answer: func(n int, r *http.Request) *http.Response {
		if n == 1 {
			return answer(503, map[string]string{"Retry-After": "2", "Content-Type": problemJSON},
				`{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable"}`)
		}
		return answer(201, map[string]string{"Idempotent-Replayed": "true", "Content-Type": "application/json"},
			`{"id":"t1","debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR","created_at":"2030-01-01T00:00:00Z"}`)
	}}
	c, err := idemclient.New(idemclient.Config{BaseURL: "http://localhost:8080/prefix/", APIKey: "secret", Base: base,
		Policy: clock.policy(idemclient.Policy{})})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.CreateTransfer(t.Context(), idemclient.TransferParams{DebitAccountID: "a", CreditAccountID: "b",
		Amount: 5, Currency: "EUR"}, idemclient.WithKey("order-42"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.ID != "t1" || tr.Amount != 5 || !tr.Replayed || tr.Status != 201 {
		t.Fatalf("transfer %+v", tr)
	}
	if len(base.reqs) != 2 {
		t.Fatalf("%d attempts; want 2", len(base.reqs))
	}
	for i, r := range base.reqs {
		if k := r.Header.Get(idemclient.HeaderKey); k != "order-42" {
			t.Errorf("attempt %d: key %q", i+1, k)
		}
		if r.URL.Path != "/prefix/v1/transfers" || r.Header.Get("Authorization") != "Bearer secret" {
			t.Errorf("attempt %d: %s %v", i+1, r.URL, r.Header)
		}
		if want := `{"debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR"}`; base.bodies[i] != want {
			t.Errorf("attempt %d: body %s; want %s", i+1, base.bodies[i], want)
		}
	}
	if len(clock.waits) != 1 || clock.waits[0] != 2*time.Second {
		t.Fatalf("waits %v; want [2s]", clock.waits)
	}
}

// TestProblemsMatchTheirCodes: a final refusal is a *Problem that
// errors.Is matches on its code, with Replayed from the header.
func TestProblemsMatchTheirCodes(t *testing.T) {
	t.Parallel()
	base := &recorder{answer: func(int, *http.Request) *http.Response {
		return answer(422, map[string]string{"Idempotent-Replayed": "true", "Content-Type": problemJSON},
			`{"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"too poor","code":"insufficient_funds"}`)
	}}
	c, err := idemclient.New(idemclient.Config{BaseURL: "http://localhost:8080", Base: base})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateTransfer(t.Context(), idemclient.TransferParams{DebitAccountID: "a", CreditAccountID: "b", Amount: 5, Currency: "EUR"})
	if !errors.Is(err, idemclient.ErrInsufficientFunds) || errors.Is(err, idemclient.ErrCurrencyMismatch) {
		t.Fatalf("error %v; want insufficient_funds only", err)
	}
	var p *idemclient.Problem
	if !errors.As(err, &p) || !p.Replayed || p.Status != 422 || p.Detail != "too poor" {
		t.Fatalf("problem %+v", p)
	}
	if len(base.reqs) != 1 || len(base.reqs[0].Header.Get(idemclient.HeaderKey)) != 36 {
		t.Fatalf("%d attempts, key %q", len(base.reqs), base.reqs[0].Header.Get(idemclient.HeaderKey))
	}
}

// TestKeyExpiredIsFinal: a 409 idempotency_key_expired (the work was
// done, its answer is no longer kept) is sent once, not retried as a
// request_in_flight is, and the typed client returns it as a *Problem
// that matches ErrIdempotencyKeyExpired, its body whole.
func TestKeyExpiredIsFinal(t *testing.T) {
	t.Parallel()
	const body = `{"type":"about:blank","title":"Conflict","status":409,"detail":"done; the answer is no longer kept","code":"idempotency_key_expired"}`
	base := &recorder{answer: func(n int, _ *http.Request) *http.Response {
		if n > 1 {
			return answer(201, map[string]string{"Content-Type": "application/json"}, `{"id":"t2"}`)
		}
		return answer(409, map[string]string{"Content-Type": problemJSON}, body)
	}}
	clock := &fakeClock{now: time.Now()}
	c, err := idemclient.New(idemclient.Config{BaseURL: "http://localhost:8080", Base: base, Policy: clock.policy(idemclient.Policy{})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateTransfer(t.Context(), idemclient.TransferParams{DebitAccountID: "a", CreditAccountID: "b", Amount: 5, Currency: "EUR"},
		idemclient.WithKey("order-7"))
	if !errors.Is(err, idemclient.ErrIdempotencyKeyExpired) || errors.Is(err, idemclient.ErrRequestInFlight) || errors.Is(err, idemclient.ErrBudgetExhausted) {
		t.Fatalf("error %v; want idempotency_key_expired", err)
	}
	var p *idemclient.Problem
	if !errors.As(err, &p) || p.Status != 409 || string(p.Body) != body || p.Detail != "done; the answer is no longer kept" {
		t.Fatalf("problem %+v", p)
	}
	if len(base.reqs) != 1 || len(clock.waits) != 0 {
		t.Fatalf("%d attempts, waits %v; want one attempt", len(base.reqs), clock.waits)
	}
}

// TestWaitPastTheDeadlineIsNotStarted: a Retry-After longer than what is
// left of the context ends the call at once with DeadlineExceeded.
func TestWaitPastTheDeadlineIsNotStarted(t *testing.T) {
	t.Parallel()
	t0 := time.Now().Add(time.Hour)
	clock := &fakeClock{now: t0}
	base := &recorder{answer: func(int, *http.Request) *http.Response {
		return answer(503, map[string]string{"Retry-After": "3"}, "")
	}}
	tr, err := idemclient.NewTransport(base, clock.policy(idemclient.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(t.Context(), t0.Add(2*time.Second))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://localhost:8080/v1/accounts/a", nil)
	_, err = tr.RoundTrip(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v; want DeadlineExceeded", err)
	}
	if len(base.reqs) != 1 || len(clock.waits) != 0 {
		t.Fatalf("%d attempts, waits %v", len(base.reqs), clock.waits)
	}
}

// TestBudgetErrorKeepsTheLastAnswer: the budget's error says what the
// last attempt got, through http.Client's *url.Error too.
func TestBudgetErrorKeepsTheLastAnswer(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	base := &recorder{answer: func(int, *http.Request) *http.Response {
		return answer(409, map[string]string{"Content-Type": problemJSON}, `{"status":409,"code":"request_in_flight"}`)
	}}
	tr, err := idemclient.NewTransport(base, clock.policy(idemclient.Policy{MaxAttempts: 3}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&http.Client{Transport: tr}).Post("http://localhost:8080/v1/transfers", "application/json", strings.NewReader("{}"))
	var be *idemclient.BudgetError
	if !errors.Is(err, idemclient.ErrBudgetExhausted) || !errors.As(err, &be) || be.Attempts != 3 || be.Status != 409 || be.Code != "request_in_flight" {
		t.Fatalf("error %v (%+v)", err, be)
	}
}

// TestNewKeyIsUUIDv7: keys are version 7, variant 10, and sort by time.
func TestNewKeyIsUUIDv7(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		k, err := idemclient.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(k) || seen[k] || idemclient.CheckKey(k) != nil {
			t.Fatalf("key %q", k)
		}
		seen[k] = true
	}
}

// blocking answers its first attempt only when the attempt's context
// ends, and every later one at once.
type blocking struct{ n atomic.Int32 }

func (b *blocking) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	if b.n.Add(1) == 1 {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return answer(201, nil, `{}`), nil
}

// TestAttemptTimeoutIsRetried: an attempt that outlives AttemptTimeout is
// a transport error, retried with the same key, while the request's own
// context lives on.
func TestAttemptTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	base := &blocking{}
	var finals []bool
	tr, err := idemclient.NewTransport(base, clock.policy(idemclient.Policy{AttemptTimeout: 10 * time.Millisecond,
		OnAttempt: func(a idemclient.Attempt) { finals = append(finals, a.Final) }}))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://localhost:8080/v1/transfers", strings.NewReader("{}"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || base.n.Load() != 2 || len(finals) != 2 || finals[0] || !finals[1] {
		t.Fatalf("status %d after %d attempts (final %v)", resp.StatusCode, base.n.Load(), finals)
	}
}

// TestKeylessPostIsSentOnce: over a real connection, a POST the Policy
// sends without a key reaches the server once, whether the server answers
// 502 or drops the connection after reading it (the work may be done);
// the same POST is sent again when the connection could not be made at
// all (nothing was written), and a keyed POST is retried as always.
func TestKeylessPostIsSentOnce(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/drop" {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	keyless := idemclient.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond,
		NewKey: func(*http.Request) (string, error) { return "", nil }}
	client := func(p idemclient.Policy) *http.Client {
		tr, err := idemclient.NewTransport(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: tr}
	}
	post := func(c *http.Client, url string) (*http.Response, error) {
		resp, err := c.Post(url, "application/json", strings.NewReader(`{"amount":1}`))
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}

	if resp, err := post(client(keyless), srv.URL+"/bad-gateway"); err != nil || resp.StatusCode != 502 || posts.Load() != 1 {
		t.Fatalf("keyless 502: %v %v, %d POSTs; want the 502 after 1", resp, err, posts.Load())
	}
	posts.Store(0)
	if _, err := post(client(keyless), srv.URL+"/drop"); err == nil || posts.Load() != 1 {
		t.Fatalf("keyless dropped connection: %v, %d POSTs; want the error after 1", err, posts.Load())
	}
	posts.Store(0)
	if _, err := post(client(idemclient.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, MaxAttempts: 3}), srv.URL+"/drop"); err == nil || posts.Load() != 3 {
		t.Fatalf("keyed dropped connection: %v, %d POSTs; want 3", err, posts.Load())
	}
	// A Standard Webhooks delivery is keyed by its webhook-id: retried.
	posts.Store(0)
	hook, _ := http.NewRequest(http.MethodPost, srv.URL+"/bad-gateway", strings.NewReader(`{"amount":1}`))
	hook.Header.Set("Webhook-Id", "msg_1")
	if resp, err := client(idemclient.Policy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, MaxAttempts: 3,
		NewKey: func(*http.Request) (string, error) { return "", nil }}).Do(hook); err == nil || posts.Load() != 3 {
		t.Fatalf("webhook delivery's 502: %v %v, %d POSTs; want the budget spent after 3", resp, err, posts.Load())
	}

	// A port nothing listens on: every attempt is a dial error, so the
	// keyless POST uses its whole budget.
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	var attempts atomic.Int32
	p := keyless
	p.MaxAttempts = 3
	p.OnAttempt = func(idemclient.Attempt) { attempts.Add(1) }
	if _, err := post(client(p), url); !errors.Is(err, idemclient.ErrBudgetExhausted) || attempts.Load() != 3 {
		t.Fatalf("keyless POST to a closed port: %v after %d attempts; want the budget exhausted after 3", err, attempts.Load())
	}
}
