package driver

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
