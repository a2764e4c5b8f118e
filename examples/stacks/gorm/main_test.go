package main

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/idemhq/idem/examples/stacks/shop"
	"github.com/idemhq/idem/idemtest"
)

func TestMain(m *testing.M) {
	shop.RelayMain(stack) // the crash test re-runs this binary as a relay
	os.Exit(idemtest.Main(m))
}

// idemtest's two tests and the rollback test, on gorm.
func TestGORM(t *testing.T) { shop.Check(t, stack) }

// A session on a request's *sql.Tx leaves the shared gormDB as it was: the
// next request's session must not find the last one's transaction.
func TestGORMSessionLeavesTheSharedDB(t *testing.T) {
	db, err := sql.Open("pgx", idemtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, shop.SQLCreateOrders); err != nil {
		t.Fatal(err)
	}
	pool := gormDB.Statement.ConnPool
	for _, id := range []string{"o-1", "o-2"} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := saveOrder(ctx, tx, shop.Order{ID: id, Customer: "c", Amount: 1}); err != nil {
			t.Fatal(err)
		}
		if gormDB.Statement.ConnPool != pool {
			t.Fatalf("after saving %s gormDB runs on %T, want the pool it was opened on", id, gormDB.Statement.ConnPool)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("orders holds %d rows, want 2", n)
	}
}
