// Command bun is the shop (examples/stacks/shop) with its order row written
// by bun on pgx's stdlib: bun's query runs on idem's transaction, handed
// over as a *sql.Tx by postgres.StdSQLFromTx (.Conn(tx)).
//
//	DATABASE_URL=postgres://… NATS_URL=nats://… go run ./examples/stacks/bun
package main

import (
	"context"
	"database/sql"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/idemhq/idem/examples/stacks/shop"
)

// Order is the row as bun maps it.
type Order struct {
	bun.BaseModel `bun:"table:orders"`
	ID            string `bun:"id,pk"`
	Customer      string `bun:"customer"`
	Amount        int64  `bun:"amount"`
}

// bunDB builds bun's queries; each runs on the connection given to Conn.
// The *sql.DB under it is never used for a query here.
var bunDB = bun.NewDB(&sql.DB{}, pgdialect.New())

// saveOrder writes the order with bun in idem's transaction.
func saveOrder(ctx context.Context, tx *sql.Tx, o shop.Order) error {
	_, err := bunDB.NewInsert().Conn(tx).
		Model(&Order{ID: o.ID, Customer: o.Customer, Amount: o.Amount}).Exec(ctx)
	return err
}

var stack = shop.Stack{Name: "bun", SQLDriver: "pgx", Save: saveOrder}

func main() { shop.Main(stack.SQLDriver, stack.Save) }
