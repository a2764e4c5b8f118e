package outbox

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/idemhq/idem/driver"
)

// List's cursors are sealed: a plain list position (a transaction id and a
// row position shared by every tenant) would tell a tenant how many other
// tenants' events and transactions lie between two of its own pages. A
// sealed cursor is the position encrypted and authenticated (AES-256-GCM)
// under a key every process reads from the database (driver.OutboxSecret,
// generated once), with the tenant as associated data: it reveals nothing
// of the position, and it opens only for the tenant it was handed to. A
// plain position is refused: accepted, it would let a tenant probe the
// shared positions around its own events.
// Its nonce is derived from the tenant and the position (an HMAC), so the
// same page gives the same cursor, and distinct positions never share a
// nonce.

// cursorSecretName names the key in the database's secrets.
const cursorSecretName = "outbox.list_cursor"

const (
	cursorSecretBytes = 32
	cursorPlainBytes  = 16 // the transaction id and the position, 8 bytes each
	cursorNonceBytes  = 12
)

// cursorSealer seals and opens List cursors; its key is read (or created)
// on first use and kept.
type cursorSealer struct {
	mu       sync.Mutex
	aead     cipher.AEAD
	nonceKey []byte
}

// load returns the sealer's AEAD and nonce key, reading the secret on first
// use, and creating it when the database has none yet.
func (o *Outbox) cursorKeys(ctx context.Context) (cipher.AEAD, []byte, error) {
	s := &o.cursors
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aead != nil {
		return s.aead, s.nonceKey, nil
	}
	secret, err := o.d.OutboxSecret(ctx, o.d.Reader(), &driver.OutboxSecretParams{Name: cursorSecretName})
	if errors.Is(err, driver.ErrNotFound) {
		secret, err = o.initCursorSecret(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("outbox: read the cursor key: %w", err)
	}
	if len(secret) != cursorSecretBytes {
		return nil, nil, fmt.Errorf("outbox: the cursor key is %d bytes, want %d", len(secret), cursorSecretBytes)
	}
	block, err := aes.NewCipher(derive(secret, "encrypt"))
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	s.aead, s.nonceKey = aead, derive(secret, "nonce")
	return s.aead, s.nonceKey, nil
}

// initCursorSecret stores a new random key unless another process stored
// one first, and returns the one stored.
func (o *Outbox) initCursorSecret(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, cursorSecretBytes)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	tx, err := o.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if err := o.d.OutboxSecretInit(ctx, tx, &driver.OutboxSecretInitParams{Name: cursorSecretName, Value: fresh}); err != nil {
		return nil, err
	}
	secret, err := o.d.OutboxSecret(ctx, tx, &driver.OutboxSecretParams{Name: cursorSecretName})
	if err != nil {
		return nil, err
	}
	return secret, tx.Commit(ctx)
}

// derive is a subkey of secret for one purpose.
func derive(secret []byte, purpose string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("idem outbox list cursor: " + purpose))
	return m.Sum(nil)
}

// sealCursor is c as tenant's opaque cursor.
func (o *Outbox) sealCursor(ctx context.Context, tenant string, c cursor) (string, error) {
	aead, nonceKey, err := o.cursorKeys(ctx)
	if err != nil {
		return "", err
	}
	plain := make([]byte, cursorPlainBytes)
	binary.BigEndian.PutUint64(plain[:8], uint64(c.tx))
	binary.BigEndian.PutUint64(plain[8:], uint64(c.pos))
	m := hmac.New(sha256.New, nonceKey)
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write(plain)
	nonce := m.Sum(nil)[:cursorNonceBytes]
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, []byte(tenant))), nil
}

// openCursor is the position tenant's cursor s seals; ErrInvalidCursor
// when s is not a cursor List handed to tenant.
func (o *Outbox) openCursor(ctx context.Context, tenant, s string) (cursor, error) {
	aead, _, err := o.cursorKeys(ctx)
	if err != nil {
		return cursor{}, err
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != cursorNonceBytes+cursorPlainBytes+aead.Overhead() {
		return cursor{}, fmt.Errorf("%w: %.64q", ErrInvalidCursor, s)
	}
	plain, err := aead.Open(nil, b[:cursorNonceBytes], b[cursorNonceBytes:], []byte(tenant))
	if err != nil {
		return cursor{}, fmt.Errorf("%w: %.64q", ErrInvalidCursor, s)
	}
	c := cursor{tx: int64(binary.BigEndian.Uint64(plain[:8])), pos: int64(binary.BigEndian.Uint64(plain[8:]))}
	if c.tx < 0 || c.pos < 0 {
		return cursor{}, fmt.Errorf("%w: %.64q", ErrInvalidCursor, s)
	}
	return c, nil
}
