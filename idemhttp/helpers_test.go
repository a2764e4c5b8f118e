package idemhttp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/problem"
)

// The business table of the tests: the side effect every test counts.
const (
	sqlCreateOrders = `CREATE TABLE orders (id text PRIMARY KEY, tenant text NOT NULL, path text NOT NULL, body text NOT NULL)`
	sqlInsertOrder  = `INSERT INTO orders (id, tenant, path, body) VALUES ($1, $2, $3, $4)`
	sqlCountOrders  = `SELECT count(*) FROM orders`
)

// orders is a guarded handler that inserts one order row through
// idemhttp.Tx and answers 201 with headers that must not all be replayed.
// A body with "status" makes it answer that status instead: 422 without a
// row (a business failure), 409 after inserting a row (a business refusal
// decided after a write, which commits), 5xx after inserting a row (which
// must then be rolled back). A body with "invalid" makes it insert a row, then mark the
// request invalid (idemhttp.MarkInvalid) and answer 400, or go on to its
// "status" when one is given.
type orders struct {
	calls   atomic.Int64
	entered chan struct{} // when set, receives once the handler runs
	release chan struct{} // when set, the handler waits for it
	panics  atomic.Bool   // the next call panics after inserting
}

type orderIn struct {
	Amount  int64 `json:"amount"`
	Status  int   `json:"status"`
	Invalid bool  `json:"invalid"`
}

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.calls.Add(1)
	ctx := r.Context()
	if o.entered != nil {
		o.entered <- struct{}{}
	}
	if o.release != nil {
		<-o.release
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in orderIn
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			problem.Write(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
	}
	if in.Status == http.StatusUnprocessableEntity {
		problem.Write(w, in.Status, "insufficient_funds", "not enough money")
		return
	}
	tx := idemhttp.Tx(ctx)
	if tx == nil {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	key, _ := idemhttp.KeyFrom(ctx)
	id := randomID()
	if _, err := tx.Exec(ctx, sqlInsertOrder, id, key.Scope, r.URL.Path, string(body)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if o.panics.CompareAndSwap(true, false) {
		panic("orders: boom")
	}
	if in.Invalid {
		idemhttp.MarkInvalid(ctx)
		if in.Status == 0 {
			problem.Write(w, http.StatusBadRequest, "invalid_request", "amount: want a positive integer")
			return
		}
	}
	if in.Status >= 500 {
		http.Error(w, "try again", in.Status)
		return
	}
	if in.Status == http.StatusConflict {
		problem.Write(w, in.Status, "sold_out", "sold out")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", "/orders/"+id)
	h.Set("Set-Cookie", "session="+id)
	h.Set("Date", handlerDate)
	h.Set("X-Request-Id", id)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "amount": in.Amount, "path": r.URL.Path, "tenant": key.Scope})
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is a real HTTP server in front of a guarded handler on a real
// database.
type env struct {
	d      driver.Driver
	keeper *idem.Keeper
	mw     *idemhttp.Middleware
	h      *orders
	srv    *httptest.Server
	kinds  *kindCounter
}

type kindCounter struct {
	n [16]atomic.Int64
	m map[idemhttp.Kind]int
}

func newEnv(t testing.TB, d driver.Driver, kcfg idem.Config, mcfg idemhttp.Config) *env {
	t.Helper()
	createOrders(t, d)
	k, err := idem.New(d, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{d: d, keeper: k, h: &orders{}, kinds: newKindCounter()}
	mcfg.Keeper = k
	mcfg.OnAnswer = func(_ *http.Request, kind idemhttp.Kind) { e.kinds.add(kind) }
	if e.mw, err = idemhttp.New(mcfg); err != nil {
		t.Fatal(err)
	}
	e.srv = newServer(e.mw, e.h)
	t.Cleanup(e.srv.Close)
	return e
}

// newServer routes the guarded handler under two patterns and takes the
// tenant from X-Tenant, as an authentication middleware would.
func newServer(mw *idemhttp.Middleware, h http.Handler) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Wrap(h))
	mux.Handle("/orders/{id}/reversals", mw.Wrap(h))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenant := r.Header.Get("X-Tenant"); tenant != "" {
			r = r.WithContext(idemhttp.WithScope(r.Context(), tenant))
		}
		mux.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the tests' panics are expected
	srv.Start()
	return srv
}

func createOrders(t testing.TB, d driver.Driver) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sqlCreateOrders); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func countOrders(t testing.TB, d driver.Driver) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), sqlCountOrders).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func countKeys(t testing.TB, d driver.Driver) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM idem_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newKindCounter() *kindCounter {
	return &kindCounter{m: map[idemhttp.Kind]int{
		idemhttp.KindFirst: 0, idemhttp.KindReplayed: 1, idemhttp.KindReused: 2,
		idemhttp.KindInFlight: 3, idemhttp.KindMissingKey: 4, idemhttp.KindInvalidKey: 5,
		idemhttp.KindInvalidBody: 6, idemhttp.KindBodyTooLarge: 7, idemhttp.KindUnavailable: 8,
		idemhttp.KindHandlerError: 9, idemhttp.KindError: 10, idemhttp.KindInvalid: 11,
		idemhttp.KindUnguarded: 12, idemhttp.KindExpired: 13,
	}}
}

func (c *kindCounter) add(k idemhttp.Kind) {
	i, ok := c.m[k]
	if !ok {
		panic("unknown outcome " + k)
	}
	c.n[i].Add(1)
}

func (c *kindCounter) get(k idemhttp.Kind) int64 { return c.n[c.m[k]].Load() }

// response is one answer as the client saw it.
type response struct {
	status int
	header http.Header
	body   []byte
}

// send makes one request. keys are sent as Idempotency-Key headers (none
// when empty); tenant, when set, as X-Tenant.
func send(t testing.TB, srv *httptest.Server, method, path, body, tenant string, keys ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, k := range keys {
		req.Header.Add(idemhttp.HeaderKey, k)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant", tenant)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func post(t testing.TB, srv *httptest.Server, path, body string, keys ...string) response {
	t.Helper()
	return send(t, srv, http.MethodPost, path, body, "", keys...)
}

// wantProblem checks an RFC 9457 answer: status, media type, members and
// the stable code.
func wantProblem(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type %q, want %q", ct, problem.ContentType)
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p["code"] != code || p["status"] != float64(status) || p["type"] == nil || p["title"] == nil || p["detail"] == nil {
		t.Fatalf("problem %s, want code %q and status %d with type, title, detail", r.body, code, status)
	}
	if r.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("a problem of the middleware is marked replayed")
	}
}
