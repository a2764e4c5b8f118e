package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemtest"
)

// Stack is a recipe as its test gives it to Check.
type Stack struct {
	// Name names the stack, and its relay child process (RelayMain).
	Name string
	// SQLDriver is the database/sql driver the stack runs on: "pgx" (pgx's
	// stdlib) or "postgres" (lib/pq). Its package must be imported.
	SQLDriver string
	// Save is the stack's code writing the business row.
	Save SaveOrder
}

// RelayMain makes the test binary a relay of st's shop when idemtest's
// KillRelay starts it as one; call it first in TestMain.
func RelayMain(st Stack) {
	idemtest.RelayMain(st.Name+"-relay", func(ctx context.Context) error {
		db, err := sql.Open(st.SQLDriver, os.Getenv("DATABASE_URL"))
		if err != nil {
			return err
		}
		defer db.Close()
		s, err := New(ctx, db, st.Save)
		if err != nil {
			return err
		}
		return s.Relay(ctx, os.Getenv("NATS_URL"))
	})
}

// Check runs the recipe's tests against the real PostgreSQL: idemtest's two
// (a retried order is placed once; every order is announced once across a
// relay killed at either failpoint) and a rollback test (a handler failing
// after its own write and idem's leaves none of them, and the key free).
func Check(t *testing.T, st Stack) {
	t.Run("PlacedOnce", func(t *testing.T) {
		t.Parallel()
		s, _ := open(t, st)
		idemtest.SendTwice(t, s.Handler(), order("order-1", 1500), s.count(t, "orders"))
		idemtest.SendConcurrently(t, s.Handler(), order("order-2", 700), 8, s.count(t, "orders"))
	})
	t.Run("AnnouncedOnceAcrossRelayCrash", func(t *testing.T) {
		t.Parallel()
		for _, fp := range []string{idemtest.BeforePublish, idemtest.AfterPublish} {
			t.Run(fp, func(t *testing.T) {
				t.Parallel()
				s, dbURL := open(t, st)
				natsURL, messages := idemtest.NATS(t)
				var ids []string
				for i := range 3 {
					first, _ := idemtest.SendTwice(t, s.Handler(), order(fmt.Sprint("o-", i), 100+i), s.count(t, "orders"))
					var p Placed
					if err := json.Unmarshal(first.Body, &p); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, p.EventID)
				}
				idemtest.KillRelay(t, idemtest.RelayCrash{
					Command:   idemtest.RelayCommand(st.Name+"-relay", "DATABASE_URL="+dbURL, "NATS_URL="+natsURL),
					Failpoint: fp,
					DB:        dbURL,
					Messages:  messages,
					Want:      ids,
				})
			})
		}
	})
	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s, _ := open(t, st)
		s.FailAfterWrites.Store(true)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, order("order-1", 1500))
		if w.Code != http.StatusInternalServerError {
			t.Fatalf("failing handler: %d %s, want 500", w.Code, w.Body)
		}
		tables := []string{"orders", "ledger_transfers", "idem_outbox", "idem_keys"}
		for _, table := range tables {
			if n := s.count(t, table)(); n != 0 {
				t.Errorf("after the rollback %s holds %d rows, want none", table, n)
			}
		}
		// The key is free: the same request runs again, and this time
		// everything commits.
		s.FailAfterWrites.Store(false)
		w = httptest.NewRecorder()
		s.Handler().ServeHTTP(w, order("order-1", 1500))
		if w.Code != http.StatusCreated || w.Header().Get(idemhttp.HeaderReplayed) != "" {
			t.Fatalf("the retry: %d %s (replayed %q), want a first 201", w.Code, w.Body, w.Header().Get(idemhttp.HeaderReplayed))
		}
		for _, table := range tables {
			if n := s.count(t, table)(); n != 1 {
				t.Errorf("after the retry %s holds %d rows, want 1", table, n)
			}
		}
	})
}

// open gives st's shop on a fresh schema, and its URL.
func open(t *testing.T, st Stack) (*Shop, string) {
	t.Helper()
	dbURL := idemtest.Postgres(t)
	db, err := sql.Open(st.SQLDriver, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := New(context.Background(), db, st.Save)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.D.Close() })
	return s, dbURL
}

// count counts a table's rows: the orders are the effect idemtest checks.
func (s *Shop) count(t *testing.T, table string) func() int {
	return func() int {
		var n int
		// The table names are the test's own constants.
		if err := s.D.DB().QueryRowContext(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func order(key string, amount int) *http.Request {
	r, _ := http.NewRequest("POST", "/orders", strings.NewReader(fmt.Sprintf(`{"customer":"ada","amount":%d}`, amount)))
	r.Header.Set(idemhttp.HeaderKey, key)
	return r
}
