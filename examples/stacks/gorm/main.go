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

// gormDB maps the models once. Each write runs in a session on the *sql.Tx
// it is given, so the *sql.DB under it is never used for a query here and
// is not pinged; a service opens it on its own *sql.DB.
var gormDB = openGORM()

func openGORM() *gorm.DB {
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: &sql.DB{}}),
		&gorm.Config{SkipDefaultTransaction: true, DisableAutomaticPing: true})
	if err != nil {
		panic(err) // only a bad configuration fails: nothing is dialled
	}
	return db
}

// saveOrder writes the order with GORM in idem's transaction: a session of
// gormDB whose connection is the *sql.Tx. GORM's own transaction around a
// write is off: idem's transaction is the one.
func saveOrder(ctx context.Context, tx *sql.Tx, o shop.Order) error {
	db := gormDB.Session(&gorm.Session{NewDB: true, Context: ctx})
	db.Statement.ConnPool = tx // as GORM's own Begin does with its *sql.Tx
	return db.Create(&Order{ID: o.ID, Customer: o.Customer, Amount: o.Amount}).Error
}

var stack = shop.Stack{Name: "gorm", SQLDriver: "pgx", Save: saveOrder}

func main() { shop.Main(stack.SQLDriver, stack.Save) }
