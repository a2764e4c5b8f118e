package sqlite

import (
	"context"
	"time"

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

// See the Postgres driver. Ids are text, in the lowercase form Enqueue
// writes, so text order is UUID order; the range is walked backwards
// through the id's unique index.
const outboxBrowseRange = `
SELECT id FROM idem_outbox
 WHERE id < ?1 AND id > ?2
 ORDER BY id DESC
 LIMIT ?3`

const sqlOutboxBrowseScanned = `
SELECT count(*), coalesce(min(id), '') FROM (` + outboxBrowseRange + `)`

const sqlOutboxBrowse = `
SELECT ` + outboxColumns + `
  FROM idem_outbox
 WHERE id IN (` + outboxBrowseRange + `)
   AND tenant = ?4 AND (?5 = '' OR type = ?5) AND (?6 = '' OR okey = ?6)
 ORDER BY id DESC
 LIMIT ?7`

const (
	lowestUUID  = "00000000-0000-0000-0000-000000000000"
	highestUUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"
)

func (d *Driver) OutboxBrowse(ctx context.Context, tx driver.Tx, p *driver.OutboxBrowseParams) (*driver.OutboxBrowsed, error) {
	before, after := p.BeforeID, p.AfterID
	if before == "" {
		before = highestUUID
	}
	if after == "" {
		after = lowestUUID
	}
	var b driver.OutboxBrowsed
	if err := tx.QueryRow(ctx, sqlOutboxBrowseScanned, before, after, p.ScanLimit).Scan(&b.Scanned, &b.Lowest); err != nil {
		return nil, err
	}
	var err error
	b.Rows, err = queryOutboxRows(ctx, tx, sqlOutboxBrowse, before, after, p.ScanLimit, p.Tenant, p.Type, p.Key, p.Limit)
	if err != nil {
		return nil, err
	}
	return &b, nil
}

const sqlOutboxGet = `SELECT ` + outboxColumns + ` FROM idem_outbox WHERE id = ?1`

func (d *Driver) OutboxGet(ctx context.Context, tx driver.Tx, p *driver.OutboxGetParams) (*driver.OutboxRow, error) {
	rows, err := queryOutboxRows(ctx, tx, sqlOutboxGet, p.ID)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, driver.ErrNotFound
	}
	return &rows[0], nil
}

const sqlOutboxPublished = `
SELECT count(*), coalesce(max(sent_at - created_at), 0)
  FROM idem_outbox
 WHERE sent_at > ?1 AND sent_at <= ?2`

func (d *Driver) OutboxPublished(ctx context.Context, tx driver.Tx, p *driver.OutboxPublishedParams) (*driver.OutboxPublishedStats, error) {
	var s driver.OutboxPublishedStats
	var slowestUS int64
	if err := tx.QueryRow(ctx, sqlOutboxPublished, toMicros(p.After), toMicros(p.Until)).Scan(&s.Count, &slowestUS); err != nil {
		return nil, err
	}
	s.Slowest = max(time.Duration(slowestUS)*time.Microsecond, 0)
	return &s, nil
}

// See the Postgres driver: at most ?4 records of the expiry range, through
// idem_keys_expires_at, are searched for the body (instr on blobs compares
// bytes).
const sqlKeyFind = `
SELECT k.operation, k.key, k.fingerprint, k.status, k.header, k.body, k.created_at, k.expires_at
  FROM (SELECT * FROM idem_keys
         WHERE expires_at >= ?2 AND expires_at <= ?3
         ORDER BY expires_at
         LIMIT ?4) k
 WHERE k.scope = ?1 AND instr(k.body, ?5) > 0
 ORDER BY k.created_at
 LIMIT ?6`

func (d *Driver) KeyFind(ctx context.Context, tx driver.Tx, p *driver.KeyFindParams) ([]driver.KeyRecord, error) {
	rows, err := tx.Query(ctx, sqlKeyFind, p.Scope, toMicros(p.ExpiresFrom), toMicros(p.ExpiresUntil), p.ScanLimit,
		p.BodyContains, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.KeyRecord
	for rows.Next() {
		rec := driver.KeyRecord{ID: driver.KeyID{Scope: p.Scope}}
		var created, expires int64
		if err := rows.Scan(&rec.ID.Operation, &rec.ID.Key, &rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body,
			&created, &expires); err != nil {
			return nil, err
		}
		rec.CreatedAt, rec.ExpiresAt = fromMicros(created), fromMicros(expires)
		out = append(out, rec)
	}
	return out, rows.Err()
}
