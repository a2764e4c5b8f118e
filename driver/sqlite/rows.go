package sqlite

import (
	"context"
	"math/bits"
	"strings"

	"github.com/idemhq/idem/driver"
)

// A batch's rows are bound as the VALUES rows of one statement, each value
// a parameter: nothing to encode as JSON in Go and decode again in SQLite.
// So that a few statements, kept prepared (stmt.go), serve every batch, a
// statement holds a power of two of rows, 1 to 2,048 (rowsStmt), and a
// batch takes the smallest that holds it: the rows past the batch's are
// left NULL, and the statements skip a row whose first value is NULL (an
// UPDATE's join finds none for it): at most as many NULLs as the batch has
// values, cheap to bind. A batch of more than 2,048 rows takes a statement
// per 2,048.

// maxRowsLog2 is log2 of the most rows a statement holds: 2,048 rows of at
// most 15 values stay within SQLite's bound of 32,766 parameters.
const maxRowsLog2 = 11

// rowsStmt is a statement of 1<<k rows at index k.
type rowsStmt [maxRowsLog2 + 1]string

// newRowsStmt repeats row, comma-separated, between head and tail.
func newRowsStmt(head, row, tail string) (s rowsStmt) {
	for k := range s {
		s[k] = head + strings.Repeat(row+", ", 1<<k-1) + row + tail
	}
	return s
}

// eachStmt calls fn with the statements n rows take: the index k of each,
// the batch's rows lo..hi it holds, and its arguments, made by row (cols
// values a row) and padded with NULLs.
func eachStmt(n, cols int, row func(args []any, i int) []any, fn func(k, lo, hi int, args []any) error) error {
	for lo := 0; lo < n; {
		k := min(bits.Len(uint(n-lo-1)), maxRowsLog2)
		hi := min(n, lo+1<<k)
		args := make([]any, 0, cols<<k)
		for i := lo; i < hi; i++ {
			args = row(args, i)
		}
		args = args[:cols<<k] // the padding: nil is NULL
		if err := fn(k, lo, hi, args); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// writeRows runs stmt for n rows and returns the number of rows it changed.
func writeRows(ctx context.Context, tx driver.Tx, stmt *rowsStmt, n, cols int, row func(args []any, i int) []any) (int64, error) {
	var changed int64
	err := eachStmt(n, cols, row, func(k, _, _ int, args []any) error {
		m, err := tx.Exec(ctx, stmt[k], args...)
		changed += m
		return err
	})
	return changed, err
}

// textOrNull binds "" as NULL.
func textOrNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}
