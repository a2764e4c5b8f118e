package idemhttp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/drivertest"
)

// The tables of the user's own SQL: an order and its lines.
const sqlCreateShop = `CREATE TABLE shop_orders (id text PRIMARY KEY, tenant text NOT NULL, customer text NOT NULL);
CREATE TABLE shop_lines (order_id text NOT NULL REFERENCES shop_orders (id), sku text NOT NULL, qty int NOT NULL)`

// pgDBTX and pgQueries are what sqlc generates for pgx/v5 (sql_package:
// "pgx/v5") from `-- name: InsertOrder :one`: any pgx.Tx satisfies DBTX.
type pgDBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}

type pgQueries struct{ db pgDBTX }

func newPgQueries(db pgDBTX) *pgQueries { return &pgQueries{db: db} }

type InsertOrderParams struct {
	ID       string
	Tenant   string
	Customer string
}

const pgInsertOrder = `INSERT INTO shop_orders (id, tenant, customer) VALUES ($1, $2, $3) RETURNING id`

func (q *pgQueries) InsertOrder(ctx context.Context, arg InsertOrderParams) (string, error) {
	row := q.db.QueryRow(ctx, pgInsertOrder, arg.ID, arg.Tenant, arg.Customer)
	var id string
	err := row.Scan(&id)
	return id, err
}

// sqlDBTX and sqlQueries are the same query as sqlc generates it for
// database/sql (engine: sqlite): any *sql.Tx satisfies DBTX.
type sqlDBTX interface {
	ExecContext(context.Context, string, ...interface{}) (sql.Result, error)
	PrepareContext(context.Context, string) (*sql.Stmt, error)
	QueryContext(context.Context, string, ...interface{}) (*sql.Rows, error)
	QueryRowContext(context.Context, string, ...interface{}) *sql.Row
}

type sqlQueries struct{ db sqlDBTX }

func newSQLQueries(db sqlDBTX) *sqlQueries { return &sqlQueries{db: db} }

const sqlInsertOrderRow = `INSERT INTO shop_orders (id, tenant, customer) VALUES (?, ?, ?) RETURNING id`

func (q *sqlQueries) InsertOrder(ctx context.Context, arg InsertOrderParams) (string, error) {
	row := q.db.QueryRowContext(ctx, sqlInsertOrderRow, arg.ID, arg.Tenant, arg.Customer)
	var id string
	err := row.Scan(&id)
	return id, err
}

const sqlInsertLine = `INSERT INTO shop_lines (order_id, sku, qty) VALUES (?, ?, ?)`

func (q *sqlQueries) InsertLine(ctx context.Context, orderID, sku string, qty int) error {
	_, err := q.db.ExecContext(ctx, sqlInsertLine, orderID, sku, qty)
	return err
}

type shopOrder struct {
	Customer string `json:"customer"`
	Lines    []struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	} `json:"lines"`
	Fail bool `json:"fail"` // answer 503 after writing everything
}

// pgShop is a guarded handler written against pgx: the order through
// sqlc's queries, its lines with CopyFrom, and a batch that counts what
// the transaction holds, all in the key's transaction.
func pgShop(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var in shopOrder
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		idemhttp.MarkInvalid(ctx)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tx, ok := postgres.PgxFromTx(idemhttp.Tx(ctx))
	if !ok {
		http.Error(w, "not a Postgres transaction", http.StatusInternalServerError)
		return
	}
	key, _ := idemhttp.KeyFrom(ctx)
	id, err := newPgQueries(tx).InsertOrder(ctx, InsertOrderParams{ID: randomID(), Tenant: key.Scope, Customer: in.Customer})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	rows := make([][]any, len(in.Lines))
	for i, l := range in.Lines {
		rows[i] = []any{id, l.SKU, l.Qty}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"shop_lines"}, []string{"order_id", "sku", "qty"}, pgx.CopyFromRows(rows)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var lines int
	b := &pgx.Batch{}
	b.Queue(`SELECT count(*) FROM shop_lines WHERE order_id = $1`, id).QueryRow(func(row pgx.Row) error { return row.Scan(&lines) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	answer(w, in, id, lines)
}

// sqliteShop is the same handler written against database/sql.
func sqliteShop(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var in shopOrder
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		idemhttp.MarkInvalid(ctx)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tx, ok := sqlite.StdSQLFromTx(idemhttp.Tx(ctx))
	if !ok {
		http.Error(w, "not a SQLite transaction", http.StatusInternalServerError)
		return
	}
	key, _ := idemhttp.KeyFrom(ctx)
	q := newSQLQueries(tx)
	id, err := q.InsertOrder(ctx, InsertOrderParams{ID: randomID(), Tenant: key.Scope, Customer: in.Customer})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	for _, l := range in.Lines {
		if err := q.InsertLine(ctx, id, l.SKU, l.Qty); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	var lines int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM shop_lines WHERE order_id = ?`, id).Scan(&lines); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	answer(w, in, id, lines)
}

func answer(w http.ResponseWriter, in shopOrder, id string, lines int) {
	if in.Fail {
		http.Error(w, "the warehouse is down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%q,"lines":%d}`, id, lines)
}

// The user's own SQL (sqlc's queries, CopyFrom, a batch; *sql.Tx on
// SQLite) runs in the key's transaction: a replay writes nothing more, and
// a 5xx from the handler rolls the user's rows back with the key.
func TestOwnSQLInKeyTx(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range strings.Split(sqlCreateShop, ";") {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		k, err := idem.New(d, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := idemhttp.New(idemhttp.Config{Keeper: k})
		if err != nil {
			t.Fatal(err)
		}
		shop := http.HandlerFunc(pgShop)
		if d.Dialect() == "sqlite" {
			shop = sqliteShop
		}
		srv := newServer(mw, shop)
		t.Cleanup(srv.Close)
		count := func() (orders, lines int) {
			t.Helper()
			if err := d.Reader().QueryRow(ctx, `SELECT (SELECT count(*) FROM shop_orders), (SELECT count(*) FROM shop_lines)`).Scan(&orders, &lines); err != nil {
				t.Fatal(err)
			}
			return orders, lines
		}
		send := func(key, body string, wantStatus int, wantReplayed string) string {
			t.Helper()
			req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(body))
			req.Header.Set(idemhttp.HeaderKey, key)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != wantStatus || resp.Header.Get(idemhttp.HeaderReplayed) != wantReplayed {
				t.Fatalf("%s: %d replayed=%q %s, want %d replayed=%q", key, resp.StatusCode,
					resp.Header.Get(idemhttp.HeaderReplayed), b, wantStatus, wantReplayed)
			}
			return string(b)
		}

		const order = `{"customer":"ada","lines":[{"sku":"tea","qty":2},{"sku":"cup","qty":1},{"sku":"pot","qty":1}]}`
		first := send("k-1", order, http.StatusCreated, "")
		if !strings.Contains(first, `"lines":3`) {
			t.Fatalf("first answer %s: the batch did not see the copied lines", first)
		}
		if again := send("k-1", order, http.StatusCreated, "true"); again != first {
			t.Fatalf("replay %s, want %s", again, first)
		}
		if o, l := count(); o != 1 || l != 3 {
			t.Fatalf("after a replay: %d orders and %d lines, want 1 and 3", o, l)
		}

		// A 5xx after writing the order and its lines rolls them back with
		// the key: the retry runs again, and fails again, leaving nothing.
		failing := `{"customer":"bob","lines":[{"sku":"tea","qty":1}],"fail":true}`
		for range 2 {
			send("k-2", failing, http.StatusServiceUnavailable, "")
			if o, l := count(); o != 1 || l != 3 {
				t.Fatalf("after a 503: %d orders and %d lines, want 1 and 3", o, l)
			}
		}
		if n := countKeys(t, d); n != 1 {
			t.Fatalf("%d keys stored, want 1 (the 503's key stays free)", n)
		}
	})
}
