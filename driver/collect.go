package driver

import "context"

// Collect runs sql in tx and returns every row as scan decodes it: the one
// row loop of both drivers. A scan error ends the read and is returned
// alone; otherwise the rows' own error (a failed read past the last
// row) is.
func Collect[T any](ctx context.Context, tx Tx, scan func(Row) (T, error), sql string, args ...any) ([]T, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return CollectRows(rows, scan)
}

// CollectRows decodes every row of rows with scan, for rows a driver
// already holds (a pipelined statement's). It does not close rows.
func CollectRows[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
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

// Value adapts a decoder that returns a pointer (as the single-row reads
// share it with QueryRow) to Collect, which gathers values.
func Value[T any](scan func(Row) (*T, error)) func(Row) (T, error) {
	return func(r Row) (T, error) {
		v, err := scan(r)
		if err != nil {
			var zero T
			return zero, err
		}
		return *v, nil
	}
}

// ScanInt decodes a row of one integer column.
func ScanInt(r Row) (int, error) {
	var n int
	err := r.Scan(&n)
	return n, err
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
