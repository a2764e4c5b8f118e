package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idemhq/idem/driver"
)

// The claim replaces a forgotten record (made before $7, the keeper's
// memory ago) in the same statement, so that a forgotten key behaves as new
// without a read-then-write; a live tombstone keeps the key from being
// inserted, and a record the memory still holds from being replaced. On a
// conflict the statement returns no row; a record held by an uncommitted
// transaction makes it wait (bounded by lock_timeout) for that
// transaction's end. idem_claimable (migration 12) fails the claim that
// inserted while the janitor, which it waited for, moved the key to its
// tombstone.
const sqlKeyClaim = `
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
SELECT $1::text, $2::text, $3::text, $4::bytea, $5::timestamptz, $6::timestamptz
 WHERE NOT EXISTS (SELECT 1 FROM idem_tombstones
                    WHERE scope = $1 AND id = idem_tombstone_id($1, $2, $3) AND created_at > $7)
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = EXCLUDED.fingerprint, status = 0, header = NULL, body = NULL, sealed = false,
       created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
 WHERE idem_keys.created_at <= $7
RETURNING idem_claimable(scope, operation, key, $7)`

// The batch claim is sqlKeyClaim over arrays: one statement for any number
// of keys. ORDER BY makes every batch insert, and so lock, its keys in one
// order, so two batches that share keys queue instead of deadlocking. It
// returns the keys it claimed; a key missing from its answer holds a
// record or a tombstone, read by sqlKeyGetKept in a statement of its own
// for the reason KeyClaim gives.
const sqlKeyClaimBatch = `
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
SELECT c.scope, c.operation, c.key, c.fingerprint, $5, $6
  FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) AS c(scope, operation, key, fingerprint)
 WHERE NOT EXISTS (SELECT 1 FROM idem_tombstones t
                    WHERE t.scope = c.scope AND t.id = idem_tombstone_id(c.scope, c.operation, c.key)
                      AND t.created_at > $7)
 ORDER BY c.scope, c.operation, c.key
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = EXCLUDED.fingerprint, status = 0, header = NULL, body = NULL, sealed = false,
       created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
 WHERE idem_keys.created_at <= $7
RETURNING scope, operation, key, idem_claimable(scope, operation, key, $7)`

// sqlKeyGetKept is what holds a key that a claim did not get: its record,
// or else its live tombstone (made after $4), in one snapshot, so that a
// record the janitor moves meanwhile is found in one place or the other.
const sqlKeyGetKept = `
SELECT fingerprint, status, header, body, created_at, expires_at, false
  FROM idem_keys WHERE scope = $1 AND operation = $2 AND key = $3
UNION ALL
SELECT fingerprint, status, NULL, NULL, created_at, created_at, true
  FROM idem_tombstones WHERE scope = $1 AND id = idem_tombstone_id($1, $2, $3) AND created_at > $4
LIMIT 1`

// sqlKeyGetBatch is sqlKeyGet over arrays: each record comes with its key's
// place in them, from 1. A plain join, planned generically (ten keys,
// whatever the arrays hold), read a table of a thousand keys whole into a
// hash; LIMIT 1 keeps the lookups apart, each a descent of the primary key.
const sqlKeyGetBatch = `
SELECT c.i, k.fingerprint, k.status, k.header, k.body, k.sealed, k.created_at, k.expires_at
  FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS c(scope, operation, key, i),
       LATERAL (SELECT * FROM idem_keys k
                 WHERE (k.scope, k.operation, k.key) = (c.scope, c.operation, c.key) LIMIT 1) k`

// keyGetArrays is the step that reads ids' records on sqlKeyGetBatch into
// out, out[i] for ids[i] and nil where there is none.
func keyGetArrays(ids []driver.KeyID, out []*driver.KeyRecord) step {
	scopes, ops, keys := make([]string, len(ids)), make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		scopes[i], ops[i], keys[i] = id.Scope, id.Operation, id.Key
	}
	return step{sql: sqlKeyGetBatch, args: []any{scopes, ops, keys}, read: func(rows driver.Rows) error {
		for rows.Next() {
			var i int
			rec := &driver.KeyRecord{}
			if err := rows.Scan(&i, &rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.Sealed, &rec.CreatedAt, &rec.ExpiresAt); err != nil {
				return err
			}
			rec.ID = ids[i-1]
			out[i-1] = rec
		}
		return nil
	}}
}

// The batch's outcomes, and the claims its refused requests release, in
// one statement. The claims are the transaction's own rows, so neither
// meets another writer; idem_expect (migration 9) fails the statement
// (IDM02) unless every key found its claim, so that the check holds even
// when the statement travels in COMMIT's round trip (KeyRecordCommit).
const sqlKeyRecordBatch = `
WITH r AS (
  UPDATE idem_keys AS k SET status = r.status, header = r.header, body = r.body, sealed = r.sealed
    FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::bytea[], $6::bytea[], $10::boolean[])
         AS r(scope, operation, key, status, header, body, sealed)
   WHERE (k.scope, k.operation, k.key) = (r.scope, r.operation, r.key)
  RETURNING 1),
d AS (
  DELETE FROM idem_keys AS k
   USING unnest($7::text[], $8::text[], $9::text[]) AS r(scope, operation, key)
   WHERE (k.scope, k.operation, k.key) = (r.scope, r.operation, r.key)
  RETURNING 1)
SELECT idem_expect((SELECT count(*) FROM r), cardinality($1::text[]), 'record outcomes')
   AND idem_expect((SELECT count(*) FROM d), cardinality($7::text[]), 'release claims')`

const sqlKeyGet = `
SELECT fingerprint, status, header, body, sealed, created_at, expires_at
  FROM idem_keys WHERE scope = $1 AND operation = $2 AND key = $3`

// sqlKeyRecord is sqlKeyRecordBatch for one outcome, with a cached plan.
const sqlKeyRecord = `
WITH r AS (
  UPDATE idem_keys SET status = $4, header = $5, body = $6, sealed = $7
   WHERE scope = $1 AND operation = $2 AND key = $3
  RETURNING 1)
SELECT idem_expect((SELECT count(*) FROM r), 1, 'record outcome')`

// The janitor moves a batch of expired records to their tombstones in one
// statement; a record made before $2 is past the memory too, and is only
// deleted. It skips the rows another transaction locks (a claim replacing
// a forgotten record, in key order): it never waits on one, so it can
// never deadlock with a batch's claims, and a skipped row is moved next
// time. A tombstone made from a key's earlier life (forgotten, not yet
// deleted) is replaced.
const sqlKeyTombstone = `
WITH moved AS (
  DELETE FROM idem_keys WHERE ctid IN (
    SELECT ctid FROM idem_keys WHERE expires_at <= $1 LIMIT $3 FOR UPDATE SKIP LOCKED)
  RETURNING scope, operation, key, fingerprint, status, created_at),
kept AS (
  INSERT INTO idem_tombstones (scope, id, fingerprint, status, created_at)
  SELECT scope, idem_tombstone_id(scope, operation, key), substr(sha256(fingerprint), 1, 16), status, created_at
    FROM moved WHERE created_at > $2
  ON CONFLICT (scope, id) DO UPDATE
     SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status, created_at = EXCLUDED.created_at
  RETURNING 1)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM kept)`

// sqlKeyForget deletes a batch of tombstones past the memory, skipping
// locked ones as sqlKeyTombstone does.
const sqlKeyForget = `
DELETE FROM idem_tombstones WHERE ctid IN (
  SELECT ctid FROM idem_tombstones WHERE created_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`

func (d *Driver) KeyClaim(ctx context.Context, tx driver.Tx, p *driver.KeyClaimParams) (*driver.KeyClaimResult, error) {
	var claimed bool
	err := tx.QueryRow(ctx, sqlKeyClaim, p.ID.Scope, p.ID.Operation, p.ID.Key, p.Fingerprint, p.Now, p.ExpiresAt, p.ForgetBefore).Scan(&claimed)
	if err == nil {
		return &driver.KeyClaimResult{Claimed: true}, nil
	}
	if !errors.Is(err, driver.ErrNotFound) {
		return nil, err
	}
	// A record or a tombstone exists and was committed by the time the
	// insert returned; under READ COMMITTED this new statement sees it.
	rec, err := d.keyGetKept(ctx, tx, p.ID, p.ForgetBefore)
	if err != nil {
		return nil, err
	}
	return &driver.KeyClaimResult{Existing: rec}, nil
}

// keyGetKept reads what holds id after a claim that did not get it
// (sqlKeyGetKept).
func (d *Driver) keyGetKept(ctx context.Context, tx driver.Tx, id driver.KeyID, forgetBefore time.Time) (*driver.KeyRecord, error) {
	rec := &driver.KeyRecord{ID: id}
	err := tx.QueryRow(ctx, sqlKeyGetKept, id.Scope, id.Operation, id.Key, forgetBefore).
		Scan(&rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.CreatedAt, &rec.ExpiresAt, &rec.Tombstone)
	if err != nil {
		return nil, err
	}
	return rec, nil
}

func (d *Driver) KeyRecord(ctx context.Context, tx driver.Tx, p *driver.KeyRecordParams) error {
	return pipeline(ctx, tx, recordStep(&driver.KeyRecordBatchParams{Records: []driver.KeyRecordParams{*p}}))
}

func (d *Driver) KeyRelease(ctx context.Context, tx driver.Tx, p *driver.KeyGetParams) error {
	return d.KeyRecordBatch(ctx, tx, &driver.KeyRecordBatchParams{Release: []driver.KeyID{p.ID}})
}

func (d *Driver) KeyClaimBatch(ctx context.Context, tx driver.Tx, p *driver.KeyClaimBatchParams) ([]driver.KeyClaimResult, error) {
	n := len(p.Claims)
	if n == 1 && p.Guard == nil {
		// The single claim's statement has a cached plan: a batch of one
		// costs what Do's claim costs.
		c := p.Claims[0]
		res, err := d.KeyClaim(ctx, tx, &driver.KeyClaimParams{ID: c.ID, Fingerprint: c.Fingerprint, Now: p.Now, ExpiresAt: p.ExpiresAt, ForgetBefore: p.ForgetBefore})
		if err != nil {
			return nil, err
		}
		return []driver.KeyClaimResult{*res}, nil
	}
	scopes, ops, keys := make([]string, n), make([]string, n), make([]string, n)
	fps := make([][]byte, n)
	at := make(map[driver.KeyID]int, n)
	for i, c := range p.Claims {
		if _, dup := at[c.ID]; dup {
			return nil, fmt.Errorf("postgres: claim batch: key %q twice", c.ID.Key)
		}
		at[c.ID] = i
		scopes[i], ops[i], keys[i], fps[i] = c.ID.Scope, c.ID.Operation, c.ID.Key, c.Fingerprint
	}
	out := make([]driver.KeyClaimResult, n)
	claimed := 0
	claim := step{sql: sqlKeyClaimBatch, args: []any{scopes, ops, keys, fps, p.Now, p.ExpiresAt, p.ForgetBefore}, read: func(rows driver.Rows) error {
		for rows.Next() {
			var id driver.KeyID
			var claimable bool
			if err := rows.Scan(&id.Scope, &id.Operation, &id.Key, &claimable); err != nil {
				return err
			}
			i, ok := at[id]
			if !ok || out[i].Claimed {
				return fmt.Errorf("postgres: claim batch: key %q claimed but not asked for, or twice", id.Key)
			}
			out[i].Claimed = true
			claimed++
		}
		return nil
	}}
	if err := pipeline(ctx, tx, guarded(p.Guard, generic(claim))...); err != nil {
		return nil, err
	}
	if claimed == n {
		return out, nil
	}
	// The records and tombstones were committed by the time the insert
	// returned; under READ COMMITTED these new statements see them. A key
	// left unclaimed is a replay or a tombstone, rare in a batch of first
	// arrivals, and is read on its own.
	for i, c := range p.Claims {
		if out[i].Claimed {
			continue
		}
		rec, err := d.keyGetKept(ctx, tx, c.ID, p.ForgetBefore)
		if err != nil {
			// Gone between the two statements: only a janitor whose clock
			// runs ahead of ours deletes one.
			return nil, fmt.Errorf("postgres: claim batch: conflicting record of key %q: %w", c.ID.Key, err)
		}
		out[i].Existing = rec
	}
	return out, nil
}

// guarded surrounds the claim's steps with a ClaimGuard's, in the same
// round trip: the check that the caller's transaction is fit for a claim
// (its first write, READ COMMITTED: sqlClaimCheck), and its lock bound,
// set before the claim and the transaction's own restored after.
func guarded(g *driver.ClaimGuard, claim []step) []step {
	if g == nil {
		return claim
	}
	out := []step{unread(sqlClaimCheck)}
	if g.LockTimeout > 0 {
		ms := strconv.FormatInt(max(g.LockTimeout.Milliseconds(), 1), 10)
		out = append(out, unread(sqlClaimLockOn, ms))
		return append(append(out, claim...), unread(sqlClaimLockOff))
	}
	return append(out, claim...)
}

// sqlClaimCheck refuses a transaction that is not READ COMMITTED, or that
// wrote before its first claim (it has a transaction id: only a write, or
// a row lock, assigns one; idem.claimed marks a transaction that claimed
// already), with idem's SQLSTATE IDM03, so that the statements behind it
// in the round trip are skipped and nothing is claimed. What follows a
// claim is the caller's, who sees whether it replayed.
const sqlClaimCheck = `DO $$BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION USING ERRCODE = 'IDM03',
      MESSAGE = 'idem: the claim needs a READ COMMITTED transaction, this one is ' || current_setting('transaction_isolation');
  END IF;
  IF txid_current_if_assigned() IS NOT NULL AND current_setting('idem.claimed', true) IS DISTINCT FROM 'on' THEN
    RAISE EXCEPTION USING ERRCODE = 'IDM03',
      MESSAGE = 'idem: the claim must come before the transaction''s first write: this transaction wrote before it';
  END IF;
  PERFORM set_config('idem.claimed', 'on', true);
END$$`

const (
	sqlClaimLockOn = `SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true),
       set_config('lock_timeout', $1, true)`
	sqlClaimLockOff = `SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true)`
)

func (d *Driver) KeyRecordBatch(ctx context.Context, tx driver.Tx, p *driver.KeyRecordBatchParams) error {
	if len(p.Records) == 0 && len(p.Release) == 0 {
		return nil
	}
	return pipeline(ctx, tx, recordSteps(p)...)
}

// KeyRecordCommit sends the outcomes' statement and COMMIT in one round
// trip when tx is this driver's own; each answers its own error, and when
// the outcomes' fails, COMMIT does not run and tx stays open for its
// Rollback. On another transaction it is KeyRecordBatch, then Commit.
func (d *Driver) KeyRecordCommit(ctx context.Context, tx driver.TxCloser, p *driver.KeyRecordBatchParams) error {
	t, ok := driver.Underlying(tx).(*ownedTx)
	if !ok {
		if err := d.KeyRecordBatch(ctx, tx, p); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	var steps []step
	if len(p.Records) > 0 || len(p.Release) > 0 {
		steps = recordSteps(p)
	}
	if err := t.commitAfter(ctx, steps...); err != nil {
		return err
	}
	return tx.Commit(ctx) // a no-op for t, run for the wrappers around it
}

// recordSteps is the step that stores p: a batch of one outcome on its
// own statement, whose plan is cached (a batch of one costs what Do's
// record costs), any other under a generic plan.
func recordSteps(p *driver.KeyRecordBatchParams) []step {
	if len(p.Records) == 1 && len(p.Release) == 0 {
		return []step{recordStep(p)}
	}
	return generic(recordStep(p))
}

// recordStep is p's outcomes and releases on sqlKeyRecordBatch, or one
// outcome on sqlKeyRecord.
func recordStep(p *driver.KeyRecordBatchParams) step {
	if len(p.Records) == 1 && len(p.Release) == 0 {
		r := &p.Records[0]
		return step{sql: sqlKeyRecord, args: []any{r.ID.Scope, r.ID.Operation, r.ID.Key, r.Status, r.Header, r.Body, r.Sealed}, read: drain}
	}
	n, m := len(p.Records), len(p.Release)
	scopes, ops, keys := make([]string, n), make([]string, n), make([]string, n)
	statuses := make([]int32, n)
	headers, bodies := make([][]byte, n), make([][]byte, n)
	sealed := make([]bool, n)
	for i, r := range p.Records {
		scopes[i], ops[i], keys[i] = r.ID.Scope, r.ID.Operation, r.ID.Key
		statuses[i], headers[i], bodies[i], sealed[i] = int32(r.Status), r.Header, r.Body, r.Sealed
	}
	rscopes, rops, rkeys := make([]string, m), make([]string, m), make([]string, m)
	for i, id := range p.Release {
		rscopes[i], rops[i], rkeys[i] = id.Scope, id.Operation, id.Key
	}
	return step{sql: sqlKeyRecordBatch, args: []any{scopes, ops, keys, statuses, headers, bodies, rscopes, rops, rkeys, sealed}, read: drain}
}

// drain reads a statement's rows to their end, so that an error raised
// while it runs (idem_expect's) is its error on every kind of transaction.
func drain(rows driver.Rows) error {
	for rows.Next() {
	}
	return rows.Err()
}

func (d *Driver) KeyGet(ctx context.Context, tx driver.Tx, p *driver.KeyGetParams) (*driver.KeyRecord, error) {
	rec := &driver.KeyRecord{ID: p.ID}
	err := tx.QueryRow(ctx, sqlKeyGet, p.ID.Scope, p.ID.Operation, p.ID.Key).
		Scan(&rec.Fingerprint, &rec.Status, &rec.Header, &rec.Body, &rec.Sealed, &rec.CreatedAt, &rec.ExpiresAt)
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// KeyGetBatch reads keys in one statement over arrays (sqlKeyGetBatch),
// under a generic plan.
func (d *Driver) KeyGetBatch(ctx context.Context, tx driver.Tx, p *driver.KeyGetBatchParams) ([]*driver.KeyRecord, error) {
	out := make([]*driver.KeyRecord, len(p.IDs))
	if err := pipeline(ctx, tx, generic(keyGetArrays(p.IDs, out))...); err != nil {
		return nil, err
	}
	return out, nil
}

func (d *Driver) KeyDeleteExpired(ctx context.Context, tx driver.Tx, p *driver.KeyDeleteExpiredParams) (int, error) {
	var moved, kept int
	if err := tx.QueryRow(ctx, sqlKeyTombstone, p.Now, p.ForgetBefore, p.Limit).Scan(&moved, &kept); err != nil {
		return 0, err
	}
	forgotten, err := tx.Exec(ctx, sqlKeyForget, p.ForgetBefore, p.Limit)
	if err != nil {
		return 0, err
	}
	return max(moved, int(forgotten)), nil
}
