package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/driver"
)

// The claim replaces an expired record in the same statement, so an expired
// key behaves as new without a read-then-write. On a live conflict the
// statement returns no row; a record held by an uncommitted transaction makes
// it wait (bounded by lock_timeout) for that transaction's end.
const sqlKeyClaim = `
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = EXCLUDED.fingerprint, status = 0, header = NULL, body = NULL,
       created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
 WHERE idem_keys.expires_at <= EXCLUDED.created_at
RETURNING true`

const sqlKeyGet = `
SELECT fingerprint, status, header, body, created_at, expires_at
  FROM idem_keys WHERE scope = $1 AND operation = $2 AND key = $3`

const sqlKeyRecord = `
UPDATE idem_keys SET status = $4, header = $5, body = $6
 WHERE scope = $1 AND operation = $2 AND key = $3`

const sqlKeyDeleteExpired = `
DELETE FROM idem_keys WHERE ctid IN (
  SELECT ctid FROM idem_keys WHERE expires_at <= $1 LIMIT $2)`

func (d *Driver) KeyClaim(ctx context.Context, tx driver.Tx, p *driver.KeyClaimParams) (*driver.KeyClaimResult, error) {
	var claimed bool
	err := tx.QueryRow(ctx, sqlKeyClaim, p.ID.Scope, p.ID.Operation, p.ID.Key, p.Fingerprint, p.Now, p.ExpiresAt).Scan(&claimed)
	if err == nil {
		return &driver.KeyClaimResult{Claimed: true}, nil
	}
	if !errors.Is(err, driver.ErrNotFound) {
		return nil, err
	}
	// A live record exists and was committed by the time the insert
	// returned; under READ COMMITTED this new statement sees it.
	rec, err := d.KeyGet(ctx, tx, &driver.KeyGetParams{ID: p.ID})
	if err != nil {
		return nil, err
	}
	return &driver.KeyClaimResult{Existing: rec}, nil
}

func (d *Driver) KeyRecord(ctx context.Context, tx driver.Tx, p *driver.KeyRecordParams) error {
	n, err := tx.Exec(ctx, sqlKeyRecord, p.ID.Scope, p.ID.Operation, p.ID.Key, p.Status, p.Header, p.Body)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("postgres: record outcome: %d rows hold the claim, want 1", n)
	}
	return nil
}

func (d *Driver) KeyGet(ctx context.Context, tx driver.Tx, p *driver.KeyGetParams) (*driver.KeyRecord, error) {
	rec := &driver.KeyRecord{ID: p.ID}
	err := tx.QueryRow(ctx, sqlKeyGet, p.ID.Scope, p.ID.Operation, p.ID.Key).
		Scan(&rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.CreatedAt, &rec.ExpiresAt)
	if err != nil {
		return nil, err
	}
	return rec, nil
}

func (d *Driver) KeyDeleteExpired(ctx context.Context, tx driver.Tx, p *driver.KeyDeleteExpiredParams) (int, error) {
	n, err := tx.Exec(ctx, sqlKeyDeleteExpired, p.Now, p.Limit)
	return int(n), err
}
