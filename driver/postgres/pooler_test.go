package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/internal/testpgbouncer"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
)

// sqlstate is the SQLSTATE err carries, or "".
func sqlstate(err error) string {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code
	}
	return ""
}

// Behind PgBouncer in transaction mode, with fewer server connections than
// idem's pool, every session setting idem needs holds in every transaction
// and every reader statement (none is lost: a statement that sleeps past
// statement_timeout is cancelled by it, a lock wait ends at lock_timeout),
// and the keeper, the ledger, the outbox and the inbox write through it from
// many goroutines at once: a named prepared statement of one server session
// would be missing on the next. Migrate runs twice at once, serialized.
func TestThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgb := testpgbouncer.New(t, testpg.URL(t), testpgbouncer.Options{PoolSize: 2})
	schema := testpg.Schema(t)
	cfg := postgres.Config{URL: pgb.URL + "&" + postgres.PoolerParam + "=transaction", SearchPath: schema, MaxConns: 8,
		StatementTimeout: 300 * time.Millisecond, IdleInTransactionTimeout: 2 * time.Second}

	// Two migrators at once: the lock is a transaction's, held open.
	other, err := postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	migrated := make(chan error, 1)
	go func() { migrated <- other.Migrate(ctx) }()
	s := newStack(t, cfg)
	if err := <-migrated; err != nil {
		t.Fatalf("the second migrator: %v", err)
	}
	if st, err := s.d.MigrationStatus(ctx); err != nil || st.Pending() || st.Applied != st.Latest {
		t.Fatalf("migration status through the pooler: %+v, %v", st, err)
	}

	want := map[string]string{"statement_timeout": "300ms", "lock_timeout": "5s",
		"idle_in_transaction_session_timeout": "2s", "search_path": schema}
	settings := func(q driver.Tx) map[string]string {
		t.Helper()
		got := map[string]string{}
		for name := range want {
			var v string
			if err := q.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got[name] = v
		}
		return got
	}
	tx, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := settings(tx); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a transaction's settings through the pooler: %v, want %v", got, want)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_sleep(3)`); sqlstate(err) != "57014" || !errors.Is(err, driver.ErrStatementTimeout) {
		t.Errorf("a statement sleeping past statement_timeout in a transaction: %v, want 57014 (canceled by statement_timeout)", err)
	}
	_ = tx.Rollback(ctx)
	if got := settings(s.d.Reader()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the reader's settings through the pooler: %v, want %v", got, want)
	}
	if _, err := s.d.Reader().Exec(ctx, `SELECT pg_sleep(3)`); sqlstate(err) != "57014" {
		t.Errorf("a reader statement sleeping past statement_timeout: %v, want 57014", err)
	}

	// A transaction left idle past idle_in_transaction_session_timeout
	// ends: its locks (a key's claim) do not outlive a vanished client.
	idle, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ('idle', 1)`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := idle.Exec(ctx, `SELECT 1`); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("a statement after idling in a transaction past its timeout: %v, want ErrUnavailable", err)
	}
	_ = idle.Rollback(ctx)
	var idleRows int
	if err := s.d.Reader().QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = 'idle'`).Scan(&idleRows); err != nil || idleRows != 0 {
		t.Errorf("the idle transaction's row: %d, %v; want none", idleRows, err)
	}

	// A lock wait ends at lock_timeout: the holder keeps its transaction
	// (and its server connection) open meanwhile.
	holder, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ('locked', 1)`); err != nil {
		t.Fatal(err)
	}
	waiter, err := s.d.Begin(ctx, driver.BeginOptions{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ('locked', 2)`); !errors.Is(err, driver.ErrLockTimeout) {
		t.Errorf("a lock wait through the pooler: %v, want ErrLockTimeout", err)
	}
	_ = waiter.Rollback(ctx)
	_ = holder.Rollback(ctx)

	// Idem's writers from 16 goroutines over 8 client connections and 2
	// server connections.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Go(func() {
			for i := range 4 {
				id := fmt.Sprintf("o%d-%d", g, i)
				_, err := s.keeper.Do(ctx, request(id), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
					if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, id, 1500); err != nil {
						return idem.Outcome{}, err
					}
					if _, err := s.ledger.Post(ctx, tx, "shop", ledger.NewTransfer{ID: id, DebitAccountID: "customers", CreditAccountID: "revenue", Amount: 1500, Currency: "EUR"}); err != nil {
						return idem.Outcome{}, err
					}
					if err := s.outbox.Enqueue(ctx, tx, outbox.Message{ID: outbox.NewID(), Tenant: "shop", Type: "order.placed", Key: id, Payload: []byte(`{"id":"` + id + `"}`)}); err != nil {
						return idem.Outcome{}, err
					}
					return idem.Outcome{Status: 201, Body: []byte(id)}, nil
				})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, table := range []string{"orders", "ledger_transfers", "idem_outbox", "idem_keys"} {
		var n int
		if err := s.d.Reader().QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 64 {
			t.Errorf("%s holds %d rows, %v; want 64", table, n, err)
		}
	}
	res, err := s.keeper.Do(ctx, request("o3-1"), func(context.Context, driver.Tx) (idem.Outcome, error) {
		return idem.Outcome{}, errors.New("a retry ran the work again")
	})
	if err != nil || !res.Replayed || string(res.Body) != "o3-1" {
		t.Errorf("a retry through the pooler: %+v, %v; want the stored outcome replayed", res, err)
	}
}

// Without the pooler setting, PgBouncer refuses idem's session settings at
// connect, and the error says what to set.
func TestPoolerRefusesSessionSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgb := testpgbouncer.New(t, testpg.URL(t), testpgbouncer.Options{PoolSize: 1})
	d, err := postgres.Open(ctx, postgres.Config{URL: pgb.URL, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	err = d.Ping(ctx)
	if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") || !strings.Contains(err.Error(), "idem_pooler=transaction") {
		t.Fatalf("a connection through PgBouncer without idem_pooler: %v; want the refusal and what to set", err)
	}
}

// A pooler in session mode with fewer server connections than idem's pool:
// a new connection the pooler cannot serve fails at connect, saying so,
// instead of hanging each statement sent on it until its deadline; Ping
// (readiness) reports it until a new connection is served again.
func TestSessionPoolerTooSmall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgb := testpgbouncer.New(t, testpg.URL(t), testpgbouncer.Options{Session: true, PoolSize: 2})
	d, err := postgres.Open(ctx, postgres.Config{URL: pgb.URL + "&idem_pooler=transaction", SearchPath: testpg.Schema(t),
		MaxConns: 4, ConnectTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Two transactions hold the pooler's two server connections.
	var held []driver.TxCloser
	release := func() {
		for _, tx := range held {
			_ = tx.Rollback(ctx)
		}
		held = nil
	}
	defer release()
	for range 2 {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tx)
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT 1`)
		_ = tx.Rollback(ctx)
	}
	if !errors.Is(err, driver.ErrPoolerExhausted) || !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "pool_mode = transaction") {
		t.Fatalf("a third transaction through a session pooler of two: %v; want ErrPoolerExhausted saying what to change", err)
	}
	if err := d.Ping(ctx); !errors.Is(err, driver.ErrPoolerExhausted) {
		t.Errorf("Ping while the pooler is short: %v, want ErrPoolerExhausted", err)
	}
	release()
	// The pooler keeps its server connections for idem's two client
	// connections; a third is served once one of those is closed.
	d.Pool().Reset()
	if err := d.Ping(ctx); err != nil {
		t.Errorf("Ping once the pooler serves new connections again: %v", err)
	}
}
