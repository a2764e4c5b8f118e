// Command sqlc is the shop (examples/stacks/shop) with its order row written
// by sqlc's generated queries in database/sql mode (db/, from query.sql),
// on lib/pq: the queries run in idem's transaction, handed over as a
// *sql.Tx by postgres.StdSQLFromTx.
//
//	DATABASE_URL=postgres://… NATS_URL=nats://… go run ./examples/stacks/sqlc
package main

import (
	"context"
	"database/sql"

	_ "github.com/lib/pq" // database/sql's "postgres"

	"github.com/idemhq/idem/examples/stacks/shop"
	"github.com/idemhq/idem/examples/stacks/sqlc/db"
)

// saveOrder writes the order with sqlc's queries in idem's transaction.
func saveOrder(ctx context.Context, tx *sql.Tx, o shop.Order) error {
	_, err := db.New(tx).InsertOrder(ctx, db.InsertOrderParams{
		ID: o.ID, Customer: o.Customer, Amount: o.Amount})
	return err
}

var stack = shop.Stack{Name: "sqlc", SQLDriver: "postgres", Save: saveOrder}

func main() { shop.Main(stack.SQLDriver, stack.Save) }
