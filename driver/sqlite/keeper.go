package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/driver"
)

// See the Postgres driver for why the claim looks like this. SQLite has one
// writer at a time, so a twin never waits on an uncommitted claim here: its
// BEGIN IMMEDIATE waits for the writer instead.
const sqlKeyClaim = `
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = excluded.fingerprint, status = 0, header = NULL, body = NULL, sealed = false,
       created_at = excluded.created_at, expires_at = excluded.expires_at
 WHERE idem_keys.expires_at <= excluded.created_at
RETURNING 1`

// sqlKeyClaimRows is sqlKeyClaim for many keys (rows.go), each returned
// when claimed.
var sqlKeyClaimRows = newRowsStmt(`
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
SELECT * FROM (VALUES `, `(?, ?, ?, ?, ?, ?)`, `) WHERE column1 IS NOT NULL
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = excluded.fingerprint, status = 0, header = NULL, body = NULL, sealed = false,
       created_at = excluded.created_at, expires_at = excluded.expires_at
 WHERE idem_keys.expires_at <= excluded.created_at
RETURNING scope, operation, key`)

const sqlKeyGet = `
SELECT fingerprint, status, header, body, sealed, created_at, expires_at
  FROM idem_keys WHERE scope = ?1 AND operation = ?2 AND key = ?3`

const sqlKeyRecord = `
UPDATE idem_keys SET status = ?4, header = ?5, body = ?6, sealed = ?7
 WHERE scope = ?1 AND operation = ?2 AND key = ?3`

// sqlKeyRecordRows is sqlKeyRecord for many keys (rows.go): each row
// of u is a search of the primary key (TestLedgerBatchPlans).
var sqlKeyRecordRows = newRowsStmt(`
UPDATE idem_keys SET status = u.column4, header = u.column5, body = u.column6, sealed = u.column7
  FROM (VALUES `, `(?, ?, ?, ?, ?, ?, ?)`, `) AS u
 WHERE idem_keys.scope = u.column1 AND idem_keys.operation = u.column2 AND idem_keys.key = u.column3`)

const sqlKeyRelease = `
DELETE FROM idem_keys WHERE scope = ?1 AND operation = ?2 AND key = ?3`

const sqlKeyDeleteExpired = `
DELETE FROM idem_keys WHERE (scope, operation, key) IN (
  SELECT scope, operation, key FROM idem_keys WHERE expires_at <= ?1 LIMIT ?2)`

func (d *Driver) KeyClaim(ctx context.Context, tx driver.Tx, p *driver.KeyClaimParams) (*driver.KeyClaimResult, error) {
	var one int
	err := tx.QueryRow(ctx, sqlKeyClaim, p.ID.Scope, p.ID.Operation, p.ID.Key, p.Fingerprint,
		toMicros(p.Now), toMicros(p.ExpiresAt)).Scan(&one)
	if err == nil {
		return &driver.KeyClaimResult{Claimed: true}, nil
	}
	if !errors.Is(err, driver.ErrNotFound) {
		return nil, err
	}
	rec, err := d.KeyGet(ctx, tx, &driver.KeyGetParams{ID: p.ID})
	if err != nil {
		return nil, err
	}
	return &driver.KeyClaimResult{Existing: rec}, nil
}

func (d *Driver) KeyRecord(ctx context.Context, tx driver.Tx, p *driver.KeyRecordParams) error {
	n, err := tx.Exec(ctx, sqlKeyRecord, p.ID.Scope, p.ID.Operation, p.ID.Key, p.Status, p.Header, p.Body, p.Sealed)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("sqlite: record outcome: %d rows hold the claim, want 1", n)
	}
	return nil
}

// KeyClaimBatch claims the keys in one statement (rows.go). With one
// writer at a time no other transaction holds a key, so the order cannot
// deadlock. A key left unclaimed, held by a live record, is read back on
// its own: a replay, rare in a batch of first arrivals.
func (d *Driver) KeyClaimBatch(ctx context.Context, tx driver.Tx, p *driver.KeyClaimBatchParams) ([]driver.KeyClaimResult, error) {
	at := make(map[driver.KeyID]int, len(p.Claims))
	for i, c := range p.Claims {
		if _, ok := at[c.ID]; ok {
			return nil, fmt.Errorf("sqlite: claim batch: key %q twice", c.ID.Key)
		}
		at[c.ID] = i
	}
	out := make([]driver.KeyClaimResult, len(p.Claims))
	now, expires := toMicros(p.Now), toMicros(p.ExpiresAt)
	claim := func(args []any, i int) []any {
		c := &p.Claims[i]
		return append(args, c.ID.Scope, c.ID.Operation, c.ID.Key, c.Fingerprint, now, expires)
	}
	err := eachStmt(len(p.Claims), 6, claim, func(k, lo, hi int, args []any) error {
		rows, err := tx.Query(ctx, sqlKeyClaimRows[k], args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id driver.KeyID
			if err := rows.Scan(&id.Scope, &id.Operation, &id.Key); err != nil {
				return err
			}
			i, ok := at[id]
			if !ok || i < lo || i >= hi {
				return fmt.Errorf("sqlite: claim batch: claimed key %q is none of the statement's", id.Key)
			}
			out[i].Claimed = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Claimed {
			continue
		}
		if out[i].Existing, err = d.KeyGet(ctx, tx, &driver.KeyGetParams{ID: p.Claims[i].ID}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// KeyRecordBatch stores the outcomes in one statement (rows.go) and
// releases the refused claims one statement at a time: they are rare.
func (d *Driver) KeyRecordBatch(ctx context.Context, tx driver.Tx, p *driver.KeyRecordBatchParams) error {
	n, err := writeRows(ctx, tx, &sqlKeyRecordRows, len(p.Records), 7, func(args []any, i int) []any {
		r := &p.Records[i]
		return append(args, r.ID.Scope, r.ID.Operation, r.ID.Key, r.Status, r.Header, r.Body, r.Sealed)
	})
	if err != nil {
		return err
	}
	if n != int64(len(p.Records)) {
		return fmt.Errorf("sqlite: record outcomes: %d rows hold the %d claims", n, len(p.Records))
	}
	for _, id := range p.Release {
		if err := d.KeyRelease(ctx, tx, &driver.KeyGetParams{ID: id}); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) KeyRelease(ctx context.Context, tx driver.Tx, p *driver.KeyGetParams) error {
	n, err := tx.Exec(ctx, sqlKeyRelease, p.ID.Scope, p.ID.Operation, p.ID.Key)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("sqlite: release claim: %d rows hold the claim, want 1", n)
	}
	return nil
}

// Writers is 1: SQLite has one writer at a time (driver.WriterBound).
func (d *Driver) Writers() int { return 1 }

func (d *Driver) KeyGet(ctx context.Context, tx driver.Tx, p *driver.KeyGetParams) (*driver.KeyRecord, error) {
	rec := &driver.KeyRecord{ID: p.ID}
	var created, expires int64
	err := tx.QueryRow(ctx, sqlKeyGet, p.ID.Scope, p.ID.Operation, p.ID.Key).
		Scan(&rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.Sealed, &created, &expires)
	if err != nil {
		return nil, err
	}
	rec.CreatedAt, rec.ExpiresAt = fromMicros(created), fromMicros(expires)
	return rec, nil
}

// SQLite is no driver.KeyReadBatcher: in process, a statement costs no
// round trip, and reads coalesced into one goroutine would leave the reader
// pool's other connections idle (docs/benchmarks.md, "Reads over arrays").

func (d *Driver) KeyDeleteExpired(ctx context.Context, tx driver.Tx, p *driver.KeyDeleteExpiredParams) (int, error) {
	n, err := tx.Exec(ctx, sqlKeyDeleteExpired, toMicros(p.Now), p.Limit)
	return int(n), err
}
