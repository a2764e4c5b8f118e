package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemhq/idem/driver"
)

// The webhook tables: see driver/postgres/webhookout.go for what each
// statement is for. Times are integer microseconds, 0 for none. Writers
// are serialized, so the claim needs no row locks: the transaction that
// reads the due deliveries is alone until it commits their leases.

const webhookEndpointColumns = `id, tenant, url, description, event_types, enabled, secrets, rate_limit,
       created_at, updated_at, failing_since, disabled_at, disabled_reason`

const sqlWebhookEndpointInsert = `
INSERT INTO idem_webhook_endpoints (` + webhookEndpointColumns + `)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)`

const sqlWebhookEndpointGet = `SELECT ` + webhookEndpointColumns + `
  FROM idem_webhook_endpoints WHERE tenant = ?1 AND id = ?2`

const sqlWebhookEndpointList = `SELECT ` + webhookEndpointColumns + `
  FROM idem_webhook_endpoints WHERE tenant = ?1 AND id > ?2 ORDER BY id LIMIT ?3`

const sqlWebhookEndpointFindTenants = `SELECT ` + webhookEndpointColumns + `
  FROM idem_webhook_endpoints WHERE tenant IN (SELECT value FROM json_each(?1)) AND enabled ORDER BY id`

const sqlWebhookEndpointFindIDs = `SELECT ` + webhookEndpointColumns + `
  FROM idem_webhook_endpoints WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id`

const sqlWebhookEndpointUpdate = `
UPDATE idem_webhook_endpoints
   SET url = ?3, description = ?4, event_types = ?5, enabled = ?6, secrets = ?7, rate_limit = ?8,
       updated_at = ?9, failing_since = ?10, disabled_at = ?11, disabled_reason = ?12
 WHERE tenant = ?1 AND id = ?2`

const sqlWebhookEndpointDelete = `DELETE FROM idem_webhook_endpoints WHERE tenant = ?1 AND id = ?2`

const sqlWebhookDeliveriesDelete = `DELETE FROM idem_webhook_deliveries WHERE endpoint_id = ?1`

const sqlWebhookAttemptsDelete = `DELETE FROM idem_webhook_attempts WHERE endpoint_id = ?1`

const sqlWebhookEndpointHealth = `
UPDATE idem_webhook_endpoints SET failing_since = CASE WHEN ?2 THEN 0 WHEN failing_since = 0 THEN ?3 ELSE failing_since END
 WHERE id = ?1 RETURNING failing_since`

const webhookDeliveryColumns = `d.endpoint_id, d.event_id, d.tenant, d.type, d.payload, d.event_created_at, d.state,
       d.attempts, d.next_at, d.owner, d.last_status, d.last_error, d.created_at, d.updated_at, d.sealed`

const sqlWebhookDeliveryInsert = `
INSERT INTO idem_webhook_deliveries (endpoint_id, event_id, tenant, type, payload, event_created_at,
                                     state, next_at, created_at, updated_at, sealed)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?7, ?7, ?8)
ON CONFLICT (endpoint_id, event_id) DO NOTHING`

// sqlWebhookDeliveryClaimRead reads at most ?4 due rows and keeps of
// each endpoint as many as it has free slots (?5, the bound, less its
// attempts in flight: the object ?3), at most ?6 in all, the earliest
// first, each with its endpoint. An endpoint at its bound (?2) is left out
// of the read. sqlWebhookDeliveryClaim then leases them, in the same
// transaction: the writer is alone.
const sqlWebhookDeliveryClaimRead = `
WITH due AS (
  SELECT d.endpoint_id, d.event_id, d.next_at
    FROM idem_webhook_deliveries d
    JOIN idem_webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
   WHERE d.state = 'pending' AND d.next_at <= ?1 AND d.endpoint_id NOT IN (SELECT value FROM json_each(?2))
   ORDER BY d.next_at
   LIMIT ?4),
ranked AS (
  SELECT due.*, row_number() OVER (PARTITION BY due.endpoint_id ORDER BY due.next_at, due.event_id) AS n FROM due),
picked AS (
  SELECT r.endpoint_id, r.event_id, r.next_at
    FROM ranked r LEFT JOIN json_each(?3) f ON f.key = r.endpoint_id
   WHERE r.n + coalesce(f.value, 0) <= ?5
   ORDER BY r.next_at
   LIMIT ?6)
SELECT ` + webhookDeliveryColumns + `,
       e.id, e.tenant, e.url, e.description, e.event_types, e.enabled, e.secrets, e.rate_limit,
       e.created_at, e.updated_at, e.failing_since, e.disabled_at, e.disabled_reason
  FROM picked p
  JOIN idem_webhook_deliveries d ON d.endpoint_id = p.endpoint_id AND d.event_id = p.event_id
  JOIN idem_webhook_endpoints e ON e.id = p.endpoint_id
 ORDER BY p.next_at`

// sqlWebhookDeliveryClaim leases the deliveries of ?3, an array of
// [endpoint id, event id] pairs.
const sqlWebhookDeliveryClaim = `
UPDATE idem_webhook_deliveries SET next_at = ?1, owner = ?2
 WHERE (endpoint_id, event_id) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?3))`

const sqlWebhookDeliveryRelease = `
UPDATE idem_webhook_deliveries SET next_at = ?1, owner = ''
 WHERE owner = ?2 AND state = 'pending'
   AND (endpoint_id, event_id) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?3))`

const sqlWebhookDeliveryFinish = `
UPDATE idem_webhook_deliveries
   SET state = ?4, attempts = ?5, next_at = ?6, last_status = ?7, last_error = ?8, updated_at = ?9, owner = ''
 WHERE endpoint_id = ?1 AND event_id = ?2 AND owner = ?3 AND state = 'pending'`

const sqlWebhookAttemptInsert = `
INSERT INTO idem_webhook_attempts (tenant, endpoint_id, event_id, attempt, at, status, latency_ms, response, error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`

const sqlWebhookDeliveryGet = `SELECT ` + webhookDeliveryColumns + `
  FROM idem_webhook_deliveries d WHERE d.endpoint_id = ?1 AND d.event_id = ?2`

const sqlWebhookDeliveryReplayOne = `
UPDATE idem_webhook_deliveries
   SET state = 'pending', attempts = 0, next_at = ?4, owner = '', updated_at = ?4
 WHERE endpoint_id = ?2 AND event_id = ?3 AND tenant = ?1 AND (state <> 'pending' OR owner = '')`

const sqlWebhookDeliveryReplaySince = `
UPDATE idem_webhook_deliveries
   SET state = 'pending', attempts = 0, next_at = ?4, owner = '', updated_at = ?4
 WHERE rowid IN (
       SELECT rowid FROM idem_webhook_deliveries
        WHERE endpoint_id = ?2 AND tenant = ?1 AND event_created_at >= ?3 AND state <> 'pending'
        ORDER BY event_created_at LIMIT ?5)`

const sqlWebhookAttemptList = `
SELECT id, tenant, endpoint_id, event_id, attempt, at, status, latency_ms, response, error
  FROM idem_webhook_attempts
 WHERE endpoint_id = ?2 AND tenant = ?1 AND (?3 = '' OR event_id = ?3) AND (?4 = 0 OR id < ?4)
 ORDER BY id DESC
 LIMIT ?5`

const sqlWebhookAttemptsDeleteOld = `
DELETE FROM idem_webhook_attempts WHERE id IN (
  SELECT id FROM idem_webhook_attempts WHERE at < ?1 ORDER BY at LIMIT ?2)`

const sqlWebhookDeliveriesDeleteOld = `
DELETE FROM idem_webhook_deliveries WHERE rowid IN (
  SELECT rowid FROM idem_webhook_deliveries WHERE state <> 'pending' AND updated_at < ?1 LIMIT ?2)`

const sqlWebhookStats = `
SELECT (SELECT count(*) FROM idem_webhook_deliveries d JOIN idem_webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
         WHERE d.state = 'pending'),
       (SELECT coalesce(min(d.event_created_at), 0) FROM idem_webhook_deliveries d
          JOIN idem_webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled WHERE d.state = 'pending'),
       (SELECT count(*) FROM idem_webhook_endpoints WHERE enabled AND failing_since <> 0),
       (SELECT count(*) FROM idem_webhook_endpoints WHERE NOT enabled AND disabled_at <> 0)`

// microsOrZero is t in microseconds, 0 for the zero time.
func microsOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return toMicros(t)
}

func timeOrZero(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return fromMicros(us)
}

func endpointArgs(r *driver.WebhookEndpointRow) []any {
	return []any{r.ID, r.Tenant, r.URL, r.Description, string(r.EventTypes), r.Enabled, string(r.Secrets), r.RateLimit,
		toMicros(r.CreatedAt), toMicros(r.UpdatedAt), microsOrZero(r.FailingSince), microsOrZero(r.DisabledAt), r.DisabledReason}
}

// endpointScan is where an endpoint's columns scan to.
type endpointScan struct {
	r                                   driver.WebhookEndpointRow
	types, secrets                      string
	created, updated, failing, disabled int64
}

func (s *endpointScan) dest() []any {
	r := &s.r
	return []any{&r.ID, &r.Tenant, &r.URL, &r.Description, &s.types, &r.Enabled, &s.secrets, &r.RateLimit,
		&s.created, &s.updated, &s.failing, &s.disabled, &r.DisabledReason}
}

func (s *endpointScan) row() driver.WebhookEndpointRow {
	r := s.r
	r.EventTypes, r.Secrets = []byte(s.types), []byte(s.secrets)
	r.CreatedAt, r.UpdatedAt = fromMicros(s.created), fromMicros(s.updated)
	r.FailingSince, r.DisabledAt = timeOrZero(s.failing), timeOrZero(s.disabled)
	return r
}

func scanWebhookEndpoint(row driver.Row) (driver.WebhookEndpointRow, error) {
	var s endpointScan
	err := row.Scan(s.dest()...)
	return s.row(), err
}

// deliveryScan is where a delivery's columns scan to.
type deliveryScan struct {
	r                                    driver.WebhookDeliveryRow
	eventCreated, next, created, updated int64
}

func (s *deliveryScan) dest() []any {
	r := &s.r
	return []any{&r.EndpointID, &r.EventID, &r.Tenant, &r.Type, &r.Payload, &s.eventCreated, &r.State,
		&r.Attempts, &s.next, &r.Owner, &r.LastStatus, &r.LastError, &s.created, &s.updated, &r.Sealed}
}

func (s *deliveryScan) row() driver.WebhookDeliveryRow {
	r := s.r
	r.EventCreatedAt, r.NextAt = fromMicros(s.eventCreated), fromMicros(s.next)
	r.CreatedAt, r.UpdatedAt = fromMicros(s.created), fromMicros(s.updated)
	return r
}

func scanWebhookDelivery(row driver.Row) (driver.WebhookDeliveryRow, error) {
	var s deliveryScan
	err := row.Scan(s.dest()...)
	return s.row(), err
}

func scanWebhookClaimed(row driver.Row) (driver.WebhookClaimedRow, error) {
	var d deliveryScan
	var e endpointScan
	err := row.Scan(append(d.dest(), e.dest()...)...)
	return driver.WebhookClaimedRow{Delivery: d.row(), Endpoint: e.row()}, err
}

func (d *Driver) WebhookEndpointInsert(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointInsertParams) error {
	_, err := tx.Exec(ctx, sqlWebhookEndpointInsert, endpointArgs(&p.Row)...)
	return err
}

func (d *Driver) WebhookEndpointGet(ctx context.Context, tx driver.Tx, p *driver.WebhookEndpointGetParams) (*driver.WebhookEndpointRow, error) {
	r, err := scanWebhookEndpoint(tx.QueryRow(ctx, sqlWebhookEndpointGet, p.Tenant, p.ID))
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
		return driver.Collect(ctx, tx, scanWebhookEndpoint, sqlWebhookEndpointFindIDs, jsonArray(p.IDs))
	}
	return driver.Collect(ctx, tx, scanWebhookEndpoint, sqlWebhookEndpointFindTenants, jsonArray(p.Tenants))
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
	total := 0
	for _, r := range p.Rows {
		n, err := tx.Exec(ctx, sqlWebhookDeliveryInsert, r.EndpointID, r.EventID, r.Tenant, r.Type, r.Payload,
			toMicros(r.EventCreatedAt), toMicros(r.NextAt), r.Sealed)
		if err != nil {
			return total, err
		}
		total += int(n)
	}
	return total, nil
}

// WebhookDeliveryStep records an outcome, and an endpoint's health, a
// statement each (prepared: see hotSQL): SQLite runs in the process, so a
// statement costs no round trip.
func (d *Driver) WebhookDeliveryStep(ctx context.Context, tx driver.Tx, p *driver.WebhookDeliveryStepParams) (*driver.WebhookDeliveryStepResult, error) {
	res := &driver.WebhookDeliveryStepResult{FailingSince: map[string]time.Time{}}
	now := toMicros(p.Now)
	for _, r := range p.Finish {
		n, err := tx.Exec(ctx, sqlWebhookDeliveryFinish, r.Key.EndpointID, r.Key.EventID, p.Owner,
			r.State, r.Attempts, toMicros(r.NextAt), r.LastStatus, r.LastError, now)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			continue
		}
		if _, err := tx.Exec(ctx, sqlWebhookAttemptInsert, r.Tenant, r.Key.EndpointID, r.Key.EventID, r.Attempts, now,
			r.LastStatus, r.LatencyMS, r.Response, r.LastError); err != nil {
			return nil, err
		}
		res.Recorded = append(res.Recorded, r.Key)
	}
	for _, h := range p.Health {
		var since int64
		err := tx.QueryRow(ctx, sqlWebhookEndpointHealth, h.ID, h.OK, now).Scan(&since)
		if errors.Is(err, driver.ErrNotFound) {
			continue // deleted
		}
		if err != nil {
			return nil, err
		}
		res.FailingSince[h.ID] = timeOrZero(since)
	}
	if len(p.Release) > 0 {
		keys := make([][2]string, len(p.Release))
		for i, k := range p.Release {
			keys[i] = [2]string{k.EndpointID, k.EventID}
		}
		if _, err := tx.Exec(ctx, sqlWebhookDeliveryRelease, now, p.Owner, jsonArray(keys)); err != nil {
			return nil, err
		}
	}
	c := p.Claim
	if c == nil {
		return res, nil
	}
	inFlight, _ := json.Marshal(c.InFlight)
	claimed, err := driver.Collect(ctx, tx, scanWebhookClaimed, sqlWebhookDeliveryClaimRead,
		now, jsonArray(c.Full()), string(inFlight), c.Scan, c.PerEndpoint, c.Limit)
	if err != nil || len(claimed) == 0 {
		return res, err
	}
	keys := make([][2]string, len(claimed))
	for i := range claimed {
		r := &claimed[i].Delivery
		keys[i] = [2]string{r.EndpointID, r.EventID}
		r.NextAt, r.Owner = c.Until, p.Owner
	}
	if _, err := tx.Exec(ctx, sqlWebhookDeliveryClaim, toMicros(c.Until), p.Owner, jsonArray(keys)); err != nil {
		return nil, err
	}
	res.Claimed = claimed
	return res, nil
}

func (d *Driver) WebhookDeliveryStepCommit(ctx context.Context, tx driver.TxCloser, p *driver.WebhookDeliveryStepParams) (*driver.WebhookDeliveryStepResult, error) {
	res, err := d.WebhookDeliveryStep(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	return res, tx.Commit(ctx)
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
		n, err = tx.Exec(ctx, sqlWebhookDeliveryReplayOne, p.Tenant, p.EndpointID, p.EventID, toMicros(p.Now))
	} else {
		n, err = tx.Exec(ctx, sqlWebhookDeliveryReplaySince, p.Tenant, p.EndpointID, toMicros(p.Since), toMicros(p.Now), p.Limit)
	}
	return int(n), err
}

func (d *Driver) WebhookAttemptList(ctx context.Context, tx driver.Tx, p *driver.WebhookAttemptListParams) ([]driver.WebhookAttemptRow, error) {
	return driver.Collect(ctx, tx, func(row driver.Row) (r driver.WebhookAttemptRow, err error) {
		var at int64
		err = row.Scan(&r.ID, &r.Tenant, &r.EndpointID, &r.EventID, &r.Attempt, &at, &r.Status, &r.LatencyMS, &r.Response, &r.Error)
		r.At = fromMicros(at)
		return r, err
	}, sqlWebhookAttemptList, p.Tenant, p.EndpointID, p.EventID, p.BeforeID, p.Limit)
}

func (d *Driver) WebhookDeleteOld(ctx context.Context, tx driver.Tx, p *driver.WebhookDeleteOldParams) (int, error) {
	a, err := tx.Exec(ctx, sqlWebhookAttemptsDeleteOld, toMicros(p.Before), p.Limit)
	if err != nil {
		return 0, err
	}
	b, err := tx.Exec(ctx, sqlWebhookDeliveriesDeleteOld, toMicros(p.Before), p.Limit)
	return int(max(a, b)), err
}

func (d *Driver) WebhookStats(ctx context.Context, tx driver.Tx) (*driver.WebhookStats, error) {
	var s driver.WebhookStats
	var oldest int64
	if err := tx.QueryRow(ctx, sqlWebhookStats).Scan(&s.Pending, &oldest, &s.Failing, &s.Disabled); err != nil {
		return nil, err
	}
	s.OldestPending = timeOrZero(oldest)
	return &s, nil
}
