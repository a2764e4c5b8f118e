// Package inspect answers an operator's questions about a running idem
// database — what happened to this idempotency key, what did the ledger
// believe about this account at 14:02, is the ledger sound — and formats the
// answers as human tables or JSON. The CLI (idem keys, idem ledger) and the
// web console share it, so both tell the same story.
package inspect

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/ledger"
)

// MaxKeyRecords bounds the records one key lookup returns: one per
// operation that holds the key, and a tenant has a handful of operations.
const MaxKeyRecords = 100

// MaxBodyPreviewBytes bounds the stored body a human table prints; --json
// and the console show it whole (it is bounded by the service's body limit).
const MaxBodyPreviewBytes = 4 << 10

// KeyRecord is one stored idempotency record as an operator reads it.
type KeyRecord struct {
	Tenant    string `json:"tenant"`
	Operation string `json:"operation"`
	Key       string `json:"key"`
	// Fingerprint is the hex SHA-256 of the first request's method,
	// concrete path and canonical body: a retry with another payload has
	// another fingerprint and is refused.
	Fingerprint string    `json:"fingerprint"`
	FirstSeen   time.Time `json:"first_seen"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Expired records count as absent for the keeper (a new request with
	// the key runs again) until the janitor deletes them.
	Expired bool `json:"expired"`
	// Status and Body are the stored outcome every duplicate is answered with.
	Status int             `json:"status"`
	Header json.RawMessage `json:"header,omitempty"`
	// Sealed says the stored header and body are encrypted (idem serve's
	// --encryption-key-file): neither is shown.
	Sealed bool `json:"sealed,omitempty"`
	// Body is the stored body: JSON as is, anything else as a JSON string.
	Body json.RawMessage `json:"body"`
}

// Keys reads the records of one client key in a tenant: under operation,
// or under every operation that holds it when operation is "". No record is
// an empty list, not an error.
func Keys(ctx context.Context, d driver.Driver, now time.Time, tenant, operation, key string) ([]KeyRecord, error) {
	if tenant == "" || key == "" {
		return nil, errors.New("inspect: a tenant and a key are required")
	}
	var recs []driver.KeyRecord
	if operation != "" {
		rec, err := d.KeyGet(ctx, d.Reader(), &driver.KeyGetParams{ID: driver.KeyID{Scope: tenant, Operation: operation, Key: key}})
		switch {
		case errors.Is(err, driver.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("inspect: read key: %w", err)
		default:
			recs = append(recs, *rec)
		}
	} else {
		var err error
		recs, err = d.KeyList(ctx, d.Reader(), &driver.KeyListParams{Scope: tenant, Key: key, Limit: MaxKeyRecords})
		if err != nil {
			return nil, fmt.Errorf("inspect: list key: %w", err)
		}
	}
	out := make([]KeyRecord, len(recs))
	for i, r := range recs {
		out[i] = KeyRecordOf(r, now)
	}
	return out, nil
}

// KeyRecordOf is a stored record as an operator reads it at now.
func KeyRecordOf(r driver.KeyRecord, now time.Time) KeyRecord {
	if r.Sealed {
		// Encrypted at rest: the operator's tools read no plaintext, and
		// show no ciphertext as if it were the answer.
		r.Header, r.Body = nil, nil
	}
	return KeyRecord{
		Sealed:      r.Sealed,
		Tenant:      r.ID.Scope,
		Operation:   r.ID.Operation,
		Key:         r.ID.Key,
		Fingerprint: hex.EncodeToString(r.Fingerprint),
		FirstSeen:   r.CreatedAt.UTC(),
		ExpiresAt:   r.ExpiresAt.UTC(),
		Expired:     !r.ExpiresAt.After(now),
		Status:      r.Status,
		Header:      jsonOrNil(r.Header),
		Body:        jsonOrString(r.Body),
	}
}

func jsonOrNil(b []byte) json.RawMessage {
	if len(b) == 0 || !json.Valid(b) {
		return nil
	}
	return json.RawMessage(b)
}

func jsonOrString(b []byte) json.RawMessage {
	if len(b) > 0 && json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b)) // a string always encodes
	return s
}

// BodyText is the stored body as people read it: the JSON as stored, or the
// text it was.
func (r KeyRecord) BodyText() string {
	var s string
	if json.Unmarshal(r.Body, &s) == nil {
		return s
	}
	return string(r.Body)
}

// Balance is an account's totals as believed at a moment (or now), with the
// account itself.
type Balance struct {
	Tenant   string         `json:"tenant"`
	Account  ledger.Account `json:"account"`
	Believed ledger.Balance `json:"balance"`
}

// AccountBalance reads the account and its balance as of *asOf (nil: now),
// in one snapshot unless the moment needs a read-write transaction (see
// ReadAsOf). ledger.ErrNotFound (wrapped) when the tenant has no such
// account.
func AccountBalance(ctx context.Context, d driver.Driver, l *ledger.Ledger, tenant, account string, asOf *time.Time) (Balance, error) {
	out := Balance{Tenant: tenant}
	err := ReadAsOf(ctx, d, l, asOf, d.BeginSnapshot, func(tx driver.Tx) (err error) {
		if out.Account, err = l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: tenant, ID: account}); err != nil {
			return err
		}
		out.Believed, err = l.Balance(ctx, tx, ledger.BalanceQuery{Tenant: tenant, AccountID: account, AsOf: asOf})
		return err
	})
	return out, err
}

// Verify runs ledger.Verify in one snapshot, so transfers committed while it
// reads are never mistaken for broken invariants. A *ledger.VerifyError
// lists the violations.
func Verify(ctx context.Context, d driver.Driver) error {
	return Snapshot(ctx, d, func(tx driver.Tx) error { return ledger.Verify(ctx, d, tx) })
}

// Snapshot runs fn in a read-only transaction in which every statement sees
// the same committed state.
func Snapshot(ctx context.Context, d driver.Driver, fn func(tx driver.Tx) error) error {
	return inTx(ctx, d.BeginSnapshot, fn)
}

// ReadAsOf runs fn, which reads the ledger as of *asOf (nil: now), in the
// read-only transaction begin starts: a moment before the account's newest
// entry is answered there, waiting for nobody. A moment the writers' clock
// has not passed is waited for first, before any transaction begins
// (ledger.AwaitMoment), so the wait holds no connection. When the ledger
// answers ledger.ErrNeedsWriteTx (the moment is at or after the newest
// entry, and entries up to it may still be committing), fn runs once more
// in a read-write transaction — READ COMMITTED on Postgres, the single
// writer's on SQLite — in which the ledger waits for those writers; it is
// rolled back, as fn writes nothing. The service's routes, the console and
// the CLI all read as-of moments through here, so all give the final
// answer.
func ReadAsOf(ctx context.Context, d driver.Driver, l *ledger.Ledger, asOf *time.Time, begin func(context.Context) (driver.TxCloser, error), fn func(tx driver.Tx) error) error {
	if asOf != nil {
		if err := l.AwaitMoment(ctx, *asOf); err != nil {
			return err
		}
	}
	err := inTx(ctx, begin, fn)
	if !errors.Is(err, ledger.ErrNeedsWriteTx) {
		return err
	}
	return inTx(ctx, func(ctx context.Context) (driver.TxCloser, error) {
		return d.Begin(ctx, driver.BeginOptions{})
	}, fn)
}

// inTx runs fn in the transaction begin starts and rolls it back: fn
// writes nothing.
func inTx(ctx context.Context, begin func(context.Context) (driver.TxCloser, error), fn func(tx driver.Tx) error) error {
	tx, err := begin(ctx)
	if err != nil {
		return fmt.Errorf("inspect: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing was written: nothing to keep
	return fn(tx)
}
