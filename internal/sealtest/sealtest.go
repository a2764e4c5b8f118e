// Package sealtest is a small real Sealer (package seal) for tests: one
// AES-256-GCM key per Sealer, drawn at random, with the record's table,
// tenant and key as the associated data, so a ciphertext moved to another
// row fails to open. It stands in for the key-file Sealer of idem serve
// where a test needs real encryption and no key management.
package sealtest

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"

	"github.com/idemhq/idem/seal"
)

// Sealer seals with one random AES-256-GCM key. Forget makes a tenant's
// records fail to open with seal.ErrForgotten, as a destroyed data key
// would. Its methods are safe for concurrent use.
type Sealer struct {
	aead cipher.AEAD

	mu        sync.RWMutex
	forgotten map[string]bool
}

var _ seal.Sealer = (*Sealer)(nil)

// New returns a Sealer with a fresh random key.
func New() *Sealer {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &Sealer{aead: aead, forgotten: map[string]bool{}}
}

// Forget makes tenant's records unreadable from now on.
func (s *Sealer) Forget(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgotten[tenant] = true
}

func (s *Sealer) isForgotten(tenant string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.forgotten[tenant]
}

// ad is the associated data of a record: its table, tenant and key, each
// prefixed by its length so that no two rows share one.
func ad(table, tenant, key string) []byte {
	var b []byte
	for _, part := range []string{table, tenant, key} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	return b
}

// Seal encrypts plaintext as nonce || ciphertext.
func (s *Sealer) Seal(_ context.Context, table, tenant, key string, plaintext []byte) ([]byte, error) {
	if s.isForgotten(tenant) {
		return nil, seal.ErrForgotten
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, plaintext, ad(table, tenant, key)), nil
}

// Open decrypts what Seal returned for the same table, tenant and key.
func (s *Sealer) Open(_ context.Context, table, tenant, key string, sealed []byte) ([]byte, error) {
	if s.isForgotten(tenant) {
		return nil, seal.ErrForgotten
	}
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, fmt.Errorf("%w: %d bytes is too short", seal.ErrAuthentication, len(sealed))
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], ad(table, tenant, key))
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%s/%q", seal.ErrAuthentication, table, tenant, key)
	}
	return plain, nil
}
