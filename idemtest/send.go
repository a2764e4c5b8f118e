package idemtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
)

// MaxConcurrent bounds n of SendConcurrently and DoConcurrently.
const MaxConcurrent = 1000

// Response is one answer a helper received.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Replayed reports whether the answer carries Idempotent-Replayed: true.
func (r Response) Replayed() bool { return r.Header.Get(idemhttp.HeaderReplayed) == "true" }

// SendTwice sends req to h twice and checks the first test of idem: count
// (the caller's measure of the side effect, such as rows in a table) grows
// by exactly one, both answers have the same status and body, the first is
// not marked as a replay and the second is (Idempotent-Replayed: true). It
// returns both answers for further checks. req's body is read once and
// sent with each copy; req should carry its Idempotency-Key.
func SendTwice(t TB, h http.Handler, req *http.Request, count func() int) (first, second Response) {
	t.Helper()
	body := readBody(t, req)
	before := count()
	first = send(h, req, body)
	afterFirst := count()
	second = send(h, req, body)
	after := count()
	if afterFirst-before != 1 {
		t.Errorf("idemtest: the first request changed the count by %d, want 1 (status %d, body %s)", afterFirst-before, first.Status, first.Body)
	}
	if after != afterFirst {
		t.Errorf("idemtest: the second copy changed the count by %d, want 0: the side effect happened again", after-afterFirst)
	}
	sameAnswer(t, "second copy", first, second)
	if first.Replayed() {
		t.Errorf("idemtest: the first request is marked %s: true", idemhttp.HeaderReplayed)
	}
	if !second.Replayed() {
		t.Errorf("idemtest: the second copy lacks %s: true", idemhttp.HeaderReplayed)
	}
	return first, second
}

// SendConcurrently sends n copies of req to h at once (2 <= n <=
// MaxConcurrent) and checks that count grows by exactly one, that exactly
// one copy ran (unmarked) and every other either replayed the same status
// and body or was told 409 request_in_flight with Retry-After. It returns
// the answers in no particular order.
func SendConcurrently(t TB, h http.Handler, req *http.Request, n int, count func() int) []Response {
	t.Helper()
	if n < 2 || n > MaxConcurrent {
		t.Fatalf("idemtest: n %d is outside 2..%d", n, MaxConcurrent)
		return nil
	}
	body := readBody(t, req)
	before := count()
	answers := make([]Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i] = send(h, req, body)
		})
	}
	close(start)
	wg.Wait()
	if d := count() - before; d != 1 {
		t.Errorf("idemtest: %d concurrent copies changed the count by %d, want 1", n, d)
	}
	var firsts []Response
	var replays []Response
	for _, a := range answers {
		switch {
		case a.Status == http.StatusConflict && bytes.Contains(a.Body, []byte(idemhttp.CodeInFlight)):
			if a.Header.Get("Retry-After") == "" {
				t.Errorf("idemtest: a 409 %s lacks Retry-After", idemhttp.CodeInFlight)
			}
		case a.Replayed():
			replays = append(replays, a)
		default:
			firsts = append(firsts, a)
		}
	}
	if len(firsts) != 1 {
		t.Errorf("idemtest: %d of %d concurrent copies answered without %s (want exactly 1)", len(firsts), n, idemhttp.HeaderReplayed)
	}
	if len(firsts) > 0 {
		for _, r := range append(firsts[1:], replays...) {
			sameAnswer(t, "concurrent copy", firsts[0], r)
		}
	}
	return answers
}

// DoTwice runs work through k twice for req and checks the first test at
// the keeper: count grows by exactly one, both results have the same
// outcome, and only the second is marked Replayed.
func DoTwice(t TB, k Doer, req idem.Request, work idem.Work, count func() int) (first, second idem.Result) {
	t.Helper()
	ctx := context.Background()
	before := count()
	first, err := k.Do(ctx, req, work)
	if err != nil {
		t.Errorf("idemtest: first Do: %v", err)
	}
	afterFirst := count()
	second, err = k.Do(ctx, req, work)
	if err != nil {
		t.Errorf("idemtest: second Do: %v", err)
	}
	after := count()
	if afterFirst-before != 1 {
		t.Errorf("idemtest: the first Do changed the count by %d, want 1", afterFirst-before)
	}
	if after != afterFirst {
		t.Errorf("idemtest: the second Do changed the count by %d, want 0: the side effect happened again", after-afterFirst)
	}
	sameAnswer(t, "second Do", asResponse(first.Outcome), asResponse(second.Outcome))
	if first.Replayed {
		t.Errorf("idemtest: the first Do is marked Replayed")
	}
	if !second.Replayed {
		t.Errorf("idemtest: the second Do is not marked Replayed")
	}
	return first, second
}

// DoConcurrently runs work through k for req from n goroutines at once
// (2 <= n <= MaxConcurrent) and checks that count grows by exactly one,
// exactly one result is not Replayed, and every other result is the same
// outcome or idem.ErrInFlight.
func DoConcurrently(t TB, k Doer, req idem.Request, n int, work idem.Work, count func() int) {
	t.Helper()
	if n < 2 || n > MaxConcurrent {
		t.Fatalf("idemtest: n %d is outside 2..%d", n, MaxConcurrent)
		return
	}
	before := count()
	results := make([]idem.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		wg.Go(func() {
			<-start
			results[i], errs[i] = k.Do(context.Background(), req, work)
		})
	}
	close(start)
	wg.Wait()
	if d := count() - before; d != 1 {
		t.Errorf("idemtest: %d concurrent Do calls changed the count by %d, want 1", n, d)
	}
	var firsts, replays []Response
	for i, r := range results {
		switch {
		case errors.Is(errs[i], idem.ErrInFlight):
		case errs[i] != nil:
			t.Errorf("idemtest: concurrent Do: %v", errs[i])
		case r.Replayed:
			replays = append(replays, asResponse(r.Outcome))
		default:
			firsts = append(firsts, asResponse(r.Outcome))
		}
	}
	if len(firsts) != 1 {
		t.Errorf("idemtest: %d of %d concurrent Do calls were not replays (want exactly 1)", len(firsts), n)
	}
	if len(firsts) > 0 {
		for _, r := range append(firsts[1:], replays...) {
			sameAnswer(t, "concurrent Do", firsts[0], r)
		}
	}
}

func asResponse(o idem.Outcome) Response {
	return Response{Status: o.Status, Header: o.Header, Body: o.Body}
}

func readBody(t TB, req *http.Request) []byte {
	t.Helper()
	if req.Body == nil {
		return nil
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatalf("idemtest: read the request body: %v", err)
	}
	_ = req.Body.Close()
	return b
}

// send serves one copy of req with body through h, as a server would: a
// fresh request with its own context and body.
func send(h http.Handler, req *http.Request, body []byte) Response {
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if r.RequestURI == "" {
		r.RequestURI = r.URL.RequestURI()
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return Response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func sameAnswer(t TB, what string, want, got Response) {
	t.Helper()
	if got.Status != want.Status {
		t.Errorf("idemtest: %s answered status %d, the first %d", what, got.Status, want.Status)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("idemtest: %s answered a different body:\n got: %s\nwant: %s", what, got.Body, want.Body)
	}
}

// Doer runs an operation's work once per key: *idem.Keeper, or a wrapper of
// the caller's around it.
type Doer interface {
	Do(ctx context.Context, req idem.Request, work idem.Work) (idem.Result, error)
}
