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
SELECT k.operation, k.fingerprint, k.status, k.header, k.body, k.sealed, k.created_at, k.expires_at
  FROM ops JOIN idem_keys k ON k.scope = ?1 AND k.operation = ops.operation AND k.key = ?2
 ORDER BY k.operation
 LIMIT ?3`

func (d *Driver) KeyList(ctx context.Context, tx driver.Tx, p *driver.KeyListParams) ([]driver.KeyRecord, error) {
	return driver.Collect(ctx, tx, func(r driver.Row) (driver.KeyRecord, error) {
		rec := driver.KeyRecord{ID: driver.KeyID{Scope: p.Scope, Key: p.Key}}
		var created, expires int64
		err := r.Scan(&rec.ID.Operation, &rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.Sealed, &created, &expires)
		rec.CreatedAt, rec.ExpiresAt = fromMicros(created), fromMicros(expires)
		return rec, err
	}, sqlKeyList, p.Scope, p.Key, p.Limit)
}

// BeginSnapshot is a read transaction on the reader pool: in WAL mode its
// snapshot is fixed by its first read and held until it ends.
func (d *Driver) BeginSnapshot(ctx context.Context) (driver.TxCloser, error) {
	return d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
}

// The id range of a browse, newest first (driver.BrowseOutbox). Ids are
// text, in the lowercase form Enqueue writes, so text order is UUID order;
// the range is walked backwards through the id's unique index.
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

func (d *Driver) OutboxBrowse(ctx context.Context, tx driver.Tx, p *driver.OutboxBrowseParams) (*driver.OutboxBrowsed, error) {
	return driver.BrowseOutbox(ctx, tx, &outboxQueries, p)
}

const sqlOutboxGet = `SELECT ` + outboxColumns + ` FROM idem_outbox WHERE id = ?1`

func (d *Driver) OutboxGet(ctx context.Context, tx driver.Tx, p *driver.OutboxGetParams) (*driver.OutboxRow, error) {
	return driver.GetOutbox(ctx, tx, &outboxQueries, p)
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
SELECT k.operation, k.key, k.fingerprint, k.status, k.header, k.body, k.sealed, k.created_at, k.expires_at
  FROM (SELECT * FROM idem_keys
         WHERE expires_at >= ?2 AND expires_at <= ?3
         ORDER BY expires_at
         LIMIT ?4) k
 WHERE k.scope = ?1 AND instr(k.body, ?5) > 0
 ORDER BY k.created_at
 LIMIT ?6`

func (d *Driver) KeyFind(ctx context.Context, tx driver.Tx, p *driver.KeyFindParams) ([]driver.KeyRecord, error) {
	return driver.Collect(ctx, tx, func(r driver.Row) (driver.KeyRecord, error) {
		rec := driver.KeyRecord{ID: driver.KeyID{Scope: p.Scope}}
		var created, expires int64
		err := r.Scan(&rec.ID.Operation, &rec.ID.Key, &rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.Sealed,
			&created, &expires)
		rec.CreatedAt, rec.ExpiresAt = fromMicros(created), fromMicros(expires)
		return rec, err
	}, sqlKeyFind, p.Scope, toMicros(p.ExpiresFrom), toMicros(p.ExpiresUntil), p.ScanLimit, p.BodyContains, p.Limit)
}

// sqlLedgerBalanceEnds reads each bucket's first and last entries: two
// primary-key lookups per bucket. ?3 first, ?4 last, ?5 width. CROSS JOIN
// keeps the buckets the outer loop: SQLite knows nothing of the CTE's size,
// and with statistics from when the ledger was small it read every entry of
// the account once per other entry instead (a million entries: minutes).
const sqlLedgerBalanceEnds = `
WITH RECURSIVE b(first) AS (
    SELECT ?3
  UNION ALL
    SELECT first + ?5 FROM b WHERE first + ?5 <= ?4
)
SELECT b.first, l.sequence, f.created_at, l.created_at,
       f.credits_posted - f.debits_posted, l.credits_posted - l.debits_posted
  FROM b
 CROSS JOIN ledger_entries f ON f.tenant = ?1 AND f.account_id = ?2 AND f.sequence = b.first
 CROSS JOIN ledger_entries l ON l.tenant = ?1 AND l.account_id = ?2 AND l.sequence = min(b.first + ?5 - 1, ?4)
 ORDER BY b.first`

// sqlLedgerBalanceExtremes is one bucket's lowest and highest balance: one
// range of the primary key (the table is clustered by it). It runs once per
// bucket: in one statement SQLite would either sort every entry for a
// GROUP BY or read each bucket twice (one subquery per aggregate), and a
// statement costs little in process.
const sqlLedgerBalanceExtremes = `
SELECT min(credits_posted - debits_posted), max(credits_posted - debits_posted)
  FROM ledger_entries
 WHERE tenant = ?1 AND account_id = ?2 AND sequence BETWEEN ?3 AND ?4`

func (d *Driver) LedgerBalanceBuckets(ctx context.Context, tx driver.Tx, p *driver.LedgerBalanceBucketsParams) ([]driver.LedgerBalanceBucket, error) {
	n, err := p.Buckets()
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sqlLedgerBalanceEnds, p.Tenant, p.AccountID, p.First, p.Last, p.Width)
	if err != nil {
		return nil, err
	}
	out := make([]driver.LedgerBalanceBucket, 0, n)
	for rows.Next() {
		var b driver.LedgerBalanceBucket
		var firstAt, lastAt int64
		if err := rows.Scan(&b.FirstSequence, &b.LastSequence, &firstAt, &lastAt, &b.First, &b.Last); err != nil {
			rows.Close()
			return nil, err
		}
		b.FirstAt, b.LastAt = fromMicros(firstAt), fromMicros(lastAt)
		b.Min, b.Max = min(b.First, b.Last), max(b.First, b.Last)
		out = append(out, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil || !p.Extremes {
		return out, err
	}
	for i := range out {
		b := &out[i]
		if err := tx.QueryRow(ctx, sqlLedgerBalanceExtremes, p.Tenant, p.AccountID, b.FirstSequence, b.LastSequence).
			Scan(&b.Min, &b.Max); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// See the Postgres driver: the tenant's reversals by their partial index,
// each one's entry by the (account, time) index. CROSS JOIN keeps that
// order whatever the statistics say (the other would read every entry of
// the account).
const sqlLedgerAccountReversals = `
SELECT e.sequence, e.created_at, e.credits_posted - e.debits_posted, t.id, t.reverses_id
  FROM ledger_transfers t
 CROSS JOIN ledger_entries e ON e.tenant = t.tenant AND e.account_id = ?2 AND e.created_at = t.created_at AND e.transfer_id = t.id
 WHERE t.tenant = ?1 AND t.reverses_id IS NOT NULL AND (t.debit_account_id = ?2 OR t.credit_account_id = ?2)
   AND e.sequence <= ?3
 ORDER BY e.sequence DESC
 LIMIT ?4`

func (d *Driver) LedgerAccountReversals(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountReversalsParams) ([]driver.LedgerReversalEntry, error) {
	return driver.Collect(ctx, tx, func(rows driver.Row) (driver.LedgerReversalEntry, error) {
		var r driver.LedgerReversalEntry
		var at int64
		err := rows.Scan(&r.Sequence, &at, &r.Balance, &r.TransferID, &r.ReversesID)
		r.CreatedAt = fromMicros(at)
		return r, err
	}, sqlLedgerAccountReversals, p.Tenant, p.AccountID, p.MaxSequence, p.Limit)
}
