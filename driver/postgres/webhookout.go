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

const sqlWebhookEndpointHealthy = `
UPDATE idem_webhook_endpoints SET failing_since = NULL WHERE id = $1
RETURNING failing_since`

const sqlWebhookEndpointFailing = `
UPDATE idem_webhook_endpoints SET failing_since = coalesce(failing_since, $2) WHERE id = $1
RETURNING failing_since`

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

const sqlWebhookDeliveryDue = `
SELECT ` + webhookDeliveryColumns + `
  FROM idem_webhook_deliveries d
  JOIN idem_webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
 WHERE d.state = 'pending' AND d.next_at <= $1 AND NOT (d.endpoint_id = ANY($2::text[]))
 ORDER BY d.next_at
 LIMIT $3
   FOR UPDATE OF d SKIP LOCKED`

const sqlWebhookDeliveryClaim = `
UPDATE idem_webhook_deliveries d SET next_at = $4, owner = $3
  FROM unnest($1::text[], $2::text[]) AS k(endpoint_id, event_id)
 WHERE d.endpoint_id = k.endpoint_id AND d.event_id = k.event_id AND d.state = 'pending'`

// One statement per batch of attempts: the recorder's round trips, not
// the commits, bounded the deliveries a second.
const sqlWebhookDeliveryFinish = `
UPDATE idem_webhook_deliveries d
   SET state = u.state, attempts = u.attempts, next_at = u.next_at, last_status = u.status, last_error = u.err,
       updated_at = $8, owner = ''
  FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::timestamptz[], $6::integer[], $7::text[])
    AS u(endpoint_id, event_id, state, attempts, next_at, status, err)
 WHERE d.endpoint_id = u.endpoint_id AND d.event_id = u.event_id AND d.owner = $9 AND d.state = 'pending'
RETURNING d.endpoint_id, d.event_id`

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

const sqlWebhookAttemptInsert = `
INSERT INTO idem_webhook_attempts (tenant, endpoint_id, event_id, attempt, at, status, latency_ms, response, error)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::timestamptz[], $6::integer[],
                     $7::bigint[], $8::text[], $9::text[])`

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

func scanWebhookEndpoint(row driver.Row) (driver.WebhookEndpointRow, error) {
	var r driver.WebhookEndpointRow
	var types, secrets string
	var failing, disabled *time.Time
	err := row.Scan(&r.ID, &r.Tenant, &r.URL, &r.Description, &types, &r.Enabled, &secrets, &r.RateLimit,
		&r.CreatedAt, &r.UpdatedAt, &failing, &disabled, &r.DisabledReason)
	r.EventTypes, r.Secrets = []byte(types), []byte(secrets)
	r.FailingSince, r.DisabledAt = timeOf(failing), timeOf(disabled)
	return r, err
}

func queryWebhookEndpoints(ctx context.Context, tx driver.Tx, sql string, args ...any) ([]driver.WebhookEndpointRow, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.WebhookEndpointRow
	for rows.Next() {
		r, err := scanWebhookEndpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func scanWebhookDelivery(row driver.Row) (driver.WebhookDeliveryRow, error) {
	var r driver.WebhookDeliveryRow
	err := row.Scan(&r.EndpointID, &r.EventID, &r.Tenant, &r.Type, &r.Payload, &r.EventCreatedAt, &r.State,
		&r.Attempts, &r.NextAt, &r.Owner, &r.LastStatus, &r.LastError, &r.CreatedAt, &r.UpdatedAt, &r.Sealed)
	return r, err
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
	return queryWebhookEndpoints(ctx, tx, sqlWebhookEndpointList, p.Tenant, p.AfterID, p.Limit)
}

func (d *Driver) WebhookEndpointFind(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointFindParams) ([]driver.WebhookEndpointRow, error) {
	if p.IDs != nil {
		return queryWebhookEndpoints(ctx, tx, sqlWebhookEndpointFindIDs, p.IDs)
	}
	return queryWebhookEndpoints(ctx, tx, sqlWebhookEndpointFindTenants, p.Tenants)
}

func (d *Driver) WebhookEndpointUpdate(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointUpdateParams) error {
	a := endpointArgs(&p.Row)
	n, err := tx.Exec(ctx, sqlWebhookEndpointUpdate, a[1], a[0], a[2], a[3], a[4], a[5], a[6], a[7], a[9], a[10], a[11], a[12])
	if err == nil && n == 0 {
		err = driver.ErrNotFound
	}
	return err
}

func (d *Driver) WebhookEndpointDelete(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointDeleteParams) error {
	n, err := tx.Exec(ctx, sqlWebhookEndpointDelete, p.Tenant, p.ID)
	if err != nil {
		return err
	}
	if n == 0 {
		return driver.ErrNotFound
	}
	if _, err := tx.Exec(ctx, sqlWebhookDeliveriesDelete, p.ID); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, sqlWebhookAttemptsDelete, p.ID)
	return err
}

func (d *Driver) WebhookEndpointHealth(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointHealthParams) (time.Time, error) {
	var since *time.Time
	var err error
	if p.OK {
		err = tx.QueryRow(ctx, sqlWebhookEndpointHealthy, p.ID).Scan(&since)
	} else {
		err = tx.QueryRow(ctx, sqlWebhookEndpointFailing, p.ID, p.Now).Scan(&since)
	}
	return timeOf(since), err
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

func (d *Driver) WebhookDeliveryDue(ctx context.Context, tx driver.Tx, p *driver.WebhookDeliveryDueParams) ([]driver.WebhookDeliveryRow, error) {
	exclude := p.Exclude
	if exclude == nil {
		exclude = []string{}
	}
	rows, err := tx.Query(ctx, sqlWebhookDeliveryDue, p.Now, exclude, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.WebhookDeliveryRow
	for rows.Next() {
		r, err := scanWebhookDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (d *Driver) WebhookDeliveryClaim(ctx context.Context, tx driver.Tx, p *driver.WebhookDeliveryClaimParams) error {
	endpoints, events := make([]string, len(p.Keys)), make([]string, len(p.Keys))
	for i, k := range p.Keys {
		endpoints[i], events[i] = k.EndpointID, k.EventID
	}
	_, err := tx.Exec(ctx, sqlWebhookDeliveryClaim, endpoints, events, p.Owner, p.Until)
	return err
}

func (d *Driver) WebhookDeliveryFinish(ctx context.Context, tx driver.Tx, p *driver.WebhookDeliveryFinishParams) ([]driver.WebhookDeliveryKey, error) {
	n := len(p.Rows)
	endpoints, events, states, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, statuses := make([]int32, n), make([]int32, n)
	next := make([]time.Time, n)
	for i, r := range p.Rows {
		endpoints[i], events[i], states[i], errs[i] = r.Key.EndpointID, r.Key.EventID, r.State, r.LastError
		attempts[i], statuses[i], next[i] = int32(r.Attempts), int32(r.LastStatus), r.NextAt
	}
	rows, err := tx.Query(ctx, sqlWebhookDeliveryFinish, endpoints, events, states, attempts, next, statuses, errs, p.Now, p.Owner)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.WebhookDeliveryKey
	for rows.Next() {
		var k driver.WebhookDeliveryKey
		if err := rows.Scan(&k.EndpointID, &k.EventID); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
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

func (d *Driver) WebhookAttemptInsert(ctx context.Context, tx driver.Tx, p *driver.WebhookAttemptInsertParams) error {
	n := len(p.Rows)
	if n == 0 {
		return nil
	}
	tenants, endpoints, events, responses, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, statuses := make([]int32, n), make([]int32, n)
	at, latency := make([]time.Time, n), make([]int64, n)
	for i, r := range p.Rows {
		tenants[i], endpoints[i], events[i], responses[i], errs[i] = r.Tenant, r.EndpointID, r.EventID, r.Response, r.Error
		attempts[i], statuses[i], at[i], latency[i] = int32(r.Attempt), int32(r.Status), r.At, r.LatencyMS
	}
	_, err := tx.Exec(ctx, sqlWebhookAttemptInsert, tenants, endpoints, events, attempts, at, statuses, latency, responses, errs)
	return err
}

func (d *Driver) WebhookAttemptList(ctx context.Context, tx driver.Tx, p *driver.WebhookAttemptListParams) ([]driver.WebhookAttemptRow, error) {
	rows, err := tx.Query(ctx, sqlWebhookAttemptList, p.Tenant, p.EndpointID, p.EventID, p.BeforeID, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.WebhookAttemptRow
	for rows.Next() {
		var r driver.WebhookAttemptRow
		if err := rows.Scan(&r.ID, &r.Tenant, &r.EndpointID, &r.EventID, &r.Attempt, &r.At, &r.Status,
			&r.LatencyMS, &r.Response, &r.Error); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
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
