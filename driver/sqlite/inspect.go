package sqlite

import (
	"context"

	"github.com/idemhq/idem/driver"
)

// See the Postgres driver: a loose index scan over the primary key, bounded
// by ?3 operations.
const sqlKeyList = `
WITH RECURSIVE ops(operation, n) AS (
    SELECT (SELECT min(operation) FROM idem_keys WHERE scope = ?1), 1
  UNION ALL
    SELECT (SELECT min(k.operation) FROM idem_keys k WHERE k.scope = ?1 AND k.operation > ops.operation), ops.n + 1
      FROM ops WHERE ops.operation IS NOT NULL AND ops.n < ?3
)
SELECT k.operation, k.fingerprint, k.status, k.header, k.body, k.created_at, k.expires_at
  FROM ops JOIN idem_keys k ON k.scope = ?1 AND k.operation = ops.operation AND k.key = ?2
 ORDER BY k.operation
 LIMIT ?3`

func (d *Driver) KeyList(ctx context.Context, tx driver.Tx, p *driver.KeyListParams) ([]driver.KeyRecord, error) {
	rows, err := tx.Query(ctx, sqlKeyList, p.Scope, p.Key, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.KeyRecord
	for rows.Next() {
		rec := driver.KeyRecord{ID: driver.KeyID{Scope: p.Scope, Key: p.Key}}
		var created, expires int64
		if err := rows.Scan(&rec.ID.Operation, &rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body,
			&created, &expires); err != nil {
			return nil, err
		}
		rec.CreatedAt, rec.ExpiresAt = fromMicros(created), fromMicros(expires)
		out = append(out, rec)
	}
	return out, rows.Err()
}

// BeginSnapshot is a read transaction on the reader pool: in WAL mode its
// snapshot is fixed by its first read and held until it ends.
func (d *Driver) BeginSnapshot(ctx context.Context) (driver.TxCloser, error) {
	return d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
}
