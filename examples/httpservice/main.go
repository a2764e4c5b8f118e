// Command httpservice is a plain net/http service built on idem's packages:
// POST /orders takes a payment into the ledger and announces the order on
// NATS, and a retried request does neither twice.
//
// The handler runs behind idemhttp, inside the transaction that claims the
// request's Idempotency-Key: the ledger transfer, the outbox message and
// the stored answer commit together. The relay publishes the outbox to
// NATS JetStream with the outbox row's id as Nats-Msg-Id, so a relay killed
// between publish and mark-sent does not publish twice either.
//
//	DATABASE_URL=postgres://… NATS_URL=nats://… go run ./examples/httpservice
//	go run ./examples/httpservice relay   # a relay process on its own
//
// main_test.go runs both tests of idem (idemtest) against it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
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

// The shop's tenant and its two ledger accounts: money owed by customers
// moves to revenue.
const (
	tenant    = "shop"
	customers = "customers"
	revenue   = "revenue"
	currency  = "EUR"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dbURL, natsURL := os.Getenv("DATABASE_URL"), os.Getenv("NATS_URL")
	var err error
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		err = relay(ctx, dbURL, natsURL)
	} else {
		addr := os.Getenv("ADDR")
		if addr == "" {
			addr = "127.0.0.1:8081"
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			err = run(ctx, ln, dbURL, natsURL)
		}
	}
	if err != nil {
		log.Fatal(err)
	}
}

// run serves the shop on ln, with a relay in the same process, until ctx
// ends.
func run(ctx context.Context, ln net.Listener, dbURL, natsURL string) error {
	d, err := open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer d.Close()
	s, err := newShop(ctx, d)
	if err != nil {
		return err
	}
	relayErr := make(chan error, 1)
	go func() { relayErr <- natsrelay.Run(ctx, d, natsURL) }()
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-relayErr
}

func open(ctx context.Context, dbURL string) (driver.Driver, error) {
	d, err := postgres.Open(ctx, postgres.Config{URL: dbURL})
	if err != nil {
		return nil, err
	}
	if err := d.Migrate(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// shop is the service.
type shop struct {
	d      driver.Driver
	ledger *ledger.Ledger
	outbox *outbox.Outbox
	guard  *idemhttp.Middleware
}

func newShop(ctx context.Context, d driver.Driver) (*shop, error) {
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
	guard, err := idemhttp.New(idemhttp.Config{Keeper: keeper, Scope: func(*http.Request) string { return tenant }})
	if err != nil {
		return nil, err
	}
	s := &shop{d: d, ledger: l, outbox: ob, guard: guard}
	// Creating an account that exists with the same fields is a no-op, so
	// every start may do it.
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	for _, id := range []string{customers, revenue} {
		if _, err := l.CreateAccount(ctx, tx, tenant, ledger.NewAccount{ID: id, Currency: currency}); err != nil {
			return nil, err
		}
	}
	return s, tx.Commit(ctx)
}

func (s *shop) handler() http.Handler {
	mux := http.NewServeMux()
	// Wrap each route: the guard keys requests by method and route pattern.
	mux.Handle("POST /orders", s.guard.Wrap(http.HandlerFunc(s.placeOrder)))
	return mux
}

type orderRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"` // minor units
}

type orderResponse struct {
	OrderID    string `json:"order_id"`
	TransferID string `json:"transfer_id"`
	EventID    string `json:"event_id"`
	Amount     int64  `json:"amount"`
}

// placeOrder runs once per Idempotency-Key. Everything it writes goes
// through idemhttp.Tx, the transaction that also stores its answer.
func (s *shop) placeOrder(w http.ResponseWriter, r *http.Request) {
	var in orderRequest
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer == "" || in.Amount <= 0 {
		// Refused before any work: not stored, so the client may send the
		// corrected order under the same Idempotency-Key.
		idemhttp.MarkInvalid(r.Context())
		http.Error(w, `{"error":"want {\"customer\": string, \"amount\": positive integer}"}`, http.StatusBadRequest)
		return
	}
	ctx, tx := r.Context(), idemhttp.Tx(r.Context())
	// The order id is derived from the key: the same request always names
	// the same order, even after the key's retention.
	key, _ := idemhttp.KeyFrom(ctx)
	orderID := uuid.NewSHA1(uuid.NameSpaceURL, []byte("order:"+key.Key)).String()
	ts, err := s.ledger.Post(ctx, tx, tenant, ledger.NewTransfer{
		ID: orderID, DebitAccountID: customers, CreditAccountID: revenue, Amount: in.Amount, Currency: currency,
	})
	if err != nil {
		// A ledger refusal is a business answer: stored and replayed. A
		// database fault is transient: answer 5xx and nothing is stored.
		var le *ledger.Error
		if errors.As(err, &le) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprintf(w, `{"error":%q}`, le.Code)
			return
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	resp := orderResponse{OrderID: orderID, TransferID: ts[0].ID, EventID: outbox.NewID(), Amount: in.Amount}
	payload, _ := json.Marshal(resp)
	if err := s.outbox.Enqueue(ctx, tx, outbox.Message{ID: resp.EventID, Tenant: tenant, Type: "order.placed", Key: orderID, Payload: payload}); err != nil {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(payload)
}

// relay runs a relay process on its own: any number may share the
// database.
func relay(ctx context.Context, dbURL, natsURL string) error {
	d, err := open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer d.Close()
	return natsrelay.Run(ctx, d, natsURL)
}
