package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/testpg"
)

// A write refused because the session's server turned read-only (here
// default_transaction_read_only set on the pool's one connection, as a
// failover's demoted primary or an operator's switch does) is
// ErrReadOnlyTransaction, not ErrUnavailable, and not retryable on that
// connection: the driver closes it, and the next write, on a new
// connection checked read-write at connect, commits.
func TestReadOnlySessionIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := Open(ctx, Config{URL: testpg.URL(t), SearchPath: testpg.Schema(t), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Pool().Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	opened := d.Pool().Stat().NewConnsCount()
	write := func(id int) error {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit a no-op
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, id); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	err = write(1)
	if !errors.Is(err, driver.ErrReadOnlyTransaction) || errors.Is(err, driver.ErrUnavailable) || driver.IsRetryable(err) {
		t.Fatalf("a write on a read-only session: %v; want ErrReadOnlyTransaction alone", err)
	}
	if err := write(2); err != nil {
		t.Fatalf("the next write: %v; want it on a new, writable connection", err)
	}
	var ids []int32
	rows, err := d.Pool().Query(ctx, `SELECT id FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int32
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 1 || ids[0] != 2 || d.Pool().Stat().NewConnsCount() != opened+1 {
		t.Fatalf("rows %v, connections opened %d; want [2] and one new connection", ids, d.Pool().Stat().NewConnsCount()-opened)
	}
}
