// Command gorm is the shop (examples/stacks/shop) with its order row written
// by GORM on pgx's stdlib: a GORM session on idem's transaction, handed over
// as a *sql.Tx by postgres.StdSQLFromTx.
//
//	DATABASE_URL=postgres://… NATS_URL=nats://… go run ./examples/stacks/gorm
package main

import (
	"context"
	"database/sql"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/idemhq/idem/examples/stacks/shop"
)

// Order is the row as GORM maps it (table orders).
type Order struct {
	ID       string `gorm:"primaryKey"`
	Customer string
	Amount   int64
}

// saveOrder writes the order with GORM in idem's transaction. GORM's own
// transaction around a write is off: idem's transaction is the one.
func saveOrder(ctx context.Context, tx *sql.Tx, o shop.Order) error {
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: tx}),
		&gorm.Config{SkipDefaultTransaction: true})
	if err != nil {
		return err
	}
	return db.WithContext(ctx).Create(&Order{ID: o.ID, Customer: o.Customer, Amount: o.Amount}).Error
}

var stack = shop.Stack{Name: "gorm", SQLDriver: "pgx", Save: saveOrder}

func main() { shop.Main(stack.SQLDriver, stack.Save) }
