package idemhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/drivertest"
)

const orderBody = `{"amount": 100}`

const handlerDate = "Mon, 01 Jan 2001 00:00:00 GMT"

// TestReplay: the same request twice is one row and one answer, the second
// marked replayed, without the first exchange's cookie, date or request id.
// It holds with the replay cache on and off, and across a restart (a new
// middleware, whose cache is empty, reads the stored outcome).
func TestReplay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cache int
	}{{"cache", 0}, {"nocache", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			drivertest.Each(t, func(t *testing.T, d driver.Driver) {
				e := newEnv(t, d, idem.Config{}, idemhttp.Config{ReplayCache: tc.cache})
				first := post(t, e.srv, "/orders", orderBody, "k1")
				if first.status != http.StatusCreated || first.header.Get(idemhttp.HeaderReplayed) != "" {
					t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
				}
				if first.header.Get("Set-Cookie") == "" || first.header.Get("X-Request-Id") == "" || first.header.Get("Date") != handlerDate {
					t.Fatalf("first answer lost the handler's own headers: %v", first.header)
				}
				// Reordered members and other white space are the same JSON.
				for i, body := range []string{orderBody, "{\n  \"amount\":100 }", orderBody} {
					again := post(t, e.srv, "/orders", body, "k1")
					assertReplay(t, first, again)
					if i == 0 {
						// A restarted process has an empty cache and reads
						// the database.
						fresh, err := idemhttp.New(idemhttp.Config{Keeper: e.keeper, ReplayCache: tc.cache})
						if err != nil {
							t.Fatal(err)
						}
						srv := newServer(fresh, e.h)
						assertReplay(t, first, post(t, srv, "/orders", orderBody, "k1"))
						srv.Close()
					}
				}
				if n := countOrders(t, d); n != 1 {
					t.Fatalf("%d order rows, want 1", n)
				}
				if c := e.h.calls.Load(); c != 1 {
					t.Fatalf("handler ran %d times, want 1", c)
				}
				st := e.mw.CacheStats()
				if tc.cache == -1 && st != (idemhttp.CacheStats{}) {
					t.Fatalf("cache off, stats %+v", st)
				}
				if tc.cache == 0 && (st.Hits != 3 || st.Entries != 1) {
					t.Fatalf("cache stats %+v, want 3 hits and 1 entry", st)
				}
				if e.kinds.get(idemhttp.KindFirst) != 1 || e.kinds.get(idemhttp.KindReplayed) != 3 {
					t.Fatalf("outcomes first=%d replayed=%d", e.kinds.get(idemhttp.KindFirst), e.kinds.get(idemhttp.KindReplayed))
				}
			})
		})
	}
}

func assertReplay(t *testing.T, first, again response) {
	t.Helper()
	if again.status != first.status || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay %d %q, want %d %q", again.status, again.body, first.status, first.body)
	}
	if again.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replay lacks %s: %v", idemhttp.HeaderReplayed, again.header)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Fatalf("replay %s %q, want %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	for _, h := range []string{"Set-Cookie", "X-Request-Id"} {
		if v := again.header.Get(h); v != "" {
			t.Fatalf("replay carries the first exchange's %s: %q", h, v)
		}
	}
	// The orders handler sets a Date of its own; the server dates a replay
	// afresh.
	if d := first.header.Get("Date"); d == handlerDate && again.header.Get("Date") == d {
		t.Fatalf("replay carries the first exchange's Date %q", d)
	}
}

// TestConcurrentDuplicates: 200 copies at once make one row and 200
// identical answers, exactly one of them not a replay.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{Wait: 30 * time.Second}, idemhttp.Config{})
		const n = 200
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			res   = make([]response, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				res[i] = post(t, e.srv, "/orders", orderBody, "storm")
			})
		}
		close(start)
		wg.Wait()
		fresh := 0
		for i, r := range res {
			if r.status != http.StatusCreated || !bytes.Equal(r.body, res[0].body) {
				t.Fatalf("answer %d: %d %q, want 201 %q", i, r.status, r.body, res[0].body)
			}
			if r.header.Get(idemhttp.HeaderReplayed) == "" {
				fresh++
			}
		}
		if fresh != 1 {
			t.Fatalf("%d answers not marked replayed, want 1", fresh)
		}
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%d order rows, want 1", n)
		}
		if c := e.h.calls.Load(); c != 1 {
			t.Fatalf("handler ran %d times, want 1", c)
		}
	})
}

// TestReuse: a key sent again with another body, or to another resource of
// the same route, is refused with 422 and changes nothing. It holds when
// the stored outcome is answered from the cache and from the database.
func TestReuse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		firstPath, nextPath string
		firstBody, nextBody string
	}{
		{"different body", "/orders", "/orders", `{"amount": 100}`, `{"amount": 101}`},
		{"extra field", "/orders", "/orders", `{"amount": 100}`, `{"amount": 100, "note": "x"}`},
		{"empty body", "/orders", "/orders", `{"amount": 100}`, ``},
		{"other resource of the pattern", "/orders/a/reversals", "/orders/b/reversals", `{}`, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			drivertest.Each(t, func(t *testing.T, d driver.Driver) {
				e := newEnv(t, d, idem.Config{}, idemhttp.Config{})
				if r := post(t, e.srv, tc.firstPath, tc.firstBody, "k"); r.status != http.StatusCreated {
					t.Fatalf("first: %d %s", r.status, r.body)
				}
				wantProblem(t, post(t, e.srv, tc.nextPath, tc.nextBody, "k"), http.StatusUnprocessableEntity, idemhttp.CodeKeyReused)
				// A middleware without the outcome in memory asks the
				// database, and answers the same.
				fresh, err := idemhttp.New(idemhttp.Config{Keeper: e.keeper})
				if err != nil {
					t.Fatal(err)
				}
				srv := newServer(fresh, e.h)
				defer srv.Close()
				wantProblem(t, post(t, srv, tc.nextPath, tc.nextBody, "k"), http.StatusUnprocessableEntity, idemhttp.CodeKeyReused)
				if n := countOrders(t, d); n != 1 {
					t.Fatalf("%d order rows, want 1", n)
				}
				if c := e.h.calls.Load(); c != 1 {
					t.Fatalf("handler ran %d times, want 1", c)
				}
			})
		})
	}
}

// TestRejected: requests without a usable key, or with a body that is not
// JSON or too large, are answered 4xx and never run.
func TestRejected(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", idem.MaxKeyLength+1)
	for _, tc := range []struct {
		name   string
		body   string
		keys   []string
		status int
		code   string
	}{
		{"missing key", orderBody, nil, 400, idemhttp.CodeKeyMissing},
		{"empty key", orderBody, []string{""}, 400, idemhttp.CodeKeyInvalid},
		{"key too long", orderBody, []string{long}, 400, idemhttp.CodeKeyInvalid},
		{"quoted key too long", orderBody, []string{`"` + long + `"`}, 400, idemhttp.CodeKeyInvalid},
		{"control character", orderBody, []string{"a\tb"}, 400, idemhttp.CodeKeyInvalid},
		{"space", orderBody, []string{"a b"}, 400, idemhttp.CodeKeyInvalid},
		{"non-ASCII", orderBody, []string{"clé"}, 400, idemhttp.CodeKeyInvalid},
		{"unclosed quote", orderBody, []string{`"abc`}, 400, idemhttp.CodeKeyInvalid},
		{"bad escape", orderBody, []string{`"a\qb"`}, 400, idemhttp.CodeKeyInvalid},
		{"empty quoted", orderBody, []string{`""`}, 400, idemhttp.CodeKeyInvalid},
		{"sent twice", orderBody, []string{"a", "b"}, 400, idemhttp.CodeKeyInvalid},
		{"not JSON", `amount=100`, []string{"k"}, 400, idemhttp.CodeInvalidBody},
		{"trailing data", `{"amount": 1} {}`, []string{"k"}, 400, idemhttp.CodeInvalidBody},
		{"too large", `{"amount": 100, "pad": "` + strings.Repeat("x", 100) + `"}`, []string{"k"}, 413, idemhttp.CodeBodyTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			drivertest.Each(t, func(t *testing.T, d driver.Driver) {
				e := newEnv(t, d, idem.Config{}, idemhttp.Config{MaxBodyBytes: 64})
				wantProblem(t, post(t, e.srv, "/orders", tc.body, tc.keys...), tc.status, tc.code)
				if n := countOrders(t, d); n != 0 {
					t.Fatalf("%d order rows, want 0", n)
				}
				if c := e.h.calls.Load(); c != 0 {
					t.Fatalf("handler ran %d times, want 0", c)
				}
				assertNoKeys(t, d)
			})
		})
	}
}

// TestBodyTooLargeStreamed: a body of unknown length is cut at the bound.
func TestBodyTooLargeStreamed(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{MaxBodyBytes: 64})
		body := `{"pad": "` + strings.Repeat("x", 1000) + `"}`
		// A reader that is not a *strings.Reader hides the length, so the
		// client sends the body chunked.
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/orders", io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(idemhttp.HeaderKey, "k")
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantProblem(t, response{res.StatusCode, res.Header, b}, http.StatusRequestEntityTooLarge, idemhttp.CodeBodyTooLarge)
		if n := countOrders(t, d); n != 0 || e.h.calls.Load() != 0 {
			t.Fatalf("%d rows, %d calls, want none", n, e.h.calls.Load())
		}
	})
}

// TestQuotedKey: a key sent bare and as an RFC 8941 string is one key.
func TestQuotedKey(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{})
		first := post(t, e.srv, "/orders", orderBody, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		assertReplay(t, first, post(t, e.srv, "/orders", orderBody, "8e03978e-40d5-43e8-bc93-6894a57f9324"))
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%d order rows, want 1", n)
		}
	})
}

// TestBusinessFailureStored: a 4xx the handler answers is an outcome: it is
// stored and replayed, and the handler does not run again.
func TestBusinessFailureStored(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{ReplayCache: -1})
		body := `{"amount": 100, "status": 422}`
		first := post(t, e.srv, "/orders", body, "k")
		if first.status != http.StatusUnprocessableEntity || first.header.Get(idemhttp.HeaderReplayed) != "" {
			t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
		}
		again := post(t, e.srv, "/orders", body, "k")
		assertReplay(t, first, again)
		if !strings.Contains(string(again.body), "insufficient_funds") {
			t.Fatalf("replayed body %s", again.body)
		}
		if c := e.h.calls.Load(); c != 1 {
			t.Fatalf("handler ran %d times, want 1", c)
		}
		var n int
		if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM idem_keys WHERE status = 422`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d stored 422 outcomes (%v), want 1", n, err)
		}
	})
}

// TestBusinessFailureCommitsWrites: a 4xx business answer is an outcome
// like a 201: what the handler wrote before it commits with the stored
// answer, once, and a replay writes nothing (docs/idemhttp.md: decide
// before writing).
func TestBusinessFailureCommitsWrites(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{ReplayCache: -1})
		body := `{"amount": 100, "status": 409}`
		first := post(t, e.srv, "/orders", body, "k")
		wantProblem(t, first, http.StatusConflict, "sold_out")
		assertReplay(t, first, post(t, e.srv, "/orders", body, "k"))
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%d order rows after a 409 answered after the insert, want 1 (it commits)", n)
		}
	})
}

// TestInvalidNotStored: a request the handler marks invalid and answers
// 400 rolls back its row and stores nothing, twice over; the corrected
// request under the same key then does the work once and is replayed. A
// business refusal, by contrast, is stored (TestBusinessFailureStored).
func TestInvalidNotStored(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{})
		invalid := `{"amount": 100, "invalid": true}`
		for range 2 {
			r := post(t, e.srv, "/orders", invalid, "k")
			wantProblem(t, r, http.StatusBadRequest, "invalid_request")
			if n := countOrders(t, d); n != 0 {
				t.Fatalf("%d order rows after an invalid request, want 0 (rolled back)", n)
			}
			assertNoKeys(t, d)
		}
		ok := post(t, e.srv, "/orders", orderBody, "k")
		if ok.status != http.StatusCreated || ok.header.Get(idemhttp.HeaderReplayed) != "" {
			t.Fatalf("corrected request: %d %v %s", ok.status, ok.header, ok.body)
		}
		assertReplay(t, ok, post(t, e.srv, "/orders", orderBody, "k"))
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%d order rows, want 1", n)
		}
		if c := e.h.calls.Load(); c != 3 {
			t.Fatalf("handler ran %d times, want 3 (two invalid, one corrected)", c)
		}
		if k := e.kinds.get(idemhttp.KindInvalid); k != 2 {
			t.Fatalf("%d invalid outcomes, want 2", k)
		}

		// Marked invalid but answered 201: a contradiction, so a fault.
		r := post(t, e.srv, "/orders", `{"amount": 1, "invalid": true, "status": 201}`, "k2")
		wantProblem(t, r, http.StatusInternalServerError, idemhttp.CodeInternal)
		var keys int
		if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM idem_keys`).Scan(&keys); err != nil || keys != 1 {
			t.Fatalf("%d stored keys (%v), want 1 (k's, not k2's)", keys, err)
		}
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%d order rows after a contradictory answer, want 1", n)
		}
		if k := e.kinds.get(idemhttp.KindError); k != 1 {
			t.Fatalf("%d error outcomes, want 1", k)
		}
	})
}

// TestTransientNotStored: a 5xx from the handler rolls back its row and
// stores nothing; the retry does the work, once.
func TestTransientNotStored(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			drivertest.Each(t, func(t *testing.T, d driver.Driver) {
				e := newEnv(t, d, idem.Config{}, idemhttp.Config{})
				failing := `{"amount": 100, "status": ` + itoa(status) + `}`
				r := post(t, e.srv, "/orders", failing, "k")
				if r.status != status || r.header.Get(idemhttp.HeaderReplayed) != "" {
					t.Fatalf("first: %d %v", r.status, r.header)
				}
				if status == http.StatusServiceUnavailable && r.header.Get("Retry-After") != "1" {
					t.Fatalf("503 without Retry-After: %v", r.header)
				}
				if n := countOrders(t, d); n != 0 {
					t.Fatalf("%d order rows after a 5xx, want 0 (rolled back)", n)
				}
				assertNoKeys(t, d)
				// The retry of the very same request does the work.
				r = post(t, e.srv, "/orders", failing, "k")
				if r.status != status {
					t.Fatalf("retry: %d", r.status)
				}
				ok := post(t, e.srv, "/orders", orderBody, "k")
				if ok.status != http.StatusCreated {
					t.Fatalf("after transient failures: %d %s", ok.status, ok.body)
				}
				assertReplay(t, ok, post(t, e.srv, "/orders", orderBody, "k"))
				if n := countOrders(t, d); n != 1 {
					t.Fatalf("%d order rows, want 1", n)
				}
				if c := e.h.calls.Load(); c != 3 {
					t.Fatalf("handler ran %d times, want 3 (two failures, one success)", c)
				}
				if k := e.kinds.get(idemhttp.KindHandlerError); k != 2 {
					t.Fatalf("%d handler_error outcomes, want 2", k)
				}
			})
		})
	}
}

// TestHandlerPanic: a handler that panics after inserting its row is a
// bug the middleware answers 500 internal_error, like any failure that
// stored nothing: its row and the key's claim roll back, the keeper logs
// the panic with the key, and the client's retry, at once and with the
// keeper's Wait at its one-minute bound, runs the handler and stores its
// outcome once. A handler that panics with http.ErrAbortHandler still
// aborts the connection, and stores nothing either.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var logs syncBuffer
		e := newEnv(t, d, idem.Config{Wait: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, idemhttp.Config{})
		e.h.panics.Store(true)
		wantProblem(t, post(t, e.srv, "/orders", orderBody, "k"), http.StatusInternalServerError, idemhttp.CodeInternal)
		if n, k := countOrders(t, d), countKeys(t, d); n != 0 || k != 0 {
			t.Fatalf("%d rows and %d keys after a panic, want 0", n, k)
		}
		if e.kinds.get(idemhttp.KindError) != 1 {
			t.Fatalf("%d error outcomes, want 1", e.kinds.get(idemhttp.KindError))
		}
		if got := logs.String(); !strings.Contains(got, "key=k") || !strings.Contains(got, "orders: boom") {
			t.Fatalf("the panic was not logged with its key: %s", got)
		}

		first := post(t, e.srv, "/orders", orderBody, "k")
		if first.status != http.StatusCreated || first.header.Get(idemhttp.HeaderReplayed) != "" {
			t.Fatalf("retry after a panic: %d %s", first.status, first.body)
		}
		again := post(t, e.srv, "/orders", orderBody, "k")
		if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "true" || string(again.body) != string(first.body) {
			t.Fatalf("copy after the retry: %d %s", again.status, again.body)
		}
		if n := countOrders(t, d); n != 1 || e.h.calls.Load() != 2 {
			t.Fatalf("%d rows, %d handler runs; want 1, 2", n, e.h.calls.Load())
		}

		abort := e.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := idemhttp.Tx(r.Context()).Exec(r.Context(), sqlInsertOrder, "aborted", "t", "/abort", "{}"); err != nil {
				t.Error(err)
			}
			panic(http.ErrAbortHandler)
		}))
		func() {
			defer func() {
				if v := recover(); v != http.ErrAbortHandler {
					t.Errorf("abort: recovered %v, want http.ErrAbortHandler passed on", v)
				}
			}()
			r := httptest.NewRequest(http.MethodPost, "/abort", strings.NewReader("{}"))
			r.Header.Set(idemhttp.HeaderKey, "a")
			abort.ServeHTTP(httptest.NewRecorder(), r)
		}()
		if n, k := countOrders(t, d), countKeys(t, d); n != 1 || k != 1 {
			t.Fatalf("after an abort: %d rows, %d keys; want 1, 1", n, k)
		}
	})
}

// TestInFlight: a copy that arrives while the first still runs waits the
// keeper's Wait, then gets 409 with Retry-After; the first then completes
// and later copies replay it.
func TestInFlight(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{Wait: 50 * time.Millisecond}, idemhttp.Config{RetryAfter: 2 * time.Second})
		e.h.entered = make(chan struct{}, 1)
		e.h.release = make(chan struct{})
		done := make(chan response, 1)
		go func() { done <- post(t, e.srv, "/orders", orderBody, "k") }()
		<-e.h.entered
		twin := post(t, e.srv, "/orders", orderBody, "k")
		wantProblem(t, twin, http.StatusConflict, idemhttp.CodeInFlight)
		if ra := twin.header.Get("Retry-After"); ra != "2" {
			t.Fatalf("Retry-After %q, want 2", ra)
		}
		close(e.h.release)
		first := <-done
		if first.status != http.StatusCreated {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		assertReplay(t, first, post(t, e.srv, "/orders", orderBody, "k"))
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})
}

// TestUnavailable: with the database unreachable the answer is 503 with
// Retry-After, and the handler never runs.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dialect string
		open    func(t *testing.T) driver.Driver
	}{
		{"postgres", func(t *testing.T) driver.Driver {
			// A loopback port nobody listens on: a stopped server.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			d, err := postgres.Open(context.Background(), postgres.Config{URL: "postgres://idem@" + addr + "/idem?connect_timeout=5"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			return d
		}},
		{"sqlite", func(t *testing.T) driver.Driver {
			// The database's directory disappears under a running process
			// (an unmounted volume): new connections cannot open the file.
			dir := filepath.Join(t.TempDir(), "data")
			d, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "idem.db")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			if err := d.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			t.Parallel()
			d := tc.open(t)
			k, err := idem.New(d, idem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			h := &orders{}
			mw, err := idemhttp.New(idemhttp.Config{Keeper: k})
			if err != nil {
				t.Fatal(err)
			}
			srv := newServer(mw, h)
			defer srv.Close()
			r := post(t, srv, "/orders", orderBody, "k")
			wantProblem(t, r, http.StatusServiceUnavailable, idemhttp.CodeUnavailable)
			if r.header.Get("Retry-After") != "1" {
				t.Fatalf("Retry-After %q, want 1", r.header.Get("Retry-After"))
			}
			if c := h.calls.Load(); c != 0 {
				t.Fatalf("handler ran %d times with the database down", c)
			}
		})
	}
}

// TestScopeIsolation: one key in two tenants is two operations.
func TestScopeIsolation(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{})
		a := send(t, e.srv, http.MethodPost, "/orders", orderBody, "acme", "k")
		b := send(t, e.srv, http.MethodPost, "/orders", orderBody, "globex", "k")
		for _, r := range []response{a, b} {
			if r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
				t.Fatalf("%d %v %s", r.status, r.header, r.body)
			}
		}
		if bytes.Equal(a.body, b.body) {
			t.Fatalf("two tenants got one answer %s", a.body)
		}
		assertReplay(t, a, send(t, e.srv, http.MethodPost, "/orders", orderBody, "acme", "k"))
		var n int
		if err := d.Reader().QueryRow(context.Background(), `SELECT count(DISTINCT tenant) FROM orders`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("%d tenants with rows (%v), want 2", n, err)
		}
		if n := countOrders(t, d); n != 2 {
			t.Fatalf("%d rows, want 2", n)
		}
	})
}

// TestUnguardedMethod: methods outside Config.Methods pass through without
// a key and without a transaction.
func TestUnguardedMethod(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{})
		r := send(t, e.srv, http.MethodPut, "/orders/a/reversals", orderBody, "")
		if r.status != http.StatusInternalServerError || !strings.Contains(string(r.body), "no transaction") {
			t.Fatalf("PUT: %d %s", r.status, r.body)
		}
		if e.kinds.get(idemhttp.KindMissingKey) != 0 {
			t.Fatal("an unguarded method was checked for a key")
		}
	})
}

// TestExpiry: after the keeper's retention a copy is refused 409
// idempotency_key_expired and another request under the key 422, in the
// cache as in the database, and nothing runs again; after its memory the
// key is new.
func TestExpiry(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var (
			mu  sync.Mutex
			now = time.Now()
		)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		e := newEnv(t, d, idem.Config{Retention: time.Hour, Clock: clock}, idemhttp.Config{})
		first := post(t, e.srv, "/orders", orderBody, "k")
		assertReplay(t, first, post(t, e.srv, "/orders", orderBody, "k"))
		mu.Lock()
		now = now.Add(time.Hour + time.Second)
		mu.Unlock()
		wantProblem(t, post(t, e.srv, "/orders", orderBody, "k"), http.StatusConflict, idemhttp.CodeKeyExpired)
		wantProblem(t, post(t, e.srv, "/orders", `{"amount": 5}`, "k"), http.StatusUnprocessableEntity, idemhttp.CodeKeyReused)
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%d rows after the retention, want 1", n)
		}
		if got := e.kinds.get(idemhttp.KindExpired); got != 1 {
			t.Fatalf("expired answers counted %d, want 1", got)
		}
		mu.Lock()
		now = now.Add(30 * 24 * time.Hour)
		mu.Unlock()
		second := post(t, e.srv, "/orders", orderBody, "k")
		if second.status != http.StatusCreated || second.header.Get(idemhttp.HeaderReplayed) != "" || bytes.Equal(second.body, first.body) {
			t.Fatalf("after the memory: %d %v %s", second.status, second.header, second.body)
		}
		if n := countOrders(t, d); n != 2 {
			t.Fatalf("%d rows, want 2", n)
		}
	})
}

// TestConfig: every bound is checked with a message naming the field.
func TestConfig(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	k, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  idemhttp.Config
		want string
	}{
		{idemhttp.Config{}, "Keeper"},
		{idemhttp.Config{Keeper: k, MaxBodyBytes: 65 << 20}, "MaxBodyBytes"},
		{idemhttp.Config{Keeper: k, MaxResponseBytes: 10}, "MaxResponseBytes"},
		{idemhttp.Config{Keeper: k, RetryAfter: time.Millisecond}, "RetryAfter"},
		{idemhttp.Config{Keeper: k, ReplayCache: -2}, "ReplayCache"},
		{idemhttp.Config{Keeper: k, ReplayCacheBytes: 1}, "ReplayCacheBytes"},
		{idemhttp.Config{Keeper: k, ReplayHeaders: []string{"set-cookie"}}, "set-cookie"},
		{idemhttp.Config{Keeper: k, ReplayHeaders: []string{"Date"}}, "Date"},
		{idemhttp.Config{Keeper: k, Methods: []string{}}, "Methods"},
		{idemhttp.Config{Keeper: k, Methods: []string{"POST /x"}}, "method"},
		{idemhttp.Config{Keeper: k, IgnoreFields: make([]string, 65)}, "IgnoreFields"},
	} {
		if _, err := idemhttp.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := idemhttp.New(idemhttp.Config{Keeper: k}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func assertNoKeys(t *testing.T, d driver.Driver) {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM idem_keys`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d stored keys (%v), want 0", n, err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestEmptyScope: a Scope function that finds no tenant is a bug in the
// wiring; the request is refused, never run under a shared scope.
func TestEmptyScope(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idem.Config{}, idemhttp.Config{Scope: func(*http.Request) string { return "" }, Logger: slog.New(slog.DiscardHandler)})
		wantProblem(t, post(t, e.srv, "/orders", orderBody, "k"), http.StatusInternalServerError, idemhttp.CodeInternal)
		if n := countOrders(t, d); n != 0 || e.h.calls.Load() != 0 {
			t.Fatalf("%d rows, %d calls, want none", n, e.h.calls.Load())
		}
	})
}

// TestInFlightAcrossProcesses: two servers with keepers of their own (two
// processes) on one Postgres. The twin's claim waits on the first's row
// lock, bounded by the keeper's Wait, and gets 409; once the first commits
// the twin's server replays it. (SQLite has one writer per database, so
// there a twin queues for the writer and then replays.)
func TestInFlightAcrossProcesses(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "postgres")
	a := newEnv(t, d, idem.Config{Wait: 100 * time.Millisecond}, idemhttp.Config{})
	a.h.entered = make(chan struct{}, 1)
	a.h.release = make(chan struct{})
	k, err := idem.New(d, idem.Config{Wait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(idemhttp.Config{Keeper: k})
	if err != nil {
		t.Fatal(err)
	}
	other := &orders{}
	srv := newServer(mw, other)
	defer srv.Close()

	done := make(chan response, 1)
	go func() { done <- post(t, a.srv, "/orders", orderBody, "k") }()
	<-a.h.entered
	// The first copy's claim is made before its handler runs: its row is
	// locked now.
	wantProblem(t, post(t, srv, "/orders", orderBody, "k"), http.StatusConflict, idemhttp.CodeInFlight)
	close(a.h.release)
	first := <-done
	assertReplay(t, first, post(t, srv, "/orders", orderBody, "k"))
	if n := countOrders(t, d); n != 1 || other.calls.Load() != 0 {
		t.Fatalf("%d rows, %d calls on the second server, want 1 and 0", n, other.calls.Load())
	}
}
