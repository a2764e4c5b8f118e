package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idemhq/idem/driver"
)

// Rows arrive in one statement whatever their number: one round trip per
// Enqueue. Ids go as text[], cast by the server: pgx encodes a uuid[]
// from strings only after a failed try in binary (arrays.go).
const sqlOutboxInsert = `
INSERT INTO idem_outbox (id, tenant, type, okey, shard, payload, headers, created_at, traceparent, tracestate, sealed)
SELECT id, tenant, type, okey, shard, payload, headers, created_at, nullif(tp, ''), nullif(ts, ''), sealed
  FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::text[], $5::integer[],
              $6::bytea[], $7::bytea[], $8::timestamptz[], $9::text[], $10::text[], $11::boolean[])
    AS t(id, tenant, type, okey, shard, payload, headers, created_at, tp, ts, sealed)`

// txid is an xid8, read as text into an int64 (xid8 values are far below
// 2^63: an epoch count times 2^32 plus a 32-bit id).
const outboxColumns = `id::text, tenant, type, okey, shard, payload, headers, created_at,
       txid::text::bigint, pos, attempts, coalesce(last_error, ''), sent_at, dead_at,
       coalesce(traceparent, ''), coalesce(tracestate, ''), sealed`

// The relay's reads: live unsent rows of the shards in $1 whose key is not
// held (dead, or backing off past $2), each read narrowing them further.
const outboxPending = `
SELECT ` + outboxColumns + `
  FROM idem_outbox o
 WHERE o.sent_at IS NULL AND o.dead_at IS NULL AND o.shard = ANY($1::integer[])
   AND NOT EXISTS (SELECT 1 FROM idem_outbox_holds h
                    WHERE h.tenant = o.tenant AND h.okey = o.okey AND (h.dead OR h.until > $2))`

const sqlOutboxFetch = outboxPending + `
 ORDER BY o.id
 LIMIT $3`

const sqlOutboxFetchAfter = outboxPending + `
   AND o.id > $4::uuid
 ORDER BY o.id
 LIMIT $3`

// Rows that committed behind the cycle's reads: their transactions had
// not ended when the cycle began (txid at or above its horizon), which is
// few rows, found through idem_outbox_pending_tx.
const sqlOutboxFetchLate = outboxPending + `
   AND o.txid >= $4::text::xid8 AND o.id <= $5::uuid
 ORDER BY o.txid
 LIMIT $3`

const sqlOutboxHorizon = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`

// The ids arrive as one array, joined by primary key: one statement and one
// round trip per batch, whatever its size.
const sqlOutboxMarkSent = `
UPDATE idem_outbox o SET sent_at = $2
  FROM unnest($1::text[]::uuid[]) AS u(id)
 WHERE o.id = u.id`

const sqlOutboxFailRow = `
UPDATE idem_outbox SET attempts = $2, last_error = $3,
       dead_at = CASE WHEN $4::boolean THEN $5::timestamptz END
 WHERE id = $1`

const sqlOutboxHold = `
INSERT INTO idem_outbox_holds (tenant, okey, until, dead) VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant, okey) DO UPDATE SET until = EXCLUDED.until, dead = EXCLUDED.dead`

// A row is listed once every transaction with a smaller id has ended
// (txid below the statement snapshot's xmin): no transaction that could
// still commit a row before it in list order is open, so a cursor that has
// passed a row has passed every row that will ever come before it.
const sqlOutboxList = `
SELECT ` + outboxColumns + `
  FROM idem_outbox
 WHERE tenant = $1 AND (tenant, txid, pos) > ($1, $2::text::xid8, $3)
   AND txid < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY txid, pos
 LIMIT $4`

const sqlOutboxListDead = `
SELECT ` + outboxColumns + `
  FROM idem_outbox
 WHERE dead_at IS NOT NULL AND pos > $1
 ORDER BY pos
 LIMIT $2`

const sqlOutboxRedrive = `
UPDATE idem_outbox SET dead_at = NULL, attempts = 0, last_error = NULL
 WHERE id = $1 AND dead_at IS NOT NULL
RETURNING tenant, okey`

// A redriven dead letter's key stays held, as a backoff until $3, unless
// another dead letter holds it.
const sqlOutboxUnhold = `
UPDATE idem_outbox_holds SET dead = false, until = $3
 WHERE tenant = $1 AND okey = $2
   AND NOT EXISTS (SELECT 1 FROM idem_outbox
                    WHERE dead_at IS NOT NULL AND tenant = $1 AND okey = $2)`

const sqlOutboxDeleteSent = `
DELETE FROM idem_outbox WHERE id IN (
  SELECT id FROM idem_outbox WHERE sent_at < $1 LIMIT $2)`

const sqlOutboxDeleteHolds = `DELETE FROM idem_outbox_holds WHERE NOT dead AND until < $1`

// The figures come from the pending and dead partial indexes, whatever the
// statistics say: sqlOutboxStatsPlan rules out the other ways first, for
// the statement's transaction (on the Reader, the implicit one its
// pipeline runs in). Statistics taken during a backlog still count it
// after the relay has drained it, and planned from them, the oldest
// unsent row was looked for through the block-range index on sent_at: a
// range that ever held an unsent row matches IS NULL for good, so that read
// every block of the table (63 ms for 177,000 rows, every five seconds,
// growing with retention).
const sqlOutboxStatsPlan = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

const sqlOutboxStats = `
SELECT (SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL AND dead_at IS NULL),
       (SELECT min(created_at) FROM idem_outbox WHERE sent_at IS NULL AND dead_at IS NULL),
       (SELECT count(*) FROM idem_outbox WHERE dead_at IS NOT NULL)`

// Leases and heartbeats are timed by the database's clock (TTLs arrive in
// seconds), so that relays on hosts whose clocks disagree still agree
// on when a lease expires.
const sqlOutboxHeartbeat = `
INSERT INTO idem_outbox_relays (owner, seen_until) VALUES ($1, now() + $2::float8 * interval '1 second')
ON CONFLICT (owner) DO UPDATE SET seen_until = EXCLUDED.seen_until`

const sqlOutboxForgetRelays = `DELETE FROM idem_outbox_relays WHERE seen_until < now()`

const sqlOutboxCountRelays = `SELECT count(*) FROM idem_outbox_relays`

// SKIP LOCKED: two relays acquiring at once take different shards instead
// of queueing on the same rows.
const sqlOutboxShardAcquire = `
UPDATE idem_outbox_shards SET owner = $1, lease_until = now() + $2::float8 * interval '1 second'
 WHERE shard IN (SELECT shard FROM idem_outbox_shards
                  WHERE lease_until <= now() ORDER BY shard LIMIT $3
                  FOR UPDATE SKIP LOCKED)
RETURNING shard`

const sqlOutboxShardRenew = `
UPDATE idem_outbox_shards SET lease_until = now() + $3::float8 * interval '1 second'
 WHERE owner = $1 AND shard = ANY($2::integer[])
RETURNING shard`

const sqlOutboxShardRelease = `
UPDATE idem_outbox_shards SET owner = '', lease_until = '-infinity'
 WHERE owner = $1 AND shard = ANY($2::integer[])`

const sqlOutboxShardReleaseAll = `
UPDATE idem_outbox_shards SET owner = '', lease_until = '-infinity' WHERE owner = $1`

const sqlOutboxForgetRelay = `DELETE FROM idem_outbox_relays WHERE owner = $1`

func (d *Driver) OutboxInsert(ctx context.Context, tx driver.Tx, p *driver.OutboxInsertParams) error {
	n := len(p.Rows)
	ids, tenants, types, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	shards := make([]int32, n)
	payloads, headers := make([][]byte, n), make([][]byte, n)
	created := make([]time.Time, n)
	parents, states := make([]string, n), make([]string, n)
	sealed := make([]bool, n)
	for i, r := range p.Rows {
		ids[i], tenants[i], types[i], keys[i] = r.ID, r.Tenant, r.Type, r.Key
		shards[i], payloads[i], headers[i], created[i] = int32(r.Shard), r.Payload, r.Headers, r.CreatedAt
		parents[i], states[i], sealed[i] = r.TraceParent, r.TraceState, r.Sealed
	}
	return write(ctx, tx, "outbox insert", generic(unread(sqlOutboxInsert, ids, tenants, types, keys, shards, payloads, headers, created,
		parents, states, sealed))...)
}

// The relay's reads must walk their index in order and stop at the limit.
// The planner does so when it knows the backlog's size, but a backlog grows
// faster than statistics follow: believing in a dozen rows, it reads every
// pending row through a bitmap and sorts them, a second per read at a
// million. The reads are planned once per connection (a generic plan):
// planned for their parameters, they cost more to plan than to run. Local
// to the read's transaction: nothing else is planned under these settings.
const sqlOutboxFetchPlan = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true)`

func (d *Driver) OutboxFetch(ctx context.Context, tx driver.Tx, p *driver.OutboxFetchParams) (*driver.OutboxFetched, error) {
	// The settings, the horizon and the reads travel in one round trip.
	shards := shardArray(p.Shards)
	var f driver.OutboxFetched
	read := func(into *[]driver.OutboxRow) func(driver.Rows) error {
		return func(rows driver.Rows) (err error) {
			*into, err = driver.CollectRows(rows, scanOutboxRow)
			return err
		}
	}
	if p.After == nil {
		err := pipeline(ctx, tx, unread(sqlOutboxFetchPlan),
			step{sql: sqlOutboxHorizon, read: func(rows driver.Rows) error {
				if !rows.Next() {
					return fmt.Errorf("postgres: outbox horizon: no row")
				}
				return rows.Scan(&f.Horizon)
			}},
			step{sql: sqlOutboxFetch, args: []any{shards, p.Now, p.Limit}, read: read(&f.Rows)})
		if err != nil {
			return nil, err
		}
		return &f, nil
	}
	if err := pipeline(ctx, tx, unread(sqlOutboxFetchPlan),
		step{sql: sqlOutboxFetchAfter, args: []any{shards, p.Now, p.Limit, p.After.ID}, read: read(&f.Rows)},
		step{sql: sqlOutboxFetchLate, args: []any{shards, p.Now, p.LateLimit, strconv.FormatInt(p.Horizon, 10), p.After.ID},
			read: read(&f.Late)},
	); err != nil {
		return nil, err
	}
	f.LateFull = len(f.Late) == p.LateLimit
	return &f, nil
}

// OutboxMarkSent: a row already gone or already marked is no error: the
// mark only says what was published.
func (d *Driver) OutboxMarkSent(ctx context.Context, tx driver.Tx, p *driver.OutboxMarkSentParams) error {
	return write(ctx, tx, "outbox mark sent", generic(unread(sqlOutboxMarkSent, p.IDs, p.Now))...)
}

func (d *Driver) OutboxFail(ctx context.Context, tx driver.Tx, p *driver.OutboxFailParams) error {
	return driver.OutboxFail(ctx, tx, &outboxQueries, p)
}

func (d *Driver) OutboxList(ctx context.Context, tx driver.Tx, p *driver.OutboxListParams) ([]driver.OutboxRow, error) {
	return queryOutboxRows(ctx, tx, sqlOutboxList, p.Tenant, strconv.FormatInt(p.AfterTx, 10), p.AfterPos, p.Limit)
}

const (
	sqlOutboxSecret     = `SELECT value FROM idem_secrets WHERE name = $1`
	sqlOutboxSecretInit = `INSERT INTO idem_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`
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
	var oldest *time.Time
	err := pipeline(ctx, tx,
		unread(sqlOutboxStatsPlan),
		step{sql: sqlOutboxStats, read: func(rows driver.Rows) error {
			if !rows.Next() {
				return fmt.Errorf("postgres: outbox stats: no row")
			}
			return rows.Scan(&s.Unsent, &oldest, &s.Dead)
		}})
	if err != nil {
		return nil, err
	}
	if oldest != nil {
		s.OldestUnsent = *oldest
	}
	return &s, nil
}

func (d *Driver) OutboxHeartbeat(ctx context.Context, tx driver.Tx, p *driver.OutboxHeartbeatParams) (int, error) {
	if _, err := tx.Exec(ctx, sqlOutboxHeartbeat, p.Owner, p.TTL.Seconds()); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, sqlOutboxForgetRelays); err != nil {
		return 0, err
	}
	var n int
	err := tx.QueryRow(ctx, sqlOutboxCountRelays).Scan(&n)
	return n, err
}

func (d *Driver) OutboxShardAcquire(ctx context.Context, tx driver.Tx, p *driver.OutboxShardParams) ([]int, error) {
	return driver.Collect(ctx, tx, driver.ScanInt, sqlOutboxShardAcquire, p.Owner, p.TTL.Seconds(), p.Limit)
}

func (d *Driver) OutboxShardRenew(ctx context.Context, tx driver.Tx, p *driver.OutboxShardParams) ([]int, error) {
	return driver.Collect(ctx, tx, driver.ScanInt, sqlOutboxShardRenew, p.Owner, shardArray(p.Shards), p.TTL.Seconds())
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
	Shards:          func(s []int) any { return shardArray(s) },
	Secret:          sqlOutboxSecret,
	SecretInit:      sqlOutboxSecretInit,
	FailRow:         sqlOutboxFailRow,
	Hold:            sqlOutboxHold,
	Redrive:         sqlOutboxRedrive,
	Unhold:          sqlOutboxUnhold,
	DeleteSent:      sqlOutboxDeleteSent,
	DeleteHolds:     sqlOutboxDeleteHolds,
	Time:            func(t time.Time) any { return t },
}

func shardArray(shards []int) []int32 {
	a := make([]int32, len(shards))
	for i, s := range shards {
		a[i] = int32(s)
	}
	return a
}

func queryOutboxRows(ctx context.Context, tx driver.Tx, sql string, args ...any) ([]driver.OutboxRow, error) {
	return driver.Collect(ctx, tx, scanOutboxRow, sql, args...)
}

// scanOutboxRow decodes outboxColumns.
func scanOutboxRow(rows driver.Row) (driver.OutboxRow, error) {
	var r driver.OutboxRow
	var sent, dead *time.Time
	if err := rows.Scan(&r.ID, &r.Tenant, &r.Type, &r.Key, &r.Shard, &r.Payload, &r.Headers,
		&r.CreatedAt, &r.Tx, &r.Pos, &r.Attempts, &r.LastError, &sent, &dead,
		&r.TraceParent, &r.TraceState, &r.Sealed); err != nil {
		return r, err
	}
	if sent != nil {
		r.SentAt = *sent
	}
	if dead != nil {
		r.DeadAt = *dead
	}
	return r, nil
}
