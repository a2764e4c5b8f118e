package idemhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/idemhttp"
)

// Wrap a route's handler; the handler writes through idemhttp.Tx, and a
// retry with the same Idempotency-Key gets the stored answer back.
func ExampleMiddleware_Wrap() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idemhttp-example-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	k, _ := idem.New(d, idem.Config{})
	guard, err := idemhttp.New(idemhttp.Config{Keeper: k})
	if err != nil {
		log.Fatal(err)
	}

	orders := 0
	mux := http.NewServeMux()
	mux.Handle("POST /orders", guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = idemhttp.Tx(r.Context()) // insert the order through this transaction
		orders++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	})))

	for _, key := range []string{"k-1", "k-1", ""} {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"sku":"tea"}`))
		if key != "" {
			r.Header.Set(idemhttp.HeaderKey, key)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get(idemhttp.HeaderReplayed), strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// 201  {"order":1}
	// 201 true {"order":1}
	// 400  {"type":"about:blank","title":"Bad Request","status":400,"detail":"this request needs an Idempotency-Key header","code":"idempotency_key_missing"}
}

// A request refused by validation is marked invalid before it is answered:
// the 400 is not stored, and the corrected request may reuse the key. A
// business refusal (a valid order for a sold-out item: 422) is not marked,
// so it is stored and replayed like a success.
func ExampleMarkInvalid() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idemhttp-example-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	k, _ := idem.New(d, idem.Config{})
	guard, err := idemhttp.New(idemhttp.Config{Keeper: k})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /orders", guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Quantity int `json:"quantity"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Quantity <= 0 {
			idemhttp.MarkInvalid(r.Context()) // not stored: the key stays free
			http.Error(w, "quantity: want a positive integer", http.StatusBadRequest)
			return
		}
		if in.Quantity > 3 {
			http.Error(w, "only 3 left", http.StatusUnprocessableEntity) // stored
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%d ordered", in.Quantity)
	})))

	for _, send := range []struct{ key, body string }{
		{"k-1", `{"quantity":0}`}, {"k-1", `{"quantity":2}`}, {"k-1", `{"quantity":2}`},
		{"k-2", `{"quantity":9}`}, {"k-2", `{"quantity":9}`},
	} {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(send.body))
		r.Header.Set(idemhttp.HeaderKey, send.key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(send.key, w.Code, w.Header().Get(idemhttp.HeaderReplayed), strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// k-1 400  quantity: want a positive integer
	// k-1 201  2 ordered
	// k-1 201 true 2 ordered
	// k-2 422  only 3 left
	// k-2 422 true only 3 left
}

// A route whose first arrivals share transactions (group commit): decode
// turns a request into an item, refusing it with an answer that is not
// stored; the batch's work answers each item, and a refusal found in the
// transaction (out of stock) that must not be stored is a ResponseError.
func ExampleBatched() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idemhttp-example-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	k, _ := idem.New(d, idem.Config{})
	guard, err := idemhttp.New(idemhttp.Config{Keeper: k})
	if err != nil {
		log.Fatal(err)
	}

	type order struct{ Quantity int }
	work := func(ctx context.Context, tx driver.Tx, orders []order) ([]idem.ItemResult, error) {
		out := make([]idem.ItemResult, len(orders))
		for i, o := range orders {
			if o.Quantity > 3 {
				out[i].Err = &idemhttp.ResponseError{Status: http.StatusServiceUnavailable, Body: []byte("restocking\n")}
				continue
			}
			// Insert all the orders through tx here, in one statement.
			out[i].Outcome = idem.Outcome{Status: http.StatusCreated, Body: fmt.Appendf(nil, "%d ordered\n", o.Quantity)}
		}
		return out, nil
	}
	b, err := idem.NewBatcher(k, work, idem.BatchConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background()) //nolint:errcheck // no deadline: it waits
	decode := func(w http.ResponseWriter, r *http.Request, body []byte) (order, bool) {
		var o order
		if err := json.Unmarshal(body, &o); err != nil || o.Quantity <= 0 {
			http.Error(w, "quantity: want a positive integer", http.StatusBadRequest) // not stored
			return o, false
		}
		return o, true
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idemhttp.Batched(guard, b, decode))

	for _, send := range []struct{ key, body string }{
		{"k-1", `{"quantity":0}`}, {"k-1", `{"quantity":2}`}, {"k-1", `{"quantity":2}`},
		{"k-2", `{"quantity":9}`},
	} {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(send.body))
		r.Header.Set(idemhttp.HeaderKey, send.key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(send.key, w.Code, w.Header().Get(idemhttp.HeaderReplayed), strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// k-1 400  quantity: want a positive integer
	// k-1 201  2 ordered
	// k-1 201 true 2 ordered
	// k-2 503  restocking
}
