package driver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
)

// Collect gathers every row in order on both drivers; a decoder's error
// ends the read and is returned alone, and the statement's own error is
// the driver's mapped one.
func TestCollect(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		const three = `SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 ORDER BY 1`
		got, err := driver.Collect(ctx, tx, driver.ScanInt, three)
		if err != nil || fmt.Sprint(got) != "[1 2 3]" {
			t.Fatalf("Collect = %v, %v; want [1 2 3]", got, err)
		}
		none, err := driver.Collect(ctx, tx, driver.ScanInt, `SELECT 1 WHERE 1 = 0`)
		if err != nil || len(none) != 0 {
			t.Fatalf("Collect of no rows = %v, %v", none, err)
		}
		stop := errors.New("decoder refuses 2")
		got, err = driver.Collect(ctx, tx, func(r driver.Row) (int, error) {
			n, err := driver.ScanInt(r)
			if n == 2 {
				return 0, stop
			}
			return n, err
		}, three)
		if !errors.Is(err, stop) || got != nil {
			t.Fatalf("Collect with a failing decoder = %v, %v; want nil, %v", got, err, stop)
		}
	})
}

// MapCommon is the start of every driver's error mapping: nil, the
// driver's no-rows error as ErrNotFound (the original kept), a context's
// error as it is; anything else is left to the driver.
func TestMapCommon(t *testing.T) {
	t.Parallel()
	if m, ok := driver.MapCommon(nil, sql.ErrNoRows); m != nil || !ok {
		t.Errorf("MapCommon(nil) = %v, %v", m, ok)
	}
	noRows := fmt.Errorf("scan: %w", sql.ErrNoRows)
	if m, ok := driver.MapCommon(noRows, sql.ErrNoRows); !ok || !errors.Is(m, driver.ErrNotFound) || !errors.Is(m, sql.ErrNoRows) {
		t.Errorf("MapCommon(no rows) = %v, %v; want ErrNotFound wrapping sql.ErrNoRows", m, ok)
	}
	for _, err := range []error{context.Canceled, fmt.Errorf("read: %w", context.DeadlineExceeded)} {
		if m, ok := driver.MapCommon(err, sql.ErrNoRows); !ok || m != err {
			t.Errorf("MapCommon(%v) = %v, %v; want it unchanged", err, m, ok)
		}
	}
	other := errors.New("disk full")
	if m, ok := driver.MapCommon(other, sql.ErrNoRows); ok || m != other {
		t.Errorf("MapCommon(other) = %v, %v; want it left to the driver", m, ok)
	}
}
