package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
)

// stack is idem's four writers on one driver, and the user's table.
type stack struct {
	d      *postgres.Driver
	keeper *idem.Keeper
	ledger *ledger.Ledger
	outbox *outbox.Outbox
	inbox  *inbox.Inbox
}

const sqlCreateOrders = `CREATE TABLE orders (id text PRIMARY KEY, amount bigint NOT NULL)`

// newStack opens a driver with cfg (its URL, Pool or DB), migrates a fresh
// schema through it and makes the user's table and two accounts.
func newStack(t *testing.T, cfg postgres.Config) *stack {
	t.Helper()
	ctx := context.Background()
	d, err := postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s := &stack{d: d}
	if s.keeper, err = idem.New(d, idem.Config{}); err != nil {
		t.Fatal(err)
	}
	if s.ledger, err = ledger.New(d, ledger.Config{}); err != nil {
		t.Fatal(err)
	}
	if s.outbox, err = outbox.New(d, outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	if s.inbox, err = inbox.New(d, inbox.Config{}); err != nil {
		t.Fatal(err)
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sqlCreateOrders); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"customers", "revenue"} {
		if _, err := s.ledger.CreateAccount(ctx, tx, "shop", ledger.NewAccount{ID: id, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// stdDB opens a database/sql pool on pgx's stdlib whose connections use
// schema.
func stdDB(t *testing.T, schema string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", testpg.URL(t)+"&search_path="+schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// place writes what one order request writes: the user's row (through
// userTx), a transfer, an outbox event and an inbox claim (through tx).
func (s *stack) place(ctx context.Context, tx driver.Tx, userTx *sql.Tx, id string) error {
	if _, err := userTx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, id, 1500); err != nil {
		return err
	}
	if _, err := s.ledger.Post(ctx, tx, "shop", ledger.NewTransfer{ID: id, DebitAccountID: "customers", CreditAccountID: "revenue", Amount: 1500, Currency: "EUR"}); err != nil {
		return err
	}
	if err := s.outbox.Enqueue(ctx, tx, outbox.Message{ID: outbox.NewID(), Tenant: "shop", Type: "order.placed", Key: id, Payload: []byte(`{"id":"` + id + `"}`)}); err != nil {
		return err
	}
	dup, err := s.inbox.Process(ctx, tx, inbox.Delivery{Consumer: "shop", MessageID: id}, func(context.Context, driver.Tx) error { return nil })
	if err == nil && dup {
		err = errors.New("inbox: a first delivery seen as a duplicate")
	}
	return err
}

// written counts what place wrote for id, table by table.
func (s *stack) written(t *testing.T, id string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for table, query := range map[string]string{
		"orders":           `SELECT count(*) FROM orders WHERE id = $1`,
		"ledger_transfers": `SELECT count(*) FROM ledger_transfers WHERE id = $1`,
		"idem_outbox":      `SELECT count(*) FROM idem_outbox WHERE okey = $1`,
		"idem_inbox":       `SELECT count(*) FROM idem_inbox WHERE message_id = $1`,
		"idem_keys":        `SELECT count(*) FROM idem_keys WHERE key = $1`,
	} {
		var n int
		if err := s.d.Reader().QueryRow(context.Background(), query, id).Scan(&n); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		got[table] = n
	}
	return got
}

func wantWritten(t *testing.T, got map[string]int, n int) {
	t.Helper()
	for table, c := range got {
		if c != n {
			t.Errorf("%s holds %d rows of the request, want %d (%v)", table, c, n, got)
		}
	}
}

func request(key string) idem.Request {
	return idem.Request{Key: idem.Key{Scope: "shop", Operation: "POST /orders", Key: key}, Body: []byte(`{"amount":1500}`)}
}

var errAfterWrites = errors.New("the handler failed after every write")

// A user's *sql.Tx, adapted by TxFromStdSQL, carries the keeper's claim and
// outcome, a transfer, an outbox event and an inbox claim beside the user's
// own row: all of it commits together, or none of it is left and the key is
// free. It holds whichever pool the driver is on.
func TestTxFromStdSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, end := range []string{"commit", "rollback"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			schema := testpg.Schema(t)
			s := newStack(t, postgres.Config{URL: testpg.URL(t), SearchPath: schema})
			db := stdDB(t, schema)
			ran := 0
			do := func() (idem.Result, error) {
				userTx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer userTx.Rollback()
				tx := postgres.TxFromStdSQL(userTx)
				if got, ok := postgres.StdSQLFromTx(tx); !ok || got != userTx {
					t.Fatalf("StdSQLFromTx(TxFromStdSQL(tx)) = %v, %v; want tx, true", got, ok)
				}
				res, err := s.keeper.DoTx(ctx, tx, request("o1"), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
					ran++
					if err := s.place(ctx, tx, userTx, "o1"); err != nil {
						return idem.Outcome{}, err
					}
					return idem.Outcome{Status: 201, Body: []byte(`{"id":"o1"}`)}, nil
				})
				if err != nil {
					return res, err
				}
				if end == "rollback" {
					return res, userTx.Rollback()
				}
				return res, userTx.Commit()
			}
			res, err := do()
			if err != nil || res.Replayed || res.Status != 201 {
				t.Fatalf("first: %+v, %v", res, err)
			}
			if end == "rollback" {
				wantWritten(t, s.written(t, "o1"), 0)
				if res, err := do(); err != nil || res.Replayed || ran != 2 {
					t.Fatalf("after a rollback the key is free: %+v, %v, ran %d", res, err, ran)
				}
				return
			}
			wantWritten(t, s.written(t, "o1"), 1)
			if res, err := do(); err != nil || !res.Replayed || string(res.Body) != `{"id":"o1"}` || ran != 1 {
				t.Fatalf("second: %+v, %v, ran %d; want a replay", res, err, ran)
			}
		})
	}
}

// A driver opened on the user's *sql.DB begins *sql.Tx transactions, and
// StdSQLFromTx hands the one the keeper's Do began to the work: the user's
// row commits with idem's, or a failed work leaves none of them and the
// key free. Close leaves the user's DB open.
func TestOpenOnDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testpg.Schema(t)
	db := stdDB(t, schema)
	s := newStack(t, postgres.Config{DB: db})
	if s.d.DB() != db || s.d.Pool() != nil {
		t.Fatalf("DB() = %p, Pool() = %p; want the user's DB and no pool", s.d.DB(), s.d.Pool())
	}
	fail := true
	work := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		userTx, ok := postgres.StdSQLFromTx(tx)
		if !ok {
			return idem.Outcome{}, errors.New("StdSQLFromTx refused the keeper's transaction")
		}
		if err := s.place(ctx, tx, userTx, "o1"); err != nil {
			return idem.Outcome{}, err
		}
		if fail {
			return idem.Outcome{}, errAfterWrites
		}
		return idem.Outcome{Status: 201}, nil
	}
	if _, err := s.keeper.Do(ctx, request("o1"), work); !errors.Is(err, errAfterWrites) {
		t.Fatalf("Do: %v, want the work's error", err)
	}
	wantWritten(t, s.written(t, "o1"), 0)
	fail = false
	if res, err := s.keeper.Do(ctx, request("o1"), work); err != nil || res.Replayed {
		t.Fatalf("Do after a failure: %+v, %v; want a first run", res, err)
	}
	wantWritten(t, s.written(t, "o1"), 1)
	if res, err := s.keeper.Do(ctx, request("o1"), work); err != nil || !res.Replayed {
		t.Fatalf("Do again: %+v, %v; want a replay", res, err)
	}

	// lock_timeout is set in each transaction: the user's DB has no
	// session default of idem's.
	tx, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var lockTimeout string
	if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lockTimeout); err != nil || lockTimeout != "5s" {
		t.Fatalf("lock_timeout %q, %v; want the driver's 5s", lockTimeout, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := s.d.MigrationStatus(ctx); err != nil || st.Applied != st.Latest {
		t.Fatalf("MigrationStatus: %+v, %v", st, err)
	}
	if err := s.d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("the user's DB after the driver's Close: %v", err)
	}
}

// A driver opened on the user's pgx pool runs on it, sets its lock wait per
// transaction, and leaves the pool open when closed.
func TestOpenOnPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testpg.URL(t)+"&search_path="+testpg.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := newStack(t, postgres.Config{Pool: pool, LockTimeout: 3 * time.Second})
	if s.d.Pool() != pool {
		t.Fatal("Pool() is not the user's pool")
	}
	if res, err := s.keeper.Do(ctx, request("o1"), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		ptx, ok := postgres.PgxFromTx(tx)
		if !ok {
			return idem.Outcome{}, errors.New("PgxFromTx refused")
		}
		if _, err := ptx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, "o1", 1500); err != nil {
			return idem.Outcome{}, err
		}
		var lockTimeout string
		if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lockTimeout); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{Status: 201, Body: []byte(lockTimeout)}, nil
	}); err != nil || res.Replayed || string(res.Body) != "5s" && string(res.Body) != "3s" {
		t.Fatalf("Do: %+v, %v", res, err)
	}
	tx, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var lockTimeout string
	if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lockTimeout); err != nil || lockTimeout != "3s" {
		t.Fatalf("lock_timeout %q, %v; want Config's 3s", lockTimeout, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.d.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the user's pool after the driver's Close: %d orders, %v", n, err)
	}
}

// Bad input is refused with an error that names it, never a panic: a nil
// *sql.Tx, a *sql.Tx on SQLite, a transaction of a pgx pool asked for as a
// *sql.Tx, and a Config naming two databases or none.
func TestStdSQLRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, postgres.Config{URL: testpg.URL(t), SearchPath: testpg.Schema(t)})

	if _, err := s.keeper.DoTx(ctx, postgres.TxFromStdSQL(nil), request("k"), nil); !errors.Is(err, driver.ErrNoTx) {
		t.Errorf("DoTx on TxFromStdSQL(nil): %v, want ErrNoTx", err)
	}
	if _, ok := postgres.StdSQLFromTx(nil); ok {
		t.Error("StdSQLFromTx(nil): ok")
	}

	lite, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "other.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	liteTx, err := lite.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer liteTx.Rollback()
	foreign := postgres.TxFromStdSQL(liteTx)
	_, err = s.ledger.Post(ctx, foreign, "shop", ledger.NewTransfer{DebitAccountID: "customers", CreditAccountID: "revenue", Amount: 1, Currency: "EUR"})
	if !errors.Is(err, driver.ErrWrongDialect) || !strings.Contains(err.Error(), "not on PostgreSQL") {
		t.Errorf("ledger.Post on a SQLite *sql.Tx: %v, want ErrWrongDialect naming it", err)
	}
	ran := false
	_, err = s.keeper.DoTx(ctx, foreign, request("k"), func(context.Context, driver.Tx) (idem.Outcome, error) {
		ran = true
		return idem.Outcome{Status: 200}, nil
	})
	if !errors.Is(err, driver.ErrWrongDialect) || ran {
		t.Errorf("DoTx on a SQLite *sql.Tx: %v, ran %v; want ErrWrongDialect before the work", err, ran)
	}

	tx, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, ok := postgres.StdSQLFromTx(tx); ok {
		t.Error("StdSQLFromTx of a pgx pool's transaction: ok")
	}
	if _, ok := sqlite.StdSQLFromTx(postgres.TxFromStdSQL(liteTx)); ok {
		t.Error("sqlite.StdSQLFromTx of postgres.TxFromStdSQL: ok")
	}

	// A pool or DB its owner closed fails each call with its own error.
	closedPool, err := pgxpool.New(ctx, testpg.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	closedPool.Close()
	closedDB := stdDB(t, "public")
	closedDB.Close()
	for name, cfg := range map[string]postgres.Config{"Pool": {Pool: closedPool}, "DB": {DB: closedDB}} {
		d, err := postgres.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		k, err := idem.New(d, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = k.Do(ctx, request("k"), func(context.Context, driver.Tx) (idem.Outcome, error) {
			return idem.Outcome{Status: 200}, nil
		})
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("Do on a closed %s: %v, want an error saying it is closed", name, err)
		}
	}

	db := stdDB(t, "public")
	for name, cfg := range map[string]postgres.Config{
		"none":            {},
		"URL and DB":      {URL: testpg.URL(t), DB: db},
		"DB and MaxConns": {DB: db, MaxConns: 4},
	} {
		if _, err := postgres.Open(ctx, cfg); err == nil || !strings.Contains(err.Error(), "postgres: ") {
			t.Errorf("Open(%s): %v, want a refusal", name, err)
		}
	}
}

// The array arguments idem's statements take read back as written through
// database/sql, quotes, braces, backslashes and empty strings included.
func TestStdSQLArrays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := stdDB(t, "public")
	tx := postgres.TxFromStdSQL(mustBegin(t, db))
	strs := []string{"", `a"b`, `c\d`, "{e,f}", "NULL", "g h"}
	var got string
	if err := tx.QueryRow(ctx, `SELECT array_to_json($1::text[])::text`, strs).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := `["","a\"b","c\\d","{e,f}","NULL","g h"]`; got != want {
		t.Errorf("text[] %s, want %s", got, want)
	}
	if err := tx.QueryRow(ctx, `SELECT array_to_json(array(SELECT encode(b, 'hex') FROM unnest($1::bytea[]) b))::text`, [][]byte{{0, 1, 0xfe}, {}}).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := `["0001fe",""]`; got != want {
		t.Errorf("bytea[] %s, want %s", got, want)
	}
	at := time.Date(2026, 12, 2, 5, 6, 7, 123456000, time.UTC)
	var back time.Time
	if err := tx.QueryRow(ctx, `SELECT ($1::timestamptz[])[1]`, []time.Time{at}).Scan(&back); err != nil || !back.Equal(at) {
		t.Errorf("timestamptz[] %s, %v; want %s", back, err, at)
	}
	var sum int64
	if err := tx.QueryRow(ctx, `SELECT sum(x) FROM unnest($1::bigint[]) x`, []int64{1, -2, 1 << 40}).Scan(&sum); err != nil || sum != 1<<40-1 {
		t.Errorf("bigint[] sum %d, %v", sum, err)
	}
	var isNull bool
	if err := tx.QueryRow(ctx, `SELECT $1::text[] IS NULL`, []string(nil)).Scan(&isNull); err != nil || !isNull {
		t.Errorf("a nil []string is NULL: %v, %v", isNull, err)
	}
}

func mustBegin(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// A batch's claims, outcomes and releases run in a user's *sql.Tx as in the
// driver's own: the records find their claims, counted on the rows the
// statements return, and commit with the user's transaction.
func TestStdSQLKeyBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testpg.Schema(t)
	s := newStack(t, postgres.Config{URL: testpg.URL(t), SearchPath: schema})
	userTx := mustBegin(t, stdDB(t, schema))
	tx := postgres.TxFromStdSQL(userTx)
	ids := []driver.KeyID{{Scope: "shop", Operation: "POST", Key: "a"}, {Scope: "shop", Operation: "POST", Key: "b"}, {Scope: "shop", Operation: "POST", Key: "c"}}
	claims := make([]driver.KeyClaimItem, len(ids))
	for i, id := range ids {
		claims[i] = driver.KeyClaimItem{ID: id, Fingerprint: []byte("fp")}
	}
	now := time.Now()
	res, err := s.d.KeyClaimBatch(ctx, tx, &driver.KeyClaimBatchParams{Claims: claims, Now: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil || len(res) != 3 || !res[0].Claimed || !res[1].Claimed || !res[2].Claimed {
		t.Fatalf("claims: %+v, %v", res, err)
	}
	err = s.d.KeyRecordBatch(ctx, tx, &driver.KeyRecordBatchParams{
		Records: []driver.KeyRecordParams{{ID: ids[0], Status: 201, Body: []byte("a")}, {ID: ids[1], Status: 409, Body: []byte("b")}},
		Release: ids[2:]})
	if err != nil {
		t.Fatalf("record and release: %v", err)
	}
	if err := userTx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{201, 409} {
		if rec, err := s.d.KeyGet(ctx, s.d.Reader(), &driver.KeyGetParams{ID: ids[i]}); err != nil || rec.Status != want {
			t.Errorf("key %s: %+v, %v; want status %d", ids[i].Key, rec, err, want)
		}
	}
	if _, err := s.d.KeyGet(ctx, s.d.Reader(), &driver.KeyGetParams{ID: ids[2]}); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("released key c: %v, want ErrNotFound", err)
	}
}
