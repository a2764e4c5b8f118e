package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/sealframe"
)

// keysTable is the table the keeper's records live in: the table of the
// associated data its sealed outcomes are bound to (package seal).
const keysTable = "idem_keys"

// ErrNoSealer: a stored record is encrypted (its row is marked sealed)
// and this process was given no Sealer to open it. Nothing is answered
// from it: ciphertext is never replayed as an answer. Give the process
// the key file (idem serve --encryption-key-file) the record was written
// under.
var ErrNoSealer = errors.New("idem: the stored record is encrypted and this process has no Sealer to open it")

// sealKey is the row's unique key within its tenant, the key of the
// associated data: the operation and the client key, split by a NUL
// that no client key holds (checkKey), so that no two rows share one.
func (k Key) sealKey() string { return k.Operation + "\x00" + k.Key }

// sealRecord encrypts p's header and body together into p.Body, under
// key's row, when the keeper has a Sealer. The status stays readable: it
// says nothing of the answer's content, and operators read it.
func (k *Keeper) sealRecord(ctx context.Context, key Key, p *driver.KeyRecordParams) error {
	if k.cfg.Sealer == nil {
		return nil
	}
	plain := sealframe.Pack(p.Header, p.Body)
	sealed, err := k.cfg.Sealer.Seal(ctx, keysTable, key.Scope, key.sealKey(), plain)
	if err != nil {
		return fmt.Errorf("idem: seal the outcome of key %q: %w", key.Key, err)
	}
	p.Header, p.Body, p.Sealed = nil, sealed, true
	return nil
}

// openRecord returns rec's header and body as they were stored: opened
// when the row is sealed, as they are otherwise (a row written before
// encryption was turned on). A sealed row without a Sealer is
// ErrNoSealer; one whose tenant was forgotten wraps seal.ErrForgotten.
func (k *Keeper) openRecord(ctx context.Context, key Key, rec *driver.KeyRecord) (header, body []byte, err error) {
	if !rec.Sealed {
		return rec.Header, rec.Body, nil
	}
	if k.cfg.Sealer == nil {
		return nil, nil, fmt.Errorf("%w (key %q of tenant %q)", ErrNoSealer, key.Key, key.Scope)
	}
	plain, err := k.cfg.Sealer.Open(ctx, keysTable, key.Scope, key.sealKey(), rec.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("idem: open the stored outcome of key %q: %w", key.Key, err)
	}
	header, body, ok := sealframe.Unpack(plain)
	if !ok {
		return nil, nil, fmt.Errorf("idem: the stored outcome of key %q opened to a malformed record", key.Key)
	}
	return header, body, nil
}
