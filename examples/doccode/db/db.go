// Package db is what sqlc generates in pgx/v5 mode (sql_package: "pgx/v5")
// for the query docs/idemhttp.md shows:
//
//	-- name: InsertOrder :one
//	INSERT INTO shop_orders (id, tenant, customer) VALUES ($1, $2, $3) RETURNING id;
//
// It is written out here so that the page's handler, which calls it,
// compiles in TestDocBlocksCompile.
package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the queries run on: a pgx.Tx (or a pool, or a connection).
type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}

// New returns the queries on db.
func New(db DBTX) *Queries { return &Queries{db: db} }

// Queries holds the generated queries.
type Queries struct{ db DBTX }

const insertOrder = `INSERT INTO shop_orders (id, tenant, customer) VALUES ($1, $2, $3) RETURNING id`

// InsertOrderParams are InsertOrder's arguments.
type InsertOrderParams struct {
	ID       string
	Tenant   string
	Customer string
}

// InsertOrder inserts one order and returns its id.
func (q *Queries) InsertOrder(ctx context.Context, arg InsertOrderParams) (string, error) {
	row := q.db.QueryRow(ctx, insertOrder, arg.ID, arg.Tenant, arg.Customer)
	var id string
	err := row.Scan(&id)
	return id, err
}
