package drivertest

import (
	"context"
	"sync/atomic"

	"github.com/idemhq/idem/driver"
)

// CountingTx passes statements to a transaction and counts them, so a test
// can show how many round trips a call makes.
type CountingTx struct {
	driver.Tx
	n atomic.Int64
}

// Counting wraps tx.
func Counting(tx driver.Tx) *CountingTx { return &CountingTx{Tx: tx} }

// Statements is how many statements were sent through c so far.
func (c *CountingTx) Statements() int { return int(c.n.Load()) }

func (c *CountingTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	c.n.Add(1)
	return c.Tx.Exec(ctx, sql, args...)
}

func (c *CountingTx) Query(ctx context.Context, sql string, args ...any) (driver.Rows, error) {
	c.n.Add(1)
	return c.Tx.Query(ctx, sql, args...)
}

func (c *CountingTx) QueryRow(ctx context.Context, sql string, args ...any) driver.Row {
	c.n.Add(1)
	return c.Tx.QueryRow(ctx, sql, args...)
}
