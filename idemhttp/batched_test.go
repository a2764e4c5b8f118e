package idemhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/problem"
)

// order is the item of the batched route: what decode read from the
// request, and the id it derived from the request's key.
type order struct {
	id, tenant, path, body string
	in                     orderIn
}

// batchedOrders is the batched twin of orders: decode refuses a body with
// "invalid" (400, not stored); the work inserts one order row per item
// and answers 201, 422 without a row for "status": 422 (stored), and a
// *ResponseError without a row for a 5xx "status" (not stored). It counts
// the work's calls and items, and can hold the work.
type batchedOrders struct {
	calls, items atomic.Int64
	decoded      atomic.Int64
	panics       atomic.Bool   // the next batch's work panics
	entered      chan struct{} // when set, receives once the work runs
	release      chan struct{} // when set, the work waits for it
}

func (o *batchedOrders) decode(w http.ResponseWriter, r *http.Request, body []byte) (order, bool) {
	o.decoded.Add(1)
	key, ok := idemhttp.KeyFrom(r.Context())
	if !ok || idemhttp.Tx(r.Context()) != nil {
		problem.Write(w, http.StatusInternalServerError, "internal_error", "decode ran without its key, or in a transaction")
		return order{}, false
	}
	var in orderIn
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			problem.Write(w, http.StatusBadRequest, "invalid_request", err.Error())
			return order{}, false
		}
	}
	if in.Invalid {
		problem.Write(w, http.StatusBadRequest, "invalid_request", "amount: want a positive integer")
		return order{}, false
	}
	// The id is derived from the scoped key, so a retry names the same order.
	return order{id: key.Scope + "/" + key.Key, tenant: key.Scope, path: r.URL.Path, body: string(body), in: in}, true
}

func (o *batchedOrders) work(ctx context.Context, tx driver.Tx, items []order) ([]idem.ItemResult, error) {
	o.calls.Add(1)
	o.items.Add(int64(len(items)))
	if o.entered != nil {
		o.entered <- struct{}{}
	}
	if o.release != nil {
		<-o.release
	}
	if o.panics.CompareAndSwap(true, false) {
		panic("batchedOrders: boom")
	}
	out := make([]idem.ItemResult, len(items))
	for i, it := range items {
		switch s := it.in.Status; {
		case s == http.StatusUnprocessableEntity:
			out[i].Outcome = idem.Outcome{Status: s, Header: http.Header{"Content-Type": {problem.ContentType}},
				Body: []byte(`{"code":"insufficient_funds"}`)}
			continue
		case s >= 500:
			out[i].Err = &idemhttp.ResponseError{Status: s, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("try again\n")}
			continue
		}
		if _, err := tx.Exec(ctx, sqlInsertOrder, it.id, it.tenant, it.path, it.body); err != nil {
			return nil, err
		}
		body, _ := json.Marshal(map[string]any{"id": it.id, "amount": it.in.Amount, "path": it.path, "tenant": it.tenant})
		out[i].Outcome = idem.Outcome{Status: http.StatusCreated, Body: append(body, '\n'), Header: http.Header{
			"Content-Type": {"application/json"}, "Location": {"/orders/" + it.id},
			"Set-Cookie": {"session=" + it.id}, "X-Request-Id": {randomID()}, "Date": {handlerDate},
		}}
	}
	return out, nil
}

// batchedEnv is a real HTTP server in front of a batched route.
type batchedEnv struct {
	d     driver.Driver
	k     *idem.Keeper
	mw    *idemhttp.Middleware
	o     *batchedOrders
	srv   *httptest.Server
	kinds *kindCounter
}

func newBatchedEnv(t *testing.T, d driver.Driver, kcfg idem.Config, mcfg idemhttp.Config, bcfg idem.BatchConfig) *batchedEnv {
	t.Helper()
	createOrders(t, d)
	k, err := idem.New(d, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &batchedEnv{d: d, k: k, o: &batchedOrders{}, kinds: newKindCounter()}
	mcfg.Keeper = k
	mcfg.OnAnswer = func(_ *http.Request, kind idemhttp.Kind) { e.kinds.add(kind) }
	if e.mw, err = idemhttp.New(mcfg); err != nil {
		t.Fatal(err)
	}
	b, err := idem.NewBatcher(k, e.o.work, bcfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = newBatchedServer(e.mw, b, e.o)
	t.Cleanup(func() { e.srv.Close(); _ = b.Close(context.Background()) })
	return e
}

func newBatchedServer(mw *idemhttp.Middleware, b *idem.Batcher[order], o *batchedOrders) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idemhttp.Batched(mw, b, o.decode))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenant := r.Header.Get("X-Tenant"); tenant != "" {
			r = r.WithContext(idemhttp.WithScope(r.Context(), tenant))
		}
		mux.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	return srv
}

// A batched route answers as a wrapped one: the first answer with all its
// headers, the allow-listed ones stored, replays with the stored status and body, the allow-listed
// headers and Idempotent-Replayed, from the cache and, in a fresh process,
// from the database; the order row is written once, under the id derived
// from the key in decode.
func TestBatchedReplay(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newBatchedEnv(t, d, idem.Config{}, idemhttp.Config{}, idem.BatchConfig{})
		first := send(t, e.srv, http.MethodPost, "/orders", orderBody, "acme", "k1")
		if first.status != http.StatusCreated || first.header.Get(idemhttp.HeaderReplayed) != "" ||
			first.header.Get("Set-Cookie") == "" || first.header.Get("Location") != "/orders/acme/k1" {
			t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
		}
		// The database keeps the allow-listed headers only, as Wrap's.
		var stored []byte
		if err := d.Reader().QueryRow(context.Background(), `SELECT header FROM idem_keys`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if want := `{"Content-Type":["application/json"],"Location":["/orders/acme/k1"]}`; string(stored) != want {
			t.Fatalf("stored header %s, want %s", stored, want)
		}
		for _, body := range []string{orderBody, "{\n  \"amount\":100 }"} {
			assertReplay(t, first, send(t, e.srv, http.MethodPost, "/orders", body, "acme", "k1"))
		}
		st := e.mw.CacheStats()
		if st.Hits != 2 || st.Entries != 1 {
			t.Fatalf("cache %+v, want 2 hits and 1 entry", st)
		}

		// A fresh process reads the database once and caches the answer.
		fresh, err := idemhttp.New(idemhttp.Config{Keeper: e.k})
		if err != nil {
			t.Fatal(err)
		}
		b, err := idem.NewBatcher(e.k, e.o.work, idem.BatchConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background()) //nolint:errcheck // no deadline: it waits
		srv := newBatchedServer(fresh, b, e.o)
		defer srv.Close()
		for range 2 {
			assertReplay(t, first, send(t, srv, http.MethodPost, "/orders", orderBody, "acme", "k1"))
		}
		if st := fresh.CacheStats(); st.Misses != 1 || st.Hits != 1 {
			t.Fatalf("fresh cache %+v, want 1 miss then 1 hit", st)
		}

		var id string
		if err := d.Reader().QueryRow(context.Background(), `SELECT id FROM orders`).Scan(&id); err != nil || id != "acme/k1" {
			t.Fatalf("order id %q (%v), want acme/k1", id, err)
		}
		if n := countOrders(t, d); n != 1 || e.o.items.Load() != 1 {
			t.Fatalf("%d order rows, %d items worked; want 1, 1", n, e.o.items.Load())
		}
		if e.kinds.get(idemhttp.KindFirst) != 1 || e.kinds.get(idemhttp.KindReplayed) != 2 {
			t.Fatalf("outcomes first=%d replayed=%d", e.kinds.get(idemhttp.KindFirst), e.kinds.get(idemhttp.KindReplayed))
		}
	})
}

// Many requests at once, copies among them: one order row and one stored
// outcome per key, every copy answered the same, one of them first.
func TestBatchedConcurrent(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newBatchedEnv(t, d, idem.Config{Wait: 30 * time.Second}, idemhttp.Config{}, idem.BatchConfig{Concurrency: 2})
		const keys, copies = 20, 3
		answers := make([][]response, keys)
		var wg sync.WaitGroup
		for i := range keys {
			answers[i] = make([]response, copies)
			for c := range copies {
				wg.Go(func() {
					answers[i][c] = send(t, e.srv, http.MethodPost, "/orders", fmt.Sprintf(`{"amount":%d}`, i), "", fmt.Sprint("c", i))
				})
			}
		}
		wg.Wait()
		for i, as := range answers {
			firsts := 0
			for _, a := range as {
				if a.status != http.StatusCreated || string(a.body) != string(as[0].body) {
					t.Fatalf("key c%d: %d %s, want 201 %s", i, a.status, a.body, as[0].body)
				}
				if a.header.Get(idemhttp.HeaderReplayed) == "" {
					firsts++
				}
			}
			if firsts != 1 {
				t.Fatalf("key c%d: %d first answers, want 1", i, firsts)
			}
		}
		if n, k := countOrders(t, d), countKeys(t, d); n != keys || k != keys || e.o.items.Load() != keys {
			t.Fatalf("%d order rows, %d keys, %d items worked; want %d each", n, k, e.o.items.Load(), keys)
		}
	})
}

// Refusals: another body under a used key is 422; a request decode refuses
// is answered its 400 and stores nothing, so the corrected request may use
// the key; a business refusal (422) is stored; a ResponseError (503) is
// sent with Retry-After and stores nothing; a panic in the work is 500 and
// stores nothing. Each retry then does the work.
func TestBatchedRefusals(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newBatchedEnv(t, d, idem.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, idemhttp.Config{}, idem.BatchConfig{})
		if r := post(t, e.srv, "/orders", orderBody, "used"); r.status != http.StatusCreated {
			t.Fatalf("first: %d %s", r.status, r.body)
		}
		wantProblem(t, post(t, e.srv, "/orders", `{"amount": 101}`, "used"), http.StatusUnprocessableEntity, idemhttp.CodeKeyReused)

		for range 2 {
			wantProblem(t, post(t, e.srv, "/orders", `{"amount": 1, "invalid": true}`, "fixme"), http.StatusBadRequest, "invalid_request")
		}
		if k := e.kinds.get(idemhttp.KindInvalid); k != 2 || countKeys(t, d) != 1 {
			t.Fatalf("%d invalid outcomes, %d keys; want 2, 1", k, countKeys(t, d))
		}
		if r := post(t, e.srv, "/orders", orderBody, "fixme"); r.status != http.StatusCreated {
			t.Fatalf("corrected request: %d %s", r.status, r.body)
		}

		business := `{"amount": 1, "status": 422}`
		first := post(t, e.srv, "/orders", business, "poor")
		if first.status != http.StatusUnprocessableEntity {
			t.Fatalf("business refusal: %d %s", first.status, first.body)
		}
		assertReplay(t, first, post(t, e.srv, "/orders", business, "poor"))

		r := post(t, e.srv, "/orders", `{"amount": 1, "status": 503}`, "flaky")
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || string(r.body) != "try again\n" {
			t.Fatalf("ResponseError 503: %d %v %q", r.status, r.header, r.body)
		}
		if e.kinds.get(idemhttp.KindHandlerError) != 1 {
			t.Fatalf("%d handler errors, want 1", e.kinds.get(idemhttp.KindHandlerError))
		}
		e.o.panics.Store(true)
		wantProblem(t, post(t, e.srv, "/orders", orderBody, "boom"), http.StatusInternalServerError, idemhttp.CodeInternal)
		if countKeys(t, d) != 3 || countOrders(t, d) != 2 {
			t.Fatalf("%d keys, %d orders; want 3 (used, fixme, poor), 2", countKeys(t, d), countOrders(t, d))
		}
		for _, key := range []string{"flaky", "boom"} {
			if r := post(t, e.srv, "/orders", orderBody, key); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
				t.Fatalf("retry of %s: %d %s", key, r.status, r.body)
			}
		}
		if countKeys(t, d) != 5 || countOrders(t, d) != 4 {
			t.Fatalf("%d keys, %d orders after the retries; want 5, 4", countKeys(t, d), countOrders(t, d))
		}
		if n := e.o.decoded.Load(); n != 9 {
			// Not for the reuse nor the replay: used, 2× fixme, fixme,
			// poor, flaky, boom, flaky, boom.
			t.Fatalf("decode ran %d times, want 9", n)
		}
	})
}

// A batcher that cannot take a request (here: past MaxQueued) answers 503
// with Retry-After, and stores nothing.
func TestBatchedBusy(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newBatchedEnv(t, d, idem.Config{}, idemhttp.Config{}, idem.BatchConfig{Concurrency: 1, MaxQueued: 1})
		e.o.entered, e.o.release = make(chan struct{}, 1), make(chan struct{})
		// Released however the test ends: a held request would keep its
		// transaction, and the shared database's, open for good.
		release := sync.OnceFunc(func() { close(e.o.release) })
		t.Cleanup(release)
		held := make(chan response, 1)
		go func() { held <- post(t, e.srv, "/orders", orderBody, "held") }()
		<-e.o.entered
		// Of two requests behind the held one, one waits in the queue and
		// the other finds it full.
		answers := make(chan response, 2)
		for _, key := range []string{"queued", "late"} {
			go func() { answers <- post(t, e.srv, "/orders", orderBody, key) }()
		}
		late := <-answers
		wantProblem(t, late, http.StatusServiceUnavailable, idemhttp.CodeUnavailable)
		if late.header.Get("Retry-After") != "1" || !strings.Contains(string(late.body), "busy") {
			t.Fatalf("busy: %v %s", late.header, late.body)
		}
		release()
		for _, r := range []response{<-held, <-answers} {
			if r.status != http.StatusCreated {
				t.Fatalf("held or queued: %d %s", r.status, r.body)
			}
		}
		if e.kinds.get(idemhttp.KindUnavailable) != 1 || countKeys(t, d) != 2 || countOrders(t, d) != 2 {
			t.Fatalf("%d unavailable, %d keys, %d orders; want 1, 2, 2", e.kinds.get(idemhttp.KindUnavailable), countKeys(t, d), countOrders(t, d))
		}
	})
}

// readCounter is a driver that counts the keeper's reads of records.
type readCounter struct {
	driver.Driver
	gets atomic.Int64
}

func (c *readCounter) KeyGet(ctx context.Context, tx driver.Tx, p *driver.KeyGetParams) (*driver.KeyRecord, error) {
	c.gets.Add(1)
	return c.Driver.KeyGet(ctx, tx, p)
}

// A replay the cache does not hold costs one read of the database, whose
// answer is then cached until the record expires: no second read to learn
// the expiry. It holds for a wrapped route and a batched one.
func TestColdReplayOneRead(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{})
		first := post(t, e.srv, "/orders", orderBody, "k")
		rc := &readCounter{Driver: d}
		k, err := idem.New(rc, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := idem.NewBatcher(k, (&batchedOrders{}).work, idem.BatchConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background()) //nolint:errcheck // no deadline: it waits
		for _, route := range []string{"wrapped", "batched"} {
			mw, err := idemhttp.New(idemhttp.Config{Keeper: k})
			if err != nil {
				t.Fatal(err)
			}
			srv := newServer(mw, e.h)
			if route == "batched" {
				srv.Close()
				srv = newBatchedServer(mw, b, &batchedOrders{})
			}
			rc.gets.Store(0)
			for range 3 {
				assertReplay(t, first, post(t, srv, "/orders", orderBody, "k"))
			}
			srv.Close()
			if n := rc.gets.Load(); n != 1 {
				t.Fatalf("%s: %d reads for a cold replay and two cached ones, want 1", route, n)
			}
			if st := mw.CacheStats(); st.Entries != 1 || st.Hits != 2 {
				t.Fatalf("%s: cache %+v, want 1 entry, 2 hits", route, st)
			}
		}
	})
}
