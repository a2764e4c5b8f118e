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
