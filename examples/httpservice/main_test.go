package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/ledger"
)

func TestMain(m *testing.M) {
	// The crash test re-runs this binary as a relay process.
	idemtest.RelayMain("shop-relay", func(ctx context.Context) error {
		return relay(ctx, os.Getenv("DATABASE_URL"), os.Getenv("NATS_URL"))
	})
	os.Exit(idemtest.Main(m))
}

func newTestShop(t *testing.T) (*shop, string) {
	t.Helper()
	dbURL := idemtest.Postgres(t)
	d, err := open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	s, err := newShop(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return s, dbURL
}

// orders counts the side effect: transfers into revenue.
func (s *shop) orders(t *testing.T) func() int {
	return func() int {
		ctx := context.Background()
		tx, err := s.d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		es, _, err := s.ledger.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: revenue, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
}

func order(key string, amount int) *http.Request {
	r, _ := http.NewRequest("POST", "/orders", strings.NewReader(fmt.Sprintf(`{"customer":"ada","amount":%d}`, amount)))
	r.Header.Set("Idempotency-Key", key)
	return r
}

// The first test of idem, one line each: the same order twice, and eight
// copies at once, take one payment and give one answer.
func TestOrderIsPlacedOnce(t *testing.T) {
	t.Parallel()
	s, _ := newTestShop(t)
	idemtest.SendTwice(t, s.handler(), order("order-1", 1500), s.orders(t))
	idemtest.SendConcurrently(t, s.handler(), order("order-2", 700), 8, s.orders(t))
}

// A malformed order is refused and not stored: the corrected order under
// the same key is placed, once.
func TestInvalidOrderLeavesTheKeyFree(t *testing.T) {
	t.Parallel()
	s, _ := newTestShop(t)
	for _, want := range []int{http.StatusBadRequest, http.StatusCreated, http.StatusCreated} {
		amount := 1500
		if want == http.StatusBadRequest {
			amount = 0
		}
		w := httptest.NewRecorder()
		s.handler().ServeHTTP(w, order("order-1", amount))
		if w.Code != want {
			t.Fatalf("amount %d: %d %s, want %d", amount, w.Code, w.Body, want)
		}
	}
	if n := s.orders(t)(); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

// The second test: kill the relay between commit and publish, and between
// publish and mark-sent; every order is announced exactly once.
func TestOrderIsAnnouncedOnceAcrossRelayCrash(t *testing.T) {
	t.Parallel()
	for _, fp := range []string{idemtest.BeforePublish, idemtest.AfterPublish} {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			s, dbURL := newTestShop(t)
			natsURL, messages := idemtest.NATS(t)
			var ids []string
			for i := range 3 {
				first, _ := idemtest.SendTwice(t, s.handler(), order(fmt.Sprint("o-", i), 100+i), s.orders(t))
				var resp orderResponse
				if err := json.Unmarshal(first.Body, &resp); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, resp.EventID)
			}
			idemtest.KillRelay(t, idemtest.RelayCrash{
				Command:   idemtest.RelayCommand("shop-relay", "DATABASE_URL="+dbURL, "NATS_URL="+natsURL),
				Failpoint: fp,
				DB:        dbURL,
				Messages:  messages,
				Want:      ids,
			})
		})
	}
}

// TestRun runs the program as main does — HTTP server and relay in one
// process — and places an order over a real connection.
func TestRun(t *testing.T) {
	t.Parallel()
	dbURL := idemtest.Postgres(t)
	natsURL, messages := idemtest.NATS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, dbURL, natsURL) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for range 2 {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/orders", strings.NewReader(`{"customer":"bob","amount":2500}`))
		req.Header.Set("Idempotency-Key", "run-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("status %d", res.StatusCode)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(messages()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	ms := messages()
	if len(ms) != 1 || ms[0].Subject != "idem.shop.order.placed" || !strings.Contains(string(ms[0].Data), `"amount":2500`) {
		t.Fatalf("NATS holds %d messages, want one order.placed for 2500: %+v", len(ms), ms)
	}
}
