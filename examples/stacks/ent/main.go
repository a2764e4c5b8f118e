// Command ent is the shop (examples/stacks/shop) with its order row written
// by ent's generated client (./ent, from ./ent/schema) on pgx's stdlib: an
// ent client over idem's transaction, handed over as a *sql.Tx by
// postgres.StdSQLFromTx.
//
//	DATABASE_URL=postgres://… NATS_URL=nats://… go run ./examples/stacks/ent
package main

import (
	"context"
	"database/sql"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"

	"github.com/idemhq/idem/examples/stacks/ent/ent"
	"github.com/idemhq/idem/examples/stacks/shop"
)

// saveOrder writes the order with ent in idem's transaction: the client's
// driver is the *sql.Tx, so it never begins or commits one of its own.
func saveOrder(ctx context.Context, tx *sql.Tx, o shop.Order) error {
	drv := entsql.NewDriver(dialect.Postgres, entsql.Conn{ExecQuerier: tx})
	client := ent.NewClient(ent.Driver(drv))
	return client.Order.Create().SetID(o.ID).SetCustomer(o.Customer).
		SetAmount(o.Amount).Exec(ctx)
}

var stack = shop.Stack{Name: "ent", SQLDriver: "pgx", Save: saveOrder}

func main() { shop.Main(stack.SQLDriver, stack.Save) }
