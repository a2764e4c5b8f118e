// Package seal encrypts what idem stores before it reaches the database:
// stored answers, outbox payloads, inbox and webhook-intake bodies
// (docs/operations.md, "What idem keeps").
//
// A Sealer encrypts each record under its tenant's data key, and binds the
// ciphertext to where it is stored: the table, the tenant and the row's key
// are the associated data, so a ciphertext moved to another row, table or
// tenant fails to open instead of decrypting as someone else's.
package seal

import (
	"context"
	"errors"
)

// A Sealer seals and opens records for storage. Its methods are safe for
// concurrent use. A nil Sealer means records are stored as they are.
type Sealer interface {
	// Seal encrypts plaintext for the row named by table, tenant and key.
	Seal(ctx context.Context, table, tenant, key string, plaintext []byte) ([]byte, error)
	// Open decrypts what Seal returned for the same table, tenant and key.
	// It returns ErrForgotten when the tenant's data key was destroyed, and
	// an error wrapping ErrAuthentication when the ciphertext does not
	// open under the named row or any key the Sealer holds.
	Open(ctx context.Context, table, tenant, key string, sealed []byte) ([]byte, error)
}

// A Preparer is a Sealer whose first Seal for a tenant may need a write
// transaction of its own: Envelope stores the tenant's new data key.
// Prepare does that write now, before the caller begins the write
// transaction its Seals run in, so that they need no second one. On
// SQLite, whose one writer the caller's transaction holds, a second write
// transaction would wait for the first to end, until the caller's
// deadline; on PostgreSQL it takes a second connection from the pool.
//
// A caller that seals inside a transaction it begins (the keeper's Do and
// Batcher) calls Prepare for the tenant first when its Sealer is a
// Preparer.
type Preparer interface {
	// Prepare makes sure that a Seal for the tenant needs no write.
	Prepare(ctx context.Context, tenant string) error
}

var (
	// ErrForgotten: the tenant's data key was destroyed (idem tenants
	// forget); what was sealed under it can never be read again.
	ErrForgotten = errors.New("idem/seal: the tenant's data was forgotten")
	// ErrAuthentication: a ciphertext failed authentication — a wrong
	// key, or a row moved or changed.
	ErrAuthentication = errors.New("idem/seal: the record does not authenticate")
)
