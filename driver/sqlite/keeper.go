package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
)

// See the Postgres driver for why the claim looks like this (?7 is the
// time before which records and tombstones are forgotten, ?8 the key's
// driver.TombstoneID). SQLite has one writer at a time, so a twin never
// waits on an uncommitted claim here, nor a claim on the janitor's move:
// its BEGIN IMMEDIATE waits for the writer instead.
const sqlKeyClaim = `
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6
 WHERE NOT EXISTS (SELECT 1 FROM idem_tombstones WHERE id = ?8 AND created_at > ?7)
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = excluded.fingerprint, status = 0, header = NULL, body = NULL, sealed = false,
       created_at = excluded.created_at, expires_at = excluded.expires_at
 WHERE idem_keys.created_at <= ?7
RETURNING 1`

// sqlKeyClaimRows is sqlKeyClaim for many keys (rows.go), each returned
// when claimed: a row's values are sqlKeyClaim's ?1..?8.
// Every row carries the same ?7, which the upsert's WHERE (that sees only
// the table's row and excluded) reads from the first row of v.
var sqlKeyClaimRows = newRowsStmt(`
WITH v AS (VALUES `, `(?, ?, ?, ?, ?, ?, ?, ?)`, `)
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
SELECT column1, column2, column3, column4, column5, column6 FROM v
 WHERE column1 IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM idem_tombstones t WHERE t.id = v.column8 AND t.created_at > v.column7)
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = excluded.fingerprint, status = 0, header = NULL, body = NULL, sealed = false,
       created_at = excluded.created_at, expires_at = excluded.expires_at
 WHERE idem_keys.created_at <= (SELECT column7 FROM v LIMIT 1)
RETURNING scope, operation, key`)

// sqlKeyGetTombstone reads a key's live tombstone (made after ?2).
const sqlKeyGetTombstone = `
SELECT fingerprint, status, created_at FROM idem_tombstones WHERE id = ?1 AND created_at > ?2`

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

// The janitor reads a batch of expired records, then moves each to its
// tombstone (or only deletes it when it is past the memory too): SQLite
// runs statements in process, so one a row costs no round trip. A
// tombstone from a key's earlier life, not yet deleted, is replaced.
const sqlKeyExpired = `
SELECT scope, operation, key, fingerprint, status, created_at FROM idem_keys WHERE expires_at <= ?1 LIMIT ?2`

const sqlKeyPutTombstone = `
INSERT OR REPLACE INTO idem_tombstones (id, fingerprint, status, created_at) VALUES (?1, ?2, ?3, ?4)`

const sqlKeyForget = `
DELETE FROM idem_tombstones WHERE id IN (
  SELECT id FROM idem_tombstones WHERE created_at <= ?1 LIMIT ?2)`

func (d *Driver) KeyClaim(ctx context.Context, tx driver.Tx, p *driver.KeyClaimParams) (*driver.KeyClaimResult, error) {
	var one int
	err := tx.QueryRow(ctx, sqlKeyClaim, p.ID.Scope, p.ID.Operation, p.ID.Key, p.Fingerprint,
		toMicros(p.Now), toMicros(p.ExpiresAt), toMicros(p.ForgetBefore), driver.TombstoneID(p.ID)).Scan(&one)
	if err == nil {
		return &driver.KeyClaimResult{Claimed: true}, nil
	}
	if !errors.Is(err, driver.ErrNotFound) {
		return nil, err
	}
	rec, err := d.keyGetKept(ctx, tx, p.ID, p.ForgetBefore)
	if err != nil {
		return nil, err
	}
	return &driver.KeyClaimResult{Existing: rec}, nil
}

// keyGetKept reads what holds id after a claim that did not get it: its
// record, or else its live tombstone. With one writer, nothing moves
// between the two reads.
func (d *Driver) keyGetKept(ctx context.Context, tx driver.Tx, id driver.KeyID, forgetBefore time.Time) (*driver.KeyRecord, error) {
	rec, err := d.KeyGet(ctx, tx, &driver.KeyGetParams{ID: id})
	if !errors.Is(err, driver.ErrNotFound) {
		return rec, err
	}
	rec = &driver.KeyRecord{ID: id, Tombstone: true}
	var created int64
	err = tx.QueryRow(ctx, sqlKeyGetTombstone, driver.TombstoneID(id), toMicros(forgetBefore)).
		Scan(&rec.Fingerprint, &rec.Status, &created)
	if err != nil {
		return nil, err
	}
	rec.CreatedAt = fromMicros(created)
	rec.ExpiresAt = rec.CreatedAt
	return rec, nil
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
	now, expires, forget := toMicros(p.Now), toMicros(p.ExpiresAt), toMicros(p.ForgetBefore)
	claim := func(args []any, i int) []any {
		c := &p.Claims[i]
		return append(args, c.ID.Scope, c.ID.Operation, c.ID.Key, c.Fingerprint, now, expires, forget, driver.TombstoneID(c.ID))
	}
	err := eachStmt(len(p.Claims), 8, claim, func(k, lo, hi int, args []any) error {
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
		if out[i].Existing, err = d.keyGetKept(ctx, tx, p.Claims[i].ID, p.ForgetBefore); err != nil {
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
// pool's other connections idle (docs/architecture.md, "Reads over arrays").

func (d *Driver) KeyDeleteExpired(ctx context.Context, tx driver.Tx, p *driver.KeyDeleteExpiredParams) (int, error) {
	forget := toMicros(p.ForgetBefore)
	type expired struct {
		id          driver.KeyID
		fingerprint []byte
		status      int
		created     int64
	}
	rows, err := tx.Query(ctx, sqlKeyExpired, toMicros(p.Now), p.Limit)
	if err != nil {
		return 0, err
	}
	var batch []expired
	for rows.Next() {
		var e expired
		if err := rows.Scan(&e.id.Scope, &e.id.Operation, &e.id.Key, &e.fingerprint, &e.status, &e.created); err != nil {
			rows.Close()
			return 0, err
		}
		batch = append(batch, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, e := range batch {
		if e.created > forget {
			if _, err := tx.Exec(ctx, sqlKeyPutTombstone, driver.TombstoneID(e.id),
				driver.TombstoneFingerprint(e.fingerprint), e.status, e.created); err != nil {
				return 0, err
			}
		}
		if _, err := tx.Exec(ctx, sqlKeyRelease, e.id.Scope, e.id.Operation, e.id.Key); err != nil {
			return 0, err
		}
	}
	forgotten, err := tx.Exec(ctx, sqlKeyForget, forget, p.Limit)
	if err != nil {
		return 0, err
	}
	return max(len(batch), int(forgotten)), nil
}
