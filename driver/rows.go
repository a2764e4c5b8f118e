package driver

import "context"

// CollectRows reads every row of a query through scan, one value a row,
// and closes them. err is the query's own, so that a reader of many rows
// is two lines:
//
//	rows, err := tx.Query(ctx, sql, args...)
//	return driver.CollectRows(rows, err, scanThing)
func CollectRows[T any](rows Rows, err error, scan func(Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ExecFound runs a statement meant to change one row, and answers
// ErrNotFound when it changed none.
func ExecFound(ctx context.Context, tx Tx, sql string, args ...any) error {
	n, err := tx.Exec(ctx, sql, args...)
	if err == nil && n == 0 {
		err = ErrNotFound
	}
	return err
}

// ExecEach runs each statement with the same args, in order, and stops at
// the first error.
func ExecEach(ctx context.Context, tx Tx, stmts []string, args ...any) error {
	for _, sql := range stmts {
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return err
		}
	}
	return nil
}

// QueryRows runs a query and reads every row through scan (CollectRows).
func QueryRows[T any](ctx context.Context, tx Tx, scan func(Row) (T, error), sql string, args ...any) ([]T, error) {
	rows, err := tx.Query(ctx, sql, args...)
	return CollectRows(rows, err, scan)
}
