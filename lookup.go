package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
)

// Record is a key's stored record as Lookup reads it: the fingerprint of
// the request that made it, the outcome replayed to its copies (Header
// decoded as Do replays it) and when it was made and expires.
type Record struct {
	Key         Key
	Fingerprint []byte
	Outcome     Outcome
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// Lookup returns key's live record, or ErrNotFound when there is none or it
// expired.
func (k *Keeper) Lookup(ctx context.Context, key Key) (Record, error) {
	rec, err := k.d.KeyGet(ctx, k.d.Reader(), &driver.KeyGetParams{ID: key.id()})
	if err != nil {
		return Record{}, err
	}
	if !rec.ExpiresAt.After(k.cfg.Clock()) {
		return Record{}, fmt.Errorf("%w: key expired at %s", ErrNotFound, rec.ExpiresAt)
	}
	out, err := k.storedOutcome(ctx, key, rec)
	if err != nil {
		return Record{}, err
	}
	return Record{Key: key, Fingerprint: rec.Fingerprint, Outcome: out,
		CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt}, nil
}
