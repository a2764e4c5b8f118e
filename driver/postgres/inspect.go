package postgres

import (
	"context"
	"time"

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
SELECT k.operation, k.fingerprint, k.status, k.header, k.body, k.sealed, k.created_at, k.expires_at
  FROM ops JOIN idem_keys k ON k.scope = $1 AND k.operation = ops.operation AND k.key = $2
 ORDER BY k.operation
 LIMIT $3::int`

func (d *Driver) KeyList(ctx context.Context, tx driver.Tx, p *driver.KeyListParams) ([]driver.KeyRecord, error) {
	return driver.Collect(ctx, tx, func(r driver.Row) (driver.KeyRecord, error) {
		rec := driver.KeyRecord{ID: driver.KeyID{Scope: p.Scope, Key: p.Key}}
		err := r.Scan(&rec.ID.Operation, &rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.Sealed,
			&rec.CreatedAt, &rec.ExpiresAt)
		return rec, err
	}, sqlKeyList, p.Scope, p.Key, p.Limit)
}

func (d *Driver) BeginSnapshot(ctx context.Context) (driver.TxCloser, error) {
	stmts := []queuedStmt{{sql: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"}}
	if d.pooler != nil {
		stmts = append(stmts, queuedStmt{sql: d.pooler.opening, args: d.pooler.args("")})
	}
	tx, err := d.beginWith(ctx, stmts...)
	if err != nil {
		return nil, err // not a nil *ownedTx in a non-nil interface
	}
	return tx, nil
}

// The id range of a browse, newest first (driver.BrowseOutbox): the
// primary key, walked backwards. (min(uuid) is not in every supported
// version: the lowest id is read as text, whose order is the UUIDs'.)
const outboxBrowseRange = `
SELECT id FROM idem_outbox
 WHERE id < $1::uuid AND id > $2::uuid
 ORDER BY id DESC
 LIMIT $3`

const sqlOutboxBrowseScanned = `
SELECT count(*), coalesce(min(id::text), '') FROM (` + outboxBrowseRange + `) s`

const sqlOutboxBrowse = `
SELECT ` + outboxColumns + `
  FROM idem_outbox
 WHERE id IN (` + outboxBrowseRange + `)
   AND tenant = $4 AND ($5 = '' OR type = $5) AND ($6 = '' OR okey = $6)
 ORDER BY id DESC
 LIMIT $7`

func (d *Driver) OutboxBrowse(ctx context.Context, tx driver.Tx, p *driver.OutboxBrowseParams) (*driver.OutboxBrowsed, error) {
	return driver.BrowseOutbox(ctx, tx, &outboxQueries, p)
}

const sqlOutboxGet = `SELECT ` + outboxColumns + ` FROM idem_outbox WHERE id = $1::uuid`

func (d *Driver) OutboxGet(ctx context.Context, tx driver.Tx, p *driver.OutboxGetParams) (*driver.OutboxRow, error) {
	return driver.GetOutbox(ctx, tx, &outboxQueries, p)
}

// sent_at has a block-range index: rows are marked roughly in sent_at
// order, so a short window reads few blocks.
const sqlOutboxPublished = `
SELECT count(*), coalesce(max(extract(epoch FROM sent_at - created_at)), 0)::float8
  FROM idem_outbox
 WHERE sent_at > $1 AND sent_at <= $2`

func (d *Driver) OutboxPublished(ctx context.Context, tx driver.Tx, p *driver.OutboxPublishedParams) (*driver.OutboxPublishedStats, error) {
	var s driver.OutboxPublishedStats
	var slowest float64
	if err := tx.QueryRow(ctx, sqlOutboxPublished, p.After, p.Until).Scan(&s.Count, &slowest); err != nil {
		return nil, err
	}
	s.Slowest = max(time.Duration(slowest*float64(time.Second)), 0)
	return &s, nil
}

// The expiry range is read through idem_keys_expires_at, at most $4
// records of it; only those are searched for the body.
const sqlKeyFind = `
SELECT k.operation, k.key, k.fingerprint, k.status, k.header, k.body, k.sealed, k.created_at, k.expires_at
  FROM (SELECT * FROM idem_keys
         WHERE expires_at >= $2 AND expires_at <= $3
         ORDER BY expires_at
         LIMIT $4) k
 WHERE k.scope = $1 AND position($5::bytea IN k.body) > 0
 ORDER BY k.created_at
 LIMIT $6`

func (d *Driver) KeyFind(ctx context.Context, tx driver.Tx, p *driver.KeyFindParams) ([]driver.KeyRecord, error) {
	return driver.Collect(ctx, tx, func(r driver.Row) (driver.KeyRecord, error) {
		rec := driver.KeyRecord{ID: driver.KeyID{Scope: p.Scope}}
		err := r.Scan(&rec.ID.Operation, &rec.ID.Key, &rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.Sealed,
			&rec.CreatedAt, &rec.ExpiresAt)
		return rec, err
	}, sqlKeyFind, p.Scope, p.ExpiresFrom, p.ExpiresUntil, p.ScanLimit, p.BodyContains, p.Limit)
}

// sqlLedgerBalanceEnds reads each bucket's first and last entries: two
// primary-key lookups per bucket. $3 first, $4 last, $5 width.
const sqlLedgerBalanceEnds = `
SELECT b.first, b.last, f.created_at, l.created_at,
       f.credits_posted - f.debits_posted, l.credits_posted - l.debits_posted
  FROM (SELECT $3::bigint + i * $5::bigint AS first, least($3::bigint + (i + 1) * $5::bigint - 1, $4::bigint) AS last
          FROM generate_series(0::bigint, ($4::bigint - $3::bigint) / $5::bigint) AS i) AS b
  JOIN ledger_entries f ON f.tenant = $1 AND f.account_id = $2 AND f.sequence = b.first
  JOIN ledger_entries l ON l.tenant = $1 AND l.account_id = $2 AND l.sequence = b.last
 ORDER BY b.first`

// sqlLedgerBalanceExtremes adds each bucket's lowest and highest balance:
// one range of the primary key per bucket, aggregated as it is read. A
// GROUP BY over the whole range would do the same work, but the planner
// cannot know the number of buckets and plans for one group per entry (a
// sort spilling to disk).
const sqlLedgerBalanceExtremes = `
SELECT b.first, b.last, f.created_at, l.created_at,
       f.credits_posted - f.debits_posted, l.credits_posted - l.debits_posted, x.lo, x.hi
  FROM (SELECT $3::bigint + i * $5::bigint AS first, least($3::bigint + (i + 1) * $5::bigint - 1, $4::bigint) AS last
          FROM generate_series(0::bigint, ($4::bigint - $3::bigint) / $5::bigint) AS i) AS b
  JOIN ledger_entries f ON f.tenant = $1 AND f.account_id = $2 AND f.sequence = b.first
  JOIN ledger_entries l ON l.tenant = $1 AND l.account_id = $2 AND l.sequence = b.last
 CROSS JOIN LATERAL (
       SELECT min(e.credits_posted - e.debits_posted) AS lo, max(e.credits_posted - e.debits_posted) AS hi
         FROM ledger_entries e
        WHERE e.tenant = $1 AND e.account_id = $2 AND e.sequence BETWEEN b.first AND b.last) AS x
 ORDER BY b.first`

// sqlJITOff keeps Postgres from compiling the extremes query: for a long
// history its estimated cost passes jit_above_cost, and compiling costs
// more than it saves (a million entries on a busy 2-core machine: 350-670
// ms with JIT, about 200 ms without).
const sqlJITOff = `SET LOCAL jit = off`

func (d *Driver) LedgerBalanceBuckets(ctx context.Context, tx driver.Tx, p *driver.LedgerBalanceBucketsParams) ([]driver.LedgerBalanceBucket, error) {
	n, err := p.Buckets()
	if err != nil {
		return nil, err
	}
	q := sqlLedgerBalanceEnds
	if p.Extremes {
		q = sqlLedgerBalanceExtremes
		if _, err := tx.Exec(ctx, sqlJITOff); err != nil {
			return nil, err
		}
	}
	rows, err := tx.Query(ctx, q, p.Tenant, p.AccountID, p.First, p.Last, p.Width)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]driver.LedgerBalanceBucket, 0, n)
	for rows.Next() {
		var b driver.LedgerBalanceBucket
		dest := []any{&b.FirstSequence, &b.LastSequence, &b.FirstAt, &b.LastAt, &b.First, &b.Last}
		if p.Extremes {
			dest = append(dest, &b.Min, &b.Max)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if !p.Extremes {
			b.Min, b.Max = min(b.First, b.Last), max(b.First, b.Last)
		}
		b.FirstAt, b.LastAt = b.FirstAt.UTC(), b.LastAt.UTC()
		out = append(out, b)
	}
	return out, rows.Err()
}

// sqlLedgerAccountReversals walks the tenant's reversals by their partial
// index and finds each one's entry on the account by the (account, time)
// index: an entry is recorded at its transfer's time.
const sqlLedgerAccountReversals = `
SELECT e.sequence, e.created_at, e.credits_posted - e.debits_posted, t.id, t.reverses_id
  FROM ledger_transfers t
  JOIN ledger_entries e ON e.tenant = t.tenant AND e.account_id = $2 AND e.created_at = t.created_at AND e.transfer_id = t.id
 WHERE t.tenant = $1 AND t.reverses_id IS NOT NULL AND (t.debit_account_id = $2 OR t.credit_account_id = $2)
   AND e.sequence <= $3
 ORDER BY e.sequence DESC
 LIMIT $4`

func (d *Driver) LedgerAccountReversals(ctx context.Context, tx driver.Tx, p *driver.LedgerAccountReversalsParams) ([]driver.LedgerReversalEntry, error) {
	return driver.Collect(ctx, tx, func(rows driver.Row) (driver.LedgerReversalEntry, error) {
		var r driver.LedgerReversalEntry
		err := rows.Scan(&r.Sequence, &r.CreatedAt, &r.Balance, &r.TransferID, &r.ReversesID)
		r.CreatedAt = r.CreatedAt.UTC()
		return r, err
	}, sqlLedgerAccountReversals, p.Tenant, p.AccountID, p.MaxSequence, p.Limit)
}
