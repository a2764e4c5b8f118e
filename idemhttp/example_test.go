package idemhttp_test

import (
	"context"
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
