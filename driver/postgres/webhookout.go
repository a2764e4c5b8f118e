package postgres

import (
	"context"
	"time"

	"github.com/idemhq/idem/driver"
)

const webhookEndpointColumns = `id, tenant, url, description, event_types, enabled, secrets, rate_limit,
       created_at, updated_at, failing_since, disabled_at, disabled_reason`

const sqlWebhookEndpointInsert = `
INSERT INTO idem_webhook_endpoints (` + webhookEndpointColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

const sqlWebhookEndpointGet = `SELECT ` + webhookEndpointColumns + `
  FROM idem_webhook_endpoints WHERE tenant = $1 AND id = $2`

const sqlWebhookEndpointGetLock = sqlWebhookEndpointGet + ` FOR UPDATE`

const sqlWebhookEndpointList = `SELECT ` + webhookEndpointColumns + `
  FROM idem_webhook_endpoints WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3`

const sqlWebhookEndpointFindTenants = `SELECT ` + webhookEndpointColumns + `
  FROM idem_webhook_endpoints WHERE tenant = ANY($1::text[]) AND enabled ORDER BY id`

const sqlWebhookEndpointFindIDs = `SELECT ` + webhookEndpointColumns + `
  FROM idem_webhook_endpoints WHERE id = ANY($1::text[]) ORDER BY id`

const sqlWebhookEndpointUpdate = `
UPDATE idem_webhook_endpoints
   SET url = $3, description = $4, event_types = $5, enabled = $6, secrets = $7, rate_limit = $8,
       updated_at = $9, failing_since = $10, disabled_at = $11, disabled_reason = $12
 WHERE tenant = $1 AND id = $2`

const sqlWebhookEndpointDelete = `DELETE FROM idem_webhook_endpoints WHERE tenant = $1 AND id = $2`

const sqlWebhookDeliveriesDelete = `DELETE FROM idem_webhook_deliveries WHERE endpoint_id = $1`

const sqlWebhookAttemptsDelete = `DELETE FROM idem_webhook_attempts WHERE endpoint_id = $1`

const webhookDeliveryColumns = `d.endpoint_id, d.event_id, d.tenant, d.type, d.payload, d.event_created_at, d.state,
       d.attempts, d.next_at, d.owner, d.last_status, d.last_error, d.created_at, d.updated_at, d.sealed`

// Rows arrive as arrays: one statement per fan-out batch.
const sqlWebhookDeliveryInsert = `
INSERT INTO idem_webhook_deliveries (endpoint_id, event_id, tenant, type, payload, event_created_at,
                                     state, next_at, created_at, updated_at, sealed)
SELECT endpoint_id, event_id, tenant, type, payload, event_created_at, 'pending', next_at, next_at, next_at, sealed
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::timestamptz[], $7::timestamptz[], $8::boolean[])
    AS t(endpoint_id, event_id, tenant, type, payload, event_created_at, next_at, sealed)
ON CONFLICT (endpoint_id, event_id) DO NOTHING`

// A step's three statements travel in one round trip (pipeline): the
// deliverer's round trips, not the rows, bounded the deliveries a second.

// sqlWebhookDeliveryFinish records outcomes on the deliveries the owner
// still leases and logs an attempt for each it recorded. A leased row is
// pending (only the claim sets owner, and every change of state clears
// it), so owner alone finds it, through the primary key: a condition on
// state would let a plan read every pending row through the due index.
const sqlWebhookDeliveryFinish = `
WITH fin AS (
  UPDATE idem_webhook_deliveries d
     SET state = u.state, attempts = u.attempts, next_at = u.next_at, last_status = u.status, last_error = u.err,
         updated_at = $10, owner = ''
    FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::timestamptz[], $6::integer[], $7::text[],
                $8::bigint[], $9::text[])
      AS u(endpoint_id, event_id, state, attempts, next_at, status, err, latency_ms, response)
   WHERE d.endpoint_id = u.endpoint_id AND d.event_id = u.event_id AND d.owner = $11
  RETURNING d.tenant, d.endpoint_id, d.event_id, u.attempts, u.status, u.latency_ms, u.response, u.err),
logged AS (
  INSERT INTO idem_webhook_attempts (tenant, endpoint_id, event_id, attempt, at, status, latency_ms, response, error)
  SELECT tenant, endpoint_id, event_id, attempts, $10, status, latency_ms, response, err FROM fin)
SELECT endpoint_id, event_id FROM fin`

const sqlWebhookEndpointHealth = `
UPDATE idem_webhook_endpoints e
   SET failing_since = CASE WHEN h.ok THEN NULL ELSE coalesce(e.failing_since, $3) END
  FROM unnest($1::text[], $2::boolean[]) AS h(id, ok)
 WHERE e.id = h.id
RETURNING e.id, e.failing_since`

const sqlWebhookDeliveryRelease = `
UPDATE idem_webhook_deliveries d SET next_at = $3, owner = ''
  FROM unnest($1::text[], $2::text[]) AS k(endpoint_id, event_id)
 WHERE d.endpoint_id = k.endpoint_id AND d.event_id = k.event_id AND d.owner = $4`

// sqlWebhookDeliveryClaim reads at most $5 due rows, skipping those
// other workers lock, keeps of each endpoint as many as it has free slots
// ($6, the bound, less its attempts in flight: $3 and $4), at most $7 in
// all, the earliest first, and leases them, returning each with its
// endpoint. An endpoint at its bound ($2) is left out of the read. The
// due rows are read in the due index's order up to the LIMIT, whatever
// the backlog: the endpoint's state is a filter on each (a subquery), not
// a join, which a plan could run as a hash of every due row, sorted.
const sqlWebhookDeliveryClaim = `
WITH due AS (
  SELECT d.endpoint_id, d.event_id, d.next_at
    FROM idem_webhook_deliveries d
   WHERE d.state = 'pending' AND d.next_at <= $1 AND NOT (d.endpoint_id = ANY($2::text[]))
     AND (SELECT e.enabled FROM idem_webhook_endpoints e WHERE e.id = d.endpoint_id)
   ORDER BY d.next_at
   LIMIT $5
     FOR UPDATE OF d SKIP LOCKED),
ranked AS (
  SELECT due.*, row_number() OVER (PARTITION BY due.endpoint_id ORDER BY due.next_at, due.event_id) AS n FROM due),
picked AS (
  SELECT r.endpoint_id, r.event_id
    FROM ranked r
    LEFT JOIN unnest($3::text[], $4::integer[]) AS f(endpoint_id, n) ON f.endpoint_id = r.endpoint_id
   WHERE r.n + coalesce(f.n, 0) <= $6
   ORDER BY r.next_at
   LIMIT $7)
UPDATE idem_webhook_deliveries d SET next_at = $8, owner = $9
  FROM picked p JOIN idem_webhook_endpoints e ON e.id = p.endpoint_id
 WHERE d.endpoint_id = p.endpoint_id AND d.event_id = p.event_id
RETURNING ` + webhookDeliveryColumns + `,
       e.id, e.tenant, e.url, e.description, e.event_types, e.enabled, e.secrets, e.rate_limit,
       e.created_at, e.updated_at, e.failing_since, e.disabled_at, e.disabled_reason`

const sqlWebhookDeliveryGet = `SELECT ` + webhookDeliveryColumns + `
  FROM idem_webhook_deliveries d WHERE d.endpoint_id = $1 AND d.event_id = $2`

const sqlWebhookDeliveryReplayOne = `
UPDATE idem_webhook_deliveries
   SET state = 'pending', attempts = 0, next_at = $4, owner = '', updated_at = $4
 WHERE endpoint_id = $2 AND event_id = $3 AND tenant = $1 AND (state <> 'pending' OR owner = '')`

const sqlWebhookDeliveryReplaySince = `
UPDATE idem_webhook_deliveries
   SET state = 'pending', attempts = 0, next_at = $4, owner = '', updated_at = $4
 WHERE (endpoint_id, event_id) IN (
       SELECT endpoint_id, event_id FROM idem_webhook_deliveries
        WHERE endpoint_id = $2 AND tenant = $1 AND event_created_at >= $3 AND state <> 'pending'
        ORDER BY event_created_at LIMIT $5)`

const webhookAttemptColumns = `id, tenant, endpoint_id, event_id, attempt, at, status, latency_ms, response, error`

const sqlWebhookAttemptList = `SELECT ` + webhookAttemptColumns + `
  FROM idem_webhook_attempts
 WHERE endpoint_id = $2 AND tenant = $1 AND ($3::text = '' OR event_id = $3::text) AND ($4::bigint = 0 OR id < $4::bigint)
 ORDER BY id DESC
 LIMIT $5`

const sqlWebhookAttemptsDeleteOld = `
DELETE FROM idem_webhook_attempts WHERE id IN (
  SELECT id FROM idem_webhook_attempts WHERE at < $1 ORDER BY at LIMIT $2)`

const sqlWebhookDeliveriesDeleteOld = `
DELETE FROM idem_webhook_deliveries WHERE (endpoint_id, event_id) IN (
  SELECT endpoint_id, event_id FROM idem_webhook_deliveries
   WHERE state <> 'pending' AND updated_at < $1 LIMIT $2)`

const sqlWebhookStats = `
SELECT (SELECT count(*) FROM idem_webhook_deliveries d JOIN idem_webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
         WHERE d.state = 'pending'),
       (SELECT min(d.event_created_at) FROM idem_webhook_deliveries d JOIN idem_webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
         WHERE d.state = 'pending'),
       (SELECT count(*) FROM idem_webhook_endpoints WHERE enabled AND failing_since IS NOT NULL),
       (SELECT count(*) FROM idem_webhook_endpoints WHERE NOT enabled AND disabled_at IS NOT NULL)`

// nullTime stores a zero time as NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func endpointArgs(r *driver.WebhookEndpointRow) []any {
	return []any{r.ID, r.Tenant, r.URL, r.Description, string(r.EventTypes), r.Enabled, string(r.Secrets), r.RateLimit,
		r.CreatedAt, r.UpdatedAt, nullTime(r.FailingSince), nullTime(r.DisabledAt), r.DisabledReason}
}

// endpointScan is where an endpoint's columns scan to.
type endpointScan struct {
	r                 driver.WebhookEndpointRow
	types, secrets    string
	failing, disabled *time.Time
}

func (s *endpointScan) dest() []any {
	r := &s.r
	return []any{&r.ID, &r.Tenant, &r.URL, &r.Description, &s.types, &r.Enabled, &s.secrets, &r.RateLimit,
		&r.CreatedAt, &r.UpdatedAt, &s.failing, &s.disabled, &r.DisabledReason}
}

func (s *endpointScan) row() driver.WebhookEndpointRow {
	r := s.r
	r.EventTypes, r.Secrets = []byte(s.types), []byte(s.secrets)
	r.FailingSince, r.DisabledAt = timeOf(s.failing), timeOf(s.disabled)
	return r
}

func scanWebhookEndpoint(row driver.Row) (driver.WebhookEndpointRow, error) {
	var s endpointScan
	err := row.Scan(s.dest()...)
	return s.row(), err
}

func deliveryDest(r *driver.WebhookDeliveryRow) []any {
	return []any{&r.EndpointID, &r.EventID, &r.Tenant, &r.Type, &r.Payload, &r.EventCreatedAt, &r.State,
		&r.Attempts, &r.NextAt, &r.Owner, &r.LastStatus, &r.LastError, &r.CreatedAt, &r.UpdatedAt, &r.Sealed}
}

func scanWebhookDelivery(row driver.Row) (driver.WebhookDeliveryRow, error) {
	var r driver.WebhookDeliveryRow
	err := row.Scan(deliveryDest(&r)...)
	return r, err
}

func scanWebhookClaimed(row driver.Row) (driver.WebhookClaimedRow, error) {
	var c driver.WebhookClaimedRow
	var e endpointScan
	err := row.Scan(append(deliveryDest(&c.Delivery), e.dest()...)...)
	c.Endpoint = e.row()
	return c, err
}

func (d *Driver) WebhookEndpointInsert(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointInsertParams) error {
	_, err := tx.Exec(ctx, sqlWebhookEndpointInsert, endpointArgs(&p.Row)...)
	return err
}

func (d *Driver) WebhookEndpointGet(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointGetParams) (*driver.WebhookEndpointRow, error) {
	q := sqlWebhookEndpointGet
	if p.Lock {
		q = sqlWebhookEndpointGetLock
	}
	r, err := scanWebhookEndpoint(tx.QueryRow(ctx, q, p.Tenant, p.ID))
	if err != nil {
		return nil, err
	}
	return &r, nil
}

func (d *Driver) WebhookEndpointList(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointListParams) ([]driver.WebhookEndpointRow, error) {
	return driver.Collect(ctx, tx, scanWebhookEndpoint, sqlWebhookEndpointList, p.Tenant, p.AfterID, p.Limit)
}

func (d *Driver) WebhookEndpointFind(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointFindParams) ([]driver.WebhookEndpointRow, error) {
	if p.IDs != nil {
		return driver.Collect(ctx, tx, scanWebhookEndpoint, sqlWebhookEndpointFindIDs, p.IDs)
	}
	return driver.Collect(ctx, tx, scanWebhookEndpoint, sqlWebhookEndpointFindTenants, p.Tenants)
}

func (d *Driver) WebhookEndpointUpdate(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointUpdateParams) error {
	a := endpointArgs(&p.Row)
	return driver.ExecFound(ctx, tx, sqlWebhookEndpointUpdate, a[1], a[0], a[2], a[3], a[4], a[5], a[6], a[7], a[9], a[10], a[11], a[12])
}

func (d *Driver) WebhookEndpointDelete(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointDeleteParams) error {
	if err := driver.ExecFound(ctx, tx, sqlWebhookEndpointDelete, p.Tenant, p.ID); err != nil {
		return err
	}
	return driver.ExecEach(ctx, tx, []string{sqlWebhookDeliveriesDelete, sqlWebhookAttemptsDelete}, p.ID)
}

func (d *Driver) WebhookDeliveryInsert(ctx context.Context, tx driver.Tx, p *driver.WebhookDeliveryInsertParams) (int, error) {
	n := len(p.Rows)
	if n == 0 {
		return 0, nil
	}
	endpoints, events, tenants, types := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads := make([][]byte, n)
	created, next := make([]time.Time, n), make([]time.Time, n)
	sealed := make([]bool, n)
	for i, r := range p.Rows {
		endpoints[i], events[i], tenants[i], types[i] = r.EndpointID, r.EventID, r.Tenant, r.Type
		payloads[i], created[i], next[i], sealed[i] = r.Payload, r.EventCreatedAt, r.NextAt, r.Sealed
	}
	c, err := tx.Exec(ctx, sqlWebhookDeliveryInsert, endpoints, events, tenants, types, payloads, created, next, sealed)
	return int(c), err
}

func (d *Driver) WebhookDeliveryStep(ctx context.Context, tx driver.Tx, p *driver.WebhookDeliveryStepParams) (*driver.WebhookDeliveryStepResult, error) {
	res, steps := webhookStepSteps(p)
	if len(steps) == 0 {
		return res, nil
	}
	return res, pipeline(ctx, tx, custom(steps...)...)
}

func (d *Driver) WebhookDeliveryStepCommit(ctx context.Context, tx driver.TxCloser, p *driver.WebhookDeliveryStepParams) (*driver.WebhookDeliveryStepResult, error) {
	t, ok := driver.Underlying(tx).(*ownedTx)
	if !ok {
		res, err := d.WebhookDeliveryStep(ctx, tx, p)
		if err != nil {
			return nil, err
		}
		return res, tx.Commit(ctx)
	}
	res, steps := webhookStepSteps(p)
	if len(steps) > 0 {
		steps = custom(steps...)
	}
	if err := t.commitAfter(ctx, steps...); err != nil {
		return nil, err
	}
	return res, tx.Commit(ctx) // a no-op for t, run for the wrappers around it
}

// webhookStepSteps are p's statements, whose rows fill the result.
func webhookStepSteps(p *driver.WebhookDeliveryStepParams) (*driver.WebhookDeliveryStepResult, []step) {
	res := &driver.WebhookDeliveryStepResult{FailingSince: map[string]time.Time{}}
	var steps []step
	if n := len(p.Finish); n > 0 {
		endpoints, events, states, errs, responses := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		attempts, statuses := make([]int32, n), make([]int32, n)
		next, latency := make([]time.Time, n), make([]int64, n)
		for i, r := range p.Finish {
			endpoints[i], events[i], states[i], errs[i], responses[i] = r.Key.EndpointID, r.Key.EventID, r.State, r.LastError, r.Response
			attempts[i], statuses[i], next[i], latency[i] = int32(r.Attempts), int32(r.LastStatus), r.NextAt, r.LatencyMS
		}
		steps = append(steps, step{sql: sqlWebhookDeliveryFinish,
			args: []any{endpoints, events, states, attempts, next, statuses, errs, latency, responses, p.Now, p.Owner},
			read: func(rows driver.Rows) (err error) {
				res.Recorded, err = driver.CollectRows(rows, func(row driver.Row) (k driver.WebhookDeliveryKey, err error) {
					return k, row.Scan(&k.EndpointID, &k.EventID)
				})
				return err
			}})
	}
	if n := len(p.Health); n > 0 {
		ids, oks := make([]string, n), make([]bool, n)
		for i, h := range p.Health {
			ids[i], oks[i] = h.ID, h.OK
		}
		steps = append(steps, step{sql: sqlWebhookEndpointHealth, args: []any{ids, oks, p.Now},
			read: func(rows driver.Rows) error {
				for rows.Next() {
					var id string
					var since *time.Time
					if err := rows.Scan(&id, &since); err != nil {
						return err
					}
					res.FailingSince[id] = timeOf(since)
				}
				return nil
			}})
	}
	if n := len(p.Release); n > 0 {
		endpoints, events := make([]string, n), make([]string, n)
		for i, k := range p.Release {
			endpoints[i], events[i] = k.EndpointID, k.EventID
		}
		steps = append(steps, unread(sqlWebhookDeliveryRelease, endpoints, events, p.Now, p.Owner))
	}
	if c := p.Claim; c != nil {
		busy, counts := make([]string, 0, len(c.InFlight)), make([]int32, 0, len(c.InFlight))
		for id, n := range c.InFlight {
			busy, counts = append(busy, id), append(counts, int32(n))
		}
		steps = append(steps, step{sql: sqlWebhookDeliveryClaim,
			args: []any{p.Now, c.Full(), busy, counts, c.Scan, c.PerEndpoint, c.Limit, c.Until, p.Owner},
			read: func(rows driver.Rows) (err error) {
				res.Claimed, err = driver.CollectRows(rows, scanWebhookClaimed)
				return err
			}})
	}
	return res, steps
}

func (d *Driver) WebhookDeliveryGet(ctx context.Context, tx driver.Tx, p *driver.WebhookDeliveryGetParams) (*driver.WebhookDeliveryRow, error) {
	r, err := scanWebhookDelivery(tx.QueryRow(ctx, sqlWebhookDeliveryGet, p.Key.EndpointID, p.Key.EventID))
	if err != nil {
		return nil, err
	}
	return &r, nil
}

func (d *Driver) WebhookDeliveryReplay(ctx context.Context, tx driver.Tx, p *driver.WebhookDeliveryReplayParams) (int, error) {
	var n int64
	var err error
	if p.EventID != "" {
		n, err = tx.Exec(ctx, sqlWebhookDeliveryReplayOne, p.Tenant, p.EndpointID, p.EventID, p.Now)
	} else {
		n, err = tx.Exec(ctx, sqlWebhookDeliveryReplaySince, p.Tenant, p.EndpointID, p.Since, p.Now, p.Limit)
	}
	return int(n), err
}

func (d *Driver) WebhookAttemptList(ctx context.Context, tx driver.Tx, p *driver.WebhookAttemptListParams) ([]driver.WebhookAttemptRow, error) {
	return driver.Collect(ctx, tx, func(row driver.Row) (r driver.WebhookAttemptRow, err error) {
		err = row.Scan(&r.ID, &r.Tenant, &r.EndpointID, &r.EventID, &r.Attempt, &r.At, &r.Status, &r.LatencyMS, &r.Response, &r.Error)
		return r, err
	}, sqlWebhookAttemptList, p.Tenant, p.EndpointID, p.EventID, p.BeforeID, p.Limit)
}

func (d *Driver) WebhookDeleteOld(ctx context.Context, tx driver.Tx, p *driver.WebhookDeleteOldParams) (int, error) {
	a, err := tx.Exec(ctx, sqlWebhookAttemptsDeleteOld, p.Before, p.Limit)
	if err != nil {
		return 0, err
	}
	b, err := tx.Exec(ctx, sqlWebhookDeliveriesDeleteOld, p.Before, p.Limit)
	return int(max(a, b)), err
}

func (d *Driver) WebhookStats(ctx context.Context, tx driver.Tx) (*driver.WebhookStats, error) {
	var s driver.WebhookStats
	var oldest *time.Time
	if err := tx.QueryRow(ctx, sqlWebhookStats).Scan(&s.Pending, &oldest, &s.Failing, &s.Disabled); err != nil {
		return nil, err
	}
	s.OldestPending = timeOf(oldest)
	return &s, nil
}
