// Command quickstart is a whole service on idemhttp and SQLite: it opens
// and migrates the database, runs the keeper's janitor, and serves one
// route whose work happens once per Idempotency-Key.
//
//	go run ./examples/quickstart
//	curl -si localhost:8090/v1/greetings -H 'Idempotency-Key: k1' -d '{"name":"ada"}'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/idemhttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:8090")
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, ln, "app-data/app.db"); err != nil {
		log.Fatal(err)
	}
}

// run serves on ln until ctx ends.
func run(ctx context.Context, ln net.Listener, dbPath string) error {
	// The file and its directory are created when missing.
	d, err := sqlite.Open(ctx, sqlite.Config{Path: dbPath})
	if err != nil {
		return err
	}
	defer d.Close()
	// idem's tables; every start may run it (applied migrations are skipped).
	if err := d.Migrate(ctx); err != nil {
		return err
	}
	// The service's own table, written in the same transaction as the key.
	if err := createTables(ctx, d); err != nil {
		return err
	}

	k, err := idem.New(d, idem.Config{Retention: 24 * time.Hour})
	if err != nil {
		return err
	}
	// Only the janitor turns expired answers into tombstones and deletes
	// those past the keeper's Memory: without it the keys table grows
	// forever. It stops when ctx ends.
	go k.RunJanitor(ctx)

	mw, err := idemhttp.New(idemhttp.Config{Keeper: k})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/greetings", mw.Wrap(http.HandlerFunc(greet)))

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func createTables(ctx context.Context, d driver.Driver) error {
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS greetings (name TEXT NOT NULL)`); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// greet runs once per Idempotency-Key; a retry gets the stored answer.
func greet(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Name == "" {
		idemhttp.MarkInvalid(r.Context()) // 400, not stored: the key stays free
		http.Error(w, `want {"name": "…"}`, http.StatusBadRequest)
		return
	}
	// The claim, this row and the stored answer commit together.
	tx := idemhttp.Tx(r.Context())
	if _, err := tx.Exec(r.Context(), `INSERT INTO greetings (name) VALUES (?)`, in.Name); err != nil {
		http.Error(w, "try again", http.StatusServiceUnavailable) // 5xx: rolled back, not stored
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"greeting": "hello, " + in.Name})
}
