// Package shop is the service every stack recipe of examples/stacks shares:
// POST /orders behind idemhttp, on a PostgreSQL driver opened on the
// stack's own *sql.DB (postgres.Config{DB: db}). In the transaction idem
// began for the request, the stack's code writes the business row
// (Config.SaveOrder, the one part that differs per stack: sqlx, GORM, bun,
// ent, sqlc) and the shop posts a ledger transfer and enqueues an outbox
// event. The key's claim and stored answer, the row, the transfer and the
// event commit together or not at all.
//
// Check (check.go) is the recipes' shared test: idemtest's two tests and a
// rollback test, against the real PostgreSQL.
package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/examples/natsrelay"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
)

// The shop's tenant and its two ledger accounts.
const (
	Tenant    = "shop"
	customers = "customers"
	revenue   = "revenue"
	currency  = "EUR"
)

// Order is the business row the stack's code writes, table orders.
type Order struct {
	ID       string
	Customer string
	Amount   int64 // minor units
}

// SQLCreateOrders is the business table. A real service has it in its own
// migrations; the shop creates it if missing, so each test's schema has it.
const SQLCreateOrders = `CREATE TABLE IF NOT EXISTS orders (
    id       text   PRIMARY KEY,
    customer text   NOT NULL,
    amount   bigint NOT NULL CHECK (amount > 0)
)`

// SaveOrder writes o with the stack's own code in tx, idem's transaction.
type SaveOrder func(ctx context.Context, tx *sql.Tx, o Order) error

// Shop is the service.
type Shop struct {
	D      *postgres.Driver
	ledger *ledger.Ledger
	outbox *outbox.Outbox
	guard  *idemhttp.Middleware
	save   SaveOrder

	// FailAfterWrites makes the handler answer 500 after every write (the
	// row, the transfer, the event): a test hook for the rollback test.
	FailAfterWrites atomic.Bool
}

// New opens idem on db, which the caller owns (Close of D leaves it open),
// and makes the table and the accounts.
func New(ctx context.Context, db *sql.DB, save SaveOrder) (*Shop, error) {
	d, err := postgres.Open(ctx, postgres.Config{DB: db})
	if err != nil {
		return nil, err
	}
	keeper, err := idem.New(d, idem.Config{})
	if err != nil {
		return nil, err
	}
	l, err := ledger.New(d, ledger.Config{})
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		return nil, err
	}
	guard, err := idemhttp.New(idemhttp.Config{Keeper: keeper, Scope: func(*http.Request) string { return Tenant }})
	if err != nil {
		return nil, err
	}
	s := &Shop{D: d, ledger: l, outbox: ob, guard: guard, save: save}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, SQLCreateOrders); err != nil {
		return nil, err
	}
	for _, id := range []string{customers, revenue} {
		if _, err := l.CreateAccount(ctx, tx, Tenant, ledger.NewAccount{ID: id, Currency: currency}); err != nil {
			return nil, err
		}
	}
	return s, tx.Commit(ctx)
}

// Handler serves POST /orders.
func (s *Shop) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", s.guard.Wrap(http.HandlerFunc(s.placeOrder)))
	return mux
}

// Placed is the answer to an order.
type Placed struct {
	OrderID    string `json:"order_id"`
	TransferID string `json:"transfer_id"`
	EventID    string `json:"event_id"`
	Amount     int64  `json:"amount"`
}

func (s *Shop) placeOrder(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Customer string `json:"customer"`
		Amount   int64  `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer == "" || in.Amount <= 0 {
		idemhttp.MarkInvalid(r.Context())
		http.Error(w, `{"error":"want {\"customer\": string, \"amount\": positive integer}"}`, http.StatusBadRequest)
		return
	}
	ctx, tx := r.Context(), idemhttp.Tx(r.Context())
	key, _ := idemhttp.KeyFrom(ctx)
	o := Order{ID: uuid.NewSHA1(uuid.NameSpaceURL, []byte("order:"+key.Key)).String(), Customer: in.Customer, Amount: in.Amount}
	// The stack's own code, in idem's transaction as a *sql.Tx.
	stx, ok := postgres.StdSQLFromTx(tx)
	if !ok {
		http.Error(w, "idem's transaction is not a *sql.Tx", http.StatusInternalServerError)
		return
	}
	if err := s.save(ctx, stx, o); err != nil {
		http.Error(w, "unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	ts, err := s.ledger.Post(ctx, tx, Tenant, ledger.NewTransfer{
		ID: o.ID, DebitAccountID: customers, CreditAccountID: revenue, Amount: o.Amount, Currency: currency,
	})
	if err != nil {
		var le *ledger.Error
		if errors.As(err, &le) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprintf(w, `{"error":%q}`, le.Code)
			return
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	resp := Placed{OrderID: o.ID, TransferID: ts[0].ID, EventID: outbox.NewID(), Amount: o.Amount}
	payload, _ := json.Marshal(resp)
	if err := s.outbox.Enqueue(ctx, tx, outbox.Message{ID: resp.EventID, Tenant: Tenant, Type: "order.placed", Key: o.ID, Payload: payload}); err != nil {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	if s.FailAfterWrites.Load() {
		// A 5xx rolls back everything written above; the key stays free.
		http.Error(w, "failed after every write", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(payload)
}

// Main runs a stack's shop as a program: DATABASE_URL names the database,
// NATS_URL the broker its relay publishes to, ADDR where it listens
// (default 127.0.0.1:8081). It serves until SIGINT or SIGTERM.
func Main(sqlDriver string, save SaveOrder) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, sqlDriver, save); err != nil {
		log.Fatal(err)
	}
}

func serve(ctx context.Context, sqlDriver string, save SaveOrder) error {
	if err := migrate(ctx, os.Getenv("DATABASE_URL")); err != nil {
		return err
	}
	db, err := sql.Open(sqlDriver, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := New(ctx, db, save)
	if err != nil {
		return err
	}
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8081"
	}
	srv := &http.Server{Addr: addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	relayErr := make(chan error, 1)
	go func() { relayErr <- s.Relay(ctx, os.Getenv("NATS_URL")) }()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-relayErr
}

// migrate brings idem's tables up to date on a driver opened on the URL:
// Migrate on a *sql.DB needs pgx's stdlib under it, and the sqlx and sqlc
// stacks run on lib/pq.
func migrate(ctx context.Context, url string) error {
	d, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Migrate(ctx)
}

// Relay publishes the outbox to NATS until ctx ends.
func (s *Shop) Relay(ctx context.Context, natsURL string) error {
	return natsrelay.Run(ctx, s.D, natsURL)
}
