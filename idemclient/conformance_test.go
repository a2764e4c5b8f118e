package idemclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/idemclient"
)

// spec is clients/conformance/cases.json (docs/clients.md, "Conformance
// cases"): the one suite the Go and TypeScript clients both pass.
type spec struct {
	Version int        `json:"version"`
	Config  specConfig `json:"config"`
	Cases   []specCase `json:"cases"`
}

type specConfig struct {
	BaseDelayMS           *int64  `json:"base_delay_ms"`
	MaxDelayMS            *int64  `json:"max_delay_ms"`
	MaxAttempts           *int    `json:"max_attempts"`
	Now                   *string `json:"now"`
	RequireReplayableBody *bool   `json:"require_replayable_body"`
	// Keyless: the client makes no key (Policy.NewKey returns "").
	Keyless *bool `json:"keyless"`
}

// over is c with the members o holds replaced.
func (c specConfig) over(o *specConfig) specConfig {
	if o == nil {
		return c
	}
	if o.BaseDelayMS != nil {
		c.BaseDelayMS = o.BaseDelayMS
	}
	if o.MaxDelayMS != nil {
		c.MaxDelayMS = o.MaxDelayMS
	}
	if o.MaxAttempts != nil {
		c.MaxAttempts = o.MaxAttempts
	}
	if o.Now != nil {
		c.Now = o.Now
	}
	if o.RequireReplayableBody != nil {
		c.RequireReplayableBody = o.RequireReplayableBody
	}
	if o.Keyless != nil {
		c.Keyless = o.Keyless
	}
	return c
}

type specCase struct {
	Name    string      `json:"name"`
	Config  *specConfig `json:"config"`
	Request struct {
		Method              string          `json:"method"`
		Path                string          `json:"path"`
		Body                json.RawMessage `json:"body"`
		Key                 *string         `json:"key"`
		BodyReplayable      *bool           `json:"body_replayable"`
		CancelAfterAttempts int             `json:"cancel_after_attempts"`
	} `json:"request"`
	Attempts []specAttempt `json:"attempts"`
	Expect   struct {
		Attempts   int     `json:"attempts"`
		KeySent    bool    `json:"key_sent"`
		SameKey    *bool   `json:"same_key"`
		WaitsMS    []int64 `json:"waits_ms"`
		WaitsMaxMS []int64 `json:"waits_max_ms"`
		Outcome    struct {
			Status   int   `json:"status"`
			Replayed *bool `json:"replayed"`
			Error    *struct {
				Status int    `json:"status"`
				Code   string `json:"code"`
				Kind   string `json:"kind"`
			} `json:"error"`
		} `json:"outcome"`
	} `json:"expect"`
}

type specAttempt struct {
	TransportError string            `json:"transport_error"`
	Status         int               `json:"status"`
	Headers        map[string]string `json:"headers"`
	Body           json.RawMessage   `json:"body"`
}

func loadSpec(t *testing.T) spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "clients", "conformance", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s spec
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("cases.json: %v", err)
	}
	if s.Version != 1 || len(s.Cases) == 0 {
		t.Fatalf("cases.json: version %d, %d cases", s.Version, len(s.Cases))
	}
	return s
}

// scripted is the fake base transport: it answers each attempt as the
// case says and records what was sent.
type scripted struct {
	t        *testing.T
	attempts []specAttempt
	mu       sync.Mutex
	keys     []string // "" for an attempt without a key
	hasKey   []bool
	bodies   []string
}

var errScripted = errors.New("scripted transport error")

func (s *scripted) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	n := len(s.keys)
	s.keys = append(s.keys, r.Header.Get(idemclient.HeaderKey))
	s.hasKey = append(s.hasKey, len(r.Header.Values(idemclient.HeaderKey)) > 0)
	s.mu.Unlock()
	if n >= len(s.attempts) {
		s.t.Errorf("attempt %d: the case lists %d", n+1, len(s.attempts))
		return nil, errScripted
	}
	a := s.attempts[n]
	readBody := func() {
		if r.Body == nil {
			s.bodies = append(s.bodies, "")
			return
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			s.t.Errorf("attempt %d: reading the body: %v", n+1, err)
		}
		s.bodies = append(s.bodies, string(b))
	}
	switch a.TransportError {
	case "before_write":
		if r.Body != nil {
			r.Body.Close()
		}
		s.bodies = append(s.bodies, "")
		// What net/http returns when the connection cannot be made.
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errScripted}
	case "after_write":
		readBody()
		return nil, fmt.Errorf("read answer: %w", errScripted)
	case "":
	default:
		s.t.Fatalf("unknown transport_error %q", a.TransportError)
	}
	readBody()
	h := http.Header{}
	for k, v := range a.Headers {
		h.Set(k, v)
	}
	var body []byte
	var str string
	if len(a.Body) > 0 && json.Unmarshal(a.Body, &str) == nil {
		body = []byte(str)
	} else {
		body = a.Body
	}
	return &http.Response{StatusCode: a.Status, Status: fmt.Sprintf("%d %s", a.Status, http.StatusText(a.Status)),
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// TestConformance runs every case of clients/conformance/cases.json
// against the Transport, with the fake transport above and an injected
// clock. The jitter's source returns its largest value, so a backoff must
// equal its bound: a bound too small fails too.
func TestConformance(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	for _, c := range s.Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			runCase(t, s.Config.over(c.Config), c)
		})
	}
}

func runCase(t *testing.T, cfg specConfig, c specCase) {
	now, err := time.Parse(time.RFC3339, *cfg.Now)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	base := &scripted{t: t, attempts: c.Attempts}
	var (
		mu    sync.Mutex
		waits []time.Duration
	)
	p := idemclient.Policy{
		MaxAttempts:           *cfg.MaxAttempts,
		BaseDelay:             time.Duration(*cfg.BaseDelayMS) * time.Millisecond,
		MaxDelay:              time.Duration(*cfg.MaxDelayMS) * time.Millisecond,
		RequireReplayableBody: cfg.RequireReplayableBody != nil && *cfg.RequireReplayableBody,
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		},
		Sleep: func(ctx context.Context, d time.Duration) error {
			base.mu.Lock()
			sent := len(base.keys)
			base.mu.Unlock()
			if c.Request.CancelAfterAttempts > 0 && sent >= c.Request.CancelAfterAttempts {
				cancel()
				return ctx.Err()
			}
			mu.Lock()
			defer mu.Unlock()
			waits = append(waits, d)
			now = now.Add(d)
			return nil
		},
		Rand: func(n int64) int64 { return n - 1 },
	}
	if cfg.Keyless != nil && *cfg.Keyless {
		p.NewKey = func(*http.Request) (string, error) { return "", nil }
	}
	outcomeErr := func(err error) {
		t.Helper()
		e := c.Expect.Outcome.Error
		if e == nil || e.Kind == "" {
			t.Fatalf("error %v; want outcome %+v", err, c.Expect.Outcome)
		}
		var want error
		switch e.Kind {
		case "budget_exhausted":
			want = idemclient.ErrBudgetExhausted
		case "context":
			want = context.Canceled
		case "invalid_request":
			want = idemclient.ErrBadInput
		case "transport":
			want = errScripted
		default:
			t.Fatalf("unknown error kind %q", e.Kind)
		}
		if !errors.Is(err, want) {
			t.Fatalf("error %v; want one matching %v", err, want)
		}
	}
	tr, err := idemclient.NewTransport(base, p)
	if err != nil {
		outcomeErr(err)
		if c.Expect.Attempts != 0 {
			t.Fatalf("the config was refused (%v) but %d attempts are expected", err, c.Expect.Attempts)
		}
		return
	}

	var body io.Reader
	if len(c.Request.Body) > 0 && string(c.Request.Body) != "null" {
		body = bytes.NewReader(c.Request.Body)
		if c.Request.BodyReplayable != nil && !*c.Request.BodyReplayable {
			body = io.MultiReader(body) // no GetBody: a one-shot stream
		}
	}
	req, err := http.NewRequestWithContext(ctx, c.Request.Method, "http://idem.test"+c.Request.Path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Request.Key != nil {
		req.Header.Set(idemclient.HeaderKey, *c.Request.Key)
	}
	resp, err := tr.RoundTrip(req)

	if got := len(base.keys); got != c.Expect.Attempts {
		t.Errorf("%d attempts; want %d", got, c.Expect.Attempts)
	}
	for i, has := range base.hasKey {
		if has != c.Expect.KeySent {
			t.Errorf("attempt %d carried a key: %v; want %v", i+1, has, c.Expect.KeySent)
		}
	}
	if c.Expect.KeySent && c.Expect.SameKey != nil && *c.Expect.SameKey {
		for i, k := range base.keys {
			if k != base.keys[0] {
				t.Errorf("attempt %d sent key %q; the first sent %q", i+1, k, base.keys[0])
			}
			if c.Request.Key != nil && k != *c.Request.Key {
				t.Errorf("attempt %d sent key %q; the caller's is %q", i+1, k, *c.Request.Key)
			}
		}
	}
	for i, b := range base.bodies {
		a := c.Attempts[i]
		if a.TransportError != "before_write" && body != nil && b != string(c.Request.Body) {
			t.Errorf("attempt %d sent body %q; want %s", i+1, b, c.Request.Body)
		}
	}
	switch {
	case c.Expect.WaitsMS != nil:
		if len(waits) != len(c.Expect.WaitsMS) {
			t.Errorf("waits %v; want %v ms", waits, c.Expect.WaitsMS)
		}
		for i := range min(len(waits), len(c.Expect.WaitsMS)) {
			if want := time.Duration(c.Expect.WaitsMS[i]) * time.Millisecond; waits[i] != want {
				t.Errorf("wait %d is %s; want %s", i+1, waits[i], want)
			}
		}
	case c.Expect.WaitsMaxMS != nil:
		if len(waits) != len(c.Expect.WaitsMaxMS) {
			t.Errorf("waits %v; want %d within %v ms", waits, len(c.Expect.WaitsMaxMS), c.Expect.WaitsMaxMS)
		}
		for i := range min(len(waits), len(c.Expect.WaitsMaxMS)) {
			bound := time.Duration(c.Expect.WaitsMaxMS[i]) * time.Millisecond
			if waits[i] != bound { // the largest jitter draws the bound itself
				t.Errorf("wait %d is %s with the largest jitter; want its bound %s", i+1, waits[i], bound)
			}
		}
	case len(waits) > 0:
		t.Errorf("waits %v; the case expects none", waits)
	}

	if err != nil {
		outcomeErr(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	o := c.Expect.Outcome
	if o.Error != nil {
		if o.Error.Kind != "" {
			t.Fatalf("answer %d %s; want error %s", resp.StatusCode, b, o.Error.Kind)
		}
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(b, &p)
		if resp.StatusCode != o.Error.Status || p.Code != o.Error.Code {
			t.Fatalf("answer %d %q; want %d %q", resp.StatusCode, p.Code, o.Error.Status, o.Error.Code)
		}
		return
	}
	if resp.StatusCode != o.Status {
		t.Fatalf("answer %d %s; want %d", resp.StatusCode, b, o.Status)
	}
	if replayed := resp.Header.Get(idemclient.HeaderReplayed) == "true"; o.Replayed == nil || replayed != *o.Replayed {
		t.Fatalf("replayed %v; want %v", replayed, o.Replayed)
	}
	if !strings.HasPrefix(resp.Status, fmt.Sprint(resp.StatusCode)) {
		t.Fatalf("status line %q", resp.Status)
	}
}
