package idemhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/drivertest"
)

// plainOrders inserts one order row per request whatever its body: in the
// key's transaction when guarded, on its own when not (rollout mode).
type plainOrders struct{ d driver.Driver }

func (p plainOrders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	body, _ := io.ReadAll(r.Body)
	tx := idemhttp.Tx(ctx)
	if tx == nil {
		own, err := p.d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer own.Rollback(ctx)
		tx = own
		defer func() { _ = own.Commit(context.WithoutCancel(ctx)) }()
	}
	id := randomID()
	if _, err := tx.Exec(ctx, sqlInsertOrder, id, "t", r.URL.Path, string(body)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"`+id+`"}`)
}

// TestAllowMissingKey: in rollout mode a request without a key runs the
// handler unguarded, every time (two rows), and is counted apart per
// operation; one with a key is still guarded. The default still refuses a
// request without a key, running nothing.
func TestAllowMissingKey(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		createOrders(t, d)
		k, err := idem.New(d, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		kinds := newKindCounter()
		mk := func(allow bool) http.Handler {
			mw, err := idemhttp.New(idemhttp.Config{Keeper: k, AllowMissingKey: allow,
				OnAnswer: func(_ *http.Request, kind idemhttp.Kind) { kinds.add(kind) }})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /orders", mw.Wrap(plainOrders{d}))
			mux.Handle("POST /refunds", mw.Wrap(plainOrders{d}))
			mux.HandleFunc("GET /unguarded", func(w http.ResponseWriter, _ *http.Request) {
				counts := mw.Unguarded()
				_, _ = io.WriteString(w, strings.Join([]string{
					utoa(counts["POST /orders"]), utoa(counts["POST /refunds"]), utoa(uint64(len(counts)))}, " "))
			})
			return mux
		}
		do := func(h http.Handler, method, path string, keys ...string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(method, path, strings.NewReader(orderBody))
			for _, key := range keys {
				r.Header.Add(idemhttp.HeaderKey, key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}

		strict := mk(false)
		if w := do(strict, "POST", "/orders"); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), idemhttp.CodeKeyMissing) {
			t.Fatalf("required mode without a key: %d %s", w.Code, w.Body)
		}
		if n := countOrders(t, d); n != 0 {
			t.Fatalf("%d rows after a refused request, want 0", n)
		}

		rollout := mk(true)
		for range 2 {
			if w := do(rollout, "POST", "/orders"); w.Code != http.StatusCreated || w.Header().Get(idemhttp.HeaderReplayed) != "" {
				t.Fatalf("rollout without a key: %d %s", w.Code, w.Body)
			}
		}
		do(rollout, "POST", "/refunds")
		if n := countOrders(t, d); n != 3 {
			t.Fatalf("%d rows after three unguarded requests, want 3 (no claim, no replay)", n)
		}
		if n := countKeys(t, d); n != 0 {
			t.Fatalf("%d keys stored for unguarded requests, want 0", n)
		}
		first := do(rollout, "POST", "/orders", "k1")
		again := do(rollout, "POST", "/orders", "k1")
		if first.Code != http.StatusCreated || again.Header().Get(idemhttp.HeaderReplayed) != "true" || again.Body.String() != first.Body.String() {
			t.Fatalf("rollout with a key is not guarded: %d, then %d %v %s", first.Code, again.Code, again.Header(), again.Body)
		}
		if n := countOrders(t, d); n != 4 {
			t.Fatalf("%d rows, want 4", n)
		}
		if got := do(rollout, "GET", "/unguarded").Body.String(); got != "2 1 2" {
			t.Fatalf("unguarded counts %q, want 2 for orders, 1 for refunds, 2 operations", got)
		}
		if kinds.get(idemhttp.KindUnguarded) != 3 || kinds.get(idemhttp.KindMissingKey) != 1 {
			t.Fatalf("kinds: %d unguarded, %d missing_key; want 3 and 1", kinds.get(idemhttp.KindUnguarded), kinds.get(idemhttp.KindMissingKey))
		}
	})
}

// TestUnguardedIsBounded: the per-operation count keeps at most
// MaxUnguardedOperations operations apart, the rest under "_other", so a
// path-derived operation cannot grow it without limit.
func TestUnguardedIsBounded(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	createOrders(t, d)
	k, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(idemhttp.Config{Keeper: k, AllowMissingKey: true})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	extra := 10
	for i := range idemhttp.MaxUnguardedOperations + extra {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/x/"+utoa(uint64(i)), nil))
	}
	counts := mw.Unguarded()
	if len(counts) != idemhttp.MaxUnguardedOperations+1 || counts["_other"] != uint64(extra) {
		t.Fatalf("%d operations kept, _other %d; want %d and %d", len(counts), counts["_other"], idemhttp.MaxUnguardedOperations+1, extra)
	}
}

// TestFormFingerprint: under FormFingerprint a form-encoded body is
// guarded; the same fields in another order are the same request (a
// replay, one row), a different value is reuse (422), a body that is not
// form-encoded is refused 400. The default (JSON) refuses the form body.
func TestFormFingerprint(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		createOrders(t, d)
		k, err := idem.New(d, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		mk := func(fp idemhttp.FingerprintFunc) http.Handler {
			mw, err := idemhttp.New(idemhttp.Config{Keeper: k, Fingerprint: fp, ReplayCache: -1})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /charges", mw.Wrap(plainOrders{d}))
			return mux
		}
		do := func(h http.Handler, key, ct, body string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
			r.Header.Set("Content-Type", ct)
			r.Header.Set(idemhttp.HeaderKey, key)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		const form = "application/x-www-form-urlencoded"
		if w := do(mk(nil), "json", form, "amount=100&currency=eur"); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), idemhttp.CodeInvalidBody) {
			t.Fatalf("default fingerprint on a form body: %d %s", w.Code, w.Body)
		}
		h := mk(idemhttp.FormFingerprint("sent_at"))
		first := do(h, "k", form, "amount=100&currency=eur&items[]=a&items[]=b&sent_at=1")
		if first.Code != http.StatusCreated {
			t.Fatalf("first: %d %s", first.Code, first.Body)
		}
		for _, body := range []string{
			"currency=eur&items[]=a&amount=100&items[]=b&sent_at=2",
			"items%5B%5D=a&currency=eur&items%5B%5D=b&amount=100",
		} {
			w := do(h, "k", form+"; charset=utf-8", body)
			if w.Header().Get(idemhttp.HeaderReplayed) != "true" || w.Body.String() != first.Body.String() {
				t.Fatalf("reordered %q: %d %v %s, want the first answer replayed", body, w.Code, w.Header(), w.Body)
			}
		}
		for _, body := range []string{"amount=200&currency=eur&items[]=a&items[]=b", "amount=100&currency=eur&items[]=b&items[]=a"} {
			if w := do(h, "k", form, body); w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), idemhttp.CodeKeyReused) {
				t.Fatalf("different %q: %d %s, want 422 reused", body, w.Code, w.Body)
			}
		}
		if w := do(h, "k2", "application/json", `{"amount":100}`); w.Code != http.StatusBadRequest {
			t.Fatalf("JSON under FormFingerprint: %d %s, want 400", w.Code, w.Body)
		}
		if w := do(h, "k3", form, "amount=%zz"); w.Code != http.StatusBadRequest {
			t.Fatalf("malformed form: %d %s, want 400", w.Code, w.Body)
		}
		if n := countOrders(t, d); n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})
}

func utoa(n uint64) string { return strconv.FormatUint(n, 10) }
