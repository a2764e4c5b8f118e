package postgres

import (
	"context"

	"github.com/idemhq/idem/driver"
)

// sqlKeyList is a loose index scan: the recursive part finds the scope's next
// distinct operation with one probe of the primary key, and each operation
// is then probed for the key. The walk stops after $3 operations, so a scope
// with very many operations cannot make one lookup unbounded.
const sqlKeyList = `
WITH RECURSIVE ops(operation, n) AS (
    SELECT (SELECT min(operation) FROM idem_keys WHERE scope = $1), 1
  UNION ALL
    SELECT (SELECT min(k.operation) FROM idem_keys k WHERE k.scope = $1 AND k.operation > ops.operation), ops.n + 1
      FROM ops WHERE ops.operation IS NOT NULL AND ops.n < $3::int
)
SELECT k.operation, k.fingerprint, k.status, k.header, k.body, k.created_at, k.expires_at
  FROM ops JOIN idem_keys k ON k.scope = $1 AND k.operation = ops.operation AND k.key = $2
 ORDER BY k.operation
 LIMIT $3::int`

func (d *Driver) KeyList(ctx context.Context, tx driver.Tx, p *driver.KeyListParams) ([]driver.KeyRecord, error) {
	rows, err := tx.Query(ctx, sqlKeyList, p.Scope, p.Key, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.KeyRecord
	for rows.Next() {
		rec := driver.KeyRecord{ID: driver.KeyID{Scope: p.Scope, Key: p.Key}}
		if err := rows.Scan(&rec.ID.Operation, &rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body,
			&rec.CreatedAt, &rec.ExpiresAt); err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

func (d *Driver) BeginSnapshot(ctx context.Context) (driver.TxCloser, error) {
	tx, err := d.beginWith(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	if err != nil {
		return nil, err // not a nil *ownedTx in a non-nil interface
	}
	return tx, nil
}
