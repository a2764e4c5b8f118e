package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/idemhq/idem/driver"
)

// SQLite serializes writers, so pos (the rowid) is given at insert and is
// already the commit order: there is nothing to sequence. Lists of ids and
// shards travel as JSON arrays read with json_each.
//
// Rows are inserted by one statement (rows.go), in order, so that their
// positions follow it. A JSON list would carry the payloads hex-encoded:
// twice their size, past SQLite's string bound for a full batch of large
// messages.
var sqlOutboxInsert = newRowsStmt(`
INSERT INTO idem_outbox (id, tenant, type, okey, shard, payload, headers, created_at, traceparent, tracestate, sealed)
SELECT column1, column2, column3, column4, column5, column6, column7, column8,
       nullif(column9, ''), nullif(column10, ''), column11
  FROM (VALUES `, `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, `) WHERE column1 IS NOT NULL`)

const outboxColumns = `id, tenant, type, okey, shard, payload, headers, created_at,
       0, pos, attempts, coalesce(last_error, ''), sent_at, dead_at,
       coalesce(traceparent, ''), coalesce(tracestate, ''), sealed`

const sqlOutboxFetch = `
SELECT ` + outboxColumns + `
  FROM idem_outbox o
 WHERE o.sent_at IS NULL AND o.dead_at IS NULL
   AND o.shard IN (SELECT value FROM json_each(?1)) AND o.pos > ?4
   AND NOT EXISTS (SELECT 1 FROM idem_outbox_holds h
                    WHERE h.tenant = o.tenant AND h.okey = o.okey AND (h.dead OR h.until > ?2))
 ORDER BY o.pos
 LIMIT ?3`

const sqlOutboxMarkSent = `UPDATE idem_outbox SET sent_at = ?2 WHERE id IN (SELECT value FROM json_each(?1))`

const sqlOutboxFailRow = `
UPDATE idem_outbox SET attempts = ?2, last_error = ?3,
       dead_at = CASE WHEN ?4 THEN ?5 END
 WHERE id = ?1`

const sqlOutboxHold = `
INSERT INTO idem_outbox_holds (tenant, okey, until, dead) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (tenant, okey) DO UPDATE SET until = excluded.until, dead = excluded.dead`

const sqlOutboxList = `
SELECT ` + outboxColumns + `
  FROM idem_outbox
 WHERE tenant = ?1 AND pos > ?2
 ORDER BY pos
 LIMIT ?3`

const sqlOutboxListDead = `
SELECT ` + outboxColumns + `
  FROM idem_outbox
 WHERE dead_at IS NOT NULL AND pos > ?1
 ORDER BY pos
 LIMIT ?2`

const sqlOutboxRedrive = `
UPDATE idem_outbox SET dead_at = NULL, attempts = 0, last_error = NULL
 WHERE id = ?1 AND dead_at IS NOT NULL
RETURNING tenant, okey`

// A redriven dead letter's key stays held, as a backoff until ?3, unless
// another dead letter holds it.
const sqlOutboxUnhold = `
UPDATE idem_outbox_holds SET dead = 0, until = ?3
 WHERE tenant = ?1 AND okey = ?2
   AND NOT EXISTS (SELECT 1 FROM idem_outbox
                    WHERE dead_at IS NOT NULL AND tenant = ?1 AND okey = ?2)`

const sqlOutboxDeleteSent = `
DELETE FROM idem_outbox WHERE pos IN (
  SELECT pos FROM idem_outbox WHERE sent_at < ?1 LIMIT ?2)`

const sqlOutboxDeleteHolds = `DELETE FROM idem_outbox_holds WHERE NOT dead AND until < ?1`

const sqlOutboxStats = `
SELECT (SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL AND dead_at IS NULL),
       (SELECT min(created_at) FROM idem_outbox WHERE sent_at IS NULL AND dead_at IS NULL),
       (SELECT count(*) FROM idem_outbox WHERE dead_at IS NOT NULL)`

const sqlOutboxHeartbeat = `
INSERT INTO idem_outbox_relays (owner, seen_until) VALUES (?1, ?2)
ON CONFLICT (owner) DO UPDATE SET seen_until = excluded.seen_until`

const sqlOutboxForgetRelays = `DELETE FROM idem_outbox_relays WHERE seen_until < ?1`

const sqlOutboxCountRelays = `SELECT count(*) FROM idem_outbox_relays`

// Writers are serialized, so no SKIP LOCKED is needed: the acquiring
// transaction is alone.
const sqlOutboxShardAcquire = `
UPDATE idem_outbox_shards SET owner = ?1, lease_until = ?3
 WHERE shard IN (SELECT shard FROM idem_outbox_shards
                  WHERE lease_until <= ?2 ORDER BY shard LIMIT ?4)
RETURNING shard`

const sqlOutboxShardRenew = `
UPDATE idem_outbox_shards SET lease_until = ?3
 WHERE owner = ?1 AND shard IN (SELECT value FROM json_each(?2))
RETURNING shard`

const sqlOutboxShardRelease = `
UPDATE idem_outbox_shards SET owner = '', lease_until = 0
 WHERE owner = ?1 AND shard IN (SELECT value FROM json_each(?2))`

const sqlOutboxShardReleaseAll = `UPDATE idem_outbox_shards SET owner = '', lease_until = 0 WHERE owner = ?1`

const sqlOutboxForgetRelay = `DELETE FROM idem_outbox_relays WHERE owner = ?1`

func (d *Driver) OutboxInsert(ctx context.Context, tx driver.Tx, p *driver.OutboxInsertParams) error {
	_, err := writeRows(ctx, tx, &sqlOutboxInsert, len(p.Rows), 11, func(args []any, i int) []any {
		r := &p.Rows[i]
		return append(args, r.ID, r.Tenant, r.Type, r.Key, r.Shard,
			r.Payload, r.Headers, toMicros(r.CreatedAt), r.TraceParent, r.TraceState, r.Sealed)
	})
	return err
}

// OutboxFetch's Horizon is 0: writers are serialized, so a row's pos is
// given in commit order and nothing commits behind a read.
func (d *Driver) OutboxFetch(ctx context.Context, tx driver.Tx, p *driver.OutboxFetchParams) (*driver.OutboxFetched, error) {
	var after int64
	if p.After != nil {
		after = p.After.Pos
	}
	rows, err := queryOutboxRows(ctx, tx, sqlOutboxFetch, jsonArray(p.Shards), toMicros(p.Now), p.Limit, after)
	if err != nil {
		return nil, err
	}
	return &driver.OutboxFetched{Rows: rows}, nil
}

func (d *Driver) OutboxMarkSent(ctx context.Context, tx driver.Tx, p *driver.OutboxMarkSentParams) error {
	_, err := tx.Exec(ctx, sqlOutboxMarkSent, jsonArray(p.IDs), toMicros(p.Now))
	return err
}

func (d *Driver) OutboxFail(ctx context.Context, tx driver.Tx, p *driver.OutboxFailParams) error {
	return driver.OutboxFail(ctx, tx, &outboxQueries, p)
}

func (d *Driver) OutboxList(ctx context.Context, tx driver.Tx, p *driver.OutboxListParams) ([]driver.OutboxRow, error) {
	return queryOutboxRows(ctx, tx, sqlOutboxList, p.Tenant, p.AfterPos, p.Limit)
}

const (
	sqlOutboxSecret     = `SELECT value FROM idem_secrets WHERE name = ?1`
	sqlOutboxSecretInit = `INSERT INTO idem_secrets (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING`
)

func (d *Driver) OutboxSecret(ctx context.Context, tx driver.Tx, p *driver.OutboxSecretParams) ([]byte, error) {
	return driver.OutboxSecret(ctx, tx, &outboxQueries, p)
}

func (d *Driver) OutboxSecretInit(ctx context.Context, tx driver.Tx, p *driver.OutboxSecretInitParams) error {
	return driver.OutboxSecretInit(ctx, tx, &outboxQueries, p)
}

func (d *Driver) OutboxListDead(ctx context.Context, tx driver.Tx, p *driver.OutboxListDeadParams) ([]driver.OutboxRow, error) {
	return queryOutboxRows(ctx, tx, sqlOutboxListDead, p.AfterPos, p.Limit)
}

func (d *Driver) OutboxRedrive(ctx context.Context, tx driver.Tx, p *driver.OutboxRedriveParams) error {
	return driver.OutboxRedrive(ctx, tx, &outboxQueries, p)
}

func (d *Driver) OutboxDeleteSent(ctx context.Context, tx driver.Tx, p *driver.OutboxDeleteSentParams) (int, error) {
	return driver.OutboxDeleteSent(ctx, tx, &outboxQueries, p)
}

func (d *Driver) OutboxStats(ctx context.Context, tx driver.Tx) (*driver.OutboxStats, error) {
	var s driver.OutboxStats
	var oldest sql.NullInt64
	if err := tx.QueryRow(ctx, sqlOutboxStats).Scan(&s.Unsent, &oldest, &s.Dead); err != nil {
		return nil, err
	}
	if oldest.Valid {
		s.OldestUnsent = fromMicros(oldest.Int64)
	}
	return &s, nil
}

func (d *Driver) OutboxHeartbeat(ctx context.Context, tx driver.Tx, p *driver.OutboxHeartbeatParams) (int, error) {
	if _, err := tx.Exec(ctx, sqlOutboxHeartbeat, p.Owner, toMicros(p.Until)); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, sqlOutboxForgetRelays, toMicros(p.Now)); err != nil {
		return 0, err
	}
	var n int
	err := tx.QueryRow(ctx, sqlOutboxCountRelays).Scan(&n)
	return n, err
}

func (d *Driver) OutboxShardAcquire(ctx context.Context, tx driver.Tx, p *driver.OutboxShardParams) ([]int, error) {
	return driver.Collect(ctx, tx, driver.ScanInt, sqlOutboxShardAcquire, p.Owner, toMicros(p.Now), toMicros(p.Until), p.Limit)
}

func (d *Driver) OutboxShardRenew(ctx context.Context, tx driver.Tx, p *driver.OutboxShardParams) ([]int, error) {
	return driver.Collect(ctx, tx, driver.ScanInt, sqlOutboxShardRenew, p.Owner, jsonArray(p.Shards), toMicros(p.Until))
}

func (d *Driver) OutboxShardRelease(ctx context.Context, tx driver.Tx, p *driver.OutboxShardParams) error {
	return driver.ReleaseShards(ctx, tx, &outboxQueries, p)
}

// outboxQueries is this dialect's part of the outbox reads and leases in
// package driver.
var outboxQueries = driver.OutboxQueries{
	Row:             scanOutboxRow,
	BrowseScanned:   sqlOutboxBrowseScanned,
	Browse:          sqlOutboxBrowse,
	Get:             sqlOutboxGet,
	ShardRelease:    sqlOutboxShardRelease,
	ShardReleaseAll: sqlOutboxShardReleaseAll,
	ForgetRelay:     sqlOutboxForgetRelay,
	Shards:          func(s []int) any { return jsonArray(s) },
	Secret:          sqlOutboxSecret,
	SecretInit:      sqlOutboxSecretInit,
	FailRow:         sqlOutboxFailRow,
	Hold:            sqlOutboxHold,
	Redrive:         sqlOutboxRedrive,
	Unhold:          sqlOutboxUnhold,
	DeleteSent:      sqlOutboxDeleteSent,
	DeleteHolds:     sqlOutboxDeleteHolds,
	Time:            func(t time.Time) any { return toMicros(t) },
}

// jsonArray encodes a list for json_each. Encoding ints or strings cannot
// fail.
func jsonArray[T any](v []T) string {
	if v == nil {
		return "[]"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func queryOutboxRows(ctx context.Context, tx driver.Tx, query string, args ...any) ([]driver.OutboxRow, error) {
	return driver.Collect(ctx, tx, scanOutboxRow, query, args...)
}

// scanOutboxRow decodes outboxColumns.
func scanOutboxRow(rows driver.Row) (driver.OutboxRow, error) {
	var r driver.OutboxRow
	var created int64
	var sent, dead sql.NullInt64
	if err := rows.Scan(&r.ID, &r.Tenant, &r.Type, &r.Key, &r.Shard, &r.Payload, &r.Headers,
		&created, &r.Tx, &r.Pos, &r.Attempts, &r.LastError, &sent, &dead,
		&r.TraceParent, &r.TraceState, &r.Sealed); err != nil {
		return r, err
	}
	r.CreatedAt = fromMicros(created)
	if sent.Valid {
		r.SentAt = fromMicros(sent.Int64)
	}
	if dead.Valid {
		r.DeadAt = fromMicros(dead.Int64)
	}
	return r, nil
}
