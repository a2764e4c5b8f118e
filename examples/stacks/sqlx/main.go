// Command sqlx is the shop (examples/stacks/shop) with its order row written
// by sqlx on lib/pq, in idem's transaction, handed over as a *sql.Tx by
// postgres.StdSQLFromTx.
//
//	DATABASE_URL=postgres://… NATS_URL=nats://… go run ./examples/stacks/sqlx
package main

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // database/sql's "postgres"

	"github.com/idemhq/idem/examples/stacks/shop"
)

// order is the row as sqlx maps it.
type order struct {
	ID       string `db:"id"`
	Customer string `db:"customer"`
	Amount   int64  `db:"amount"`
}

// sqlxTx is a *sql.Tx seen by sqlx: sqlx.Tx's driver name, which picks
// the bindvars ($1 for PostgreSQL), is set only by sqlx's own Begin.
type sqlxTx struct{ *sqlx.Tx }

func (sqlxTx) DriverName() string { return "postgres" }

// saveOrder writes the order with sqlx in idem's transaction.
func saveOrder(ctx context.Context, tx *sql.Tx, o shop.Order) error {
	_, err := sqlx.NamedExecContext(ctx, sqlxTx{&sqlx.Tx{Tx: tx}},
		`INSERT INTO orders (id, customer, amount) VALUES (:id, :customer, :amount)`,
		order{ID: o.ID, Customer: o.Customer, Amount: o.Amount})
	return err
}

var stack = shop.Stack{Name: "sqlx", SQLDriver: "postgres", Save: saveOrder}

func main() { shop.Main(stack.SQLDriver, stack.Save) }
