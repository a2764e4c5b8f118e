package seal

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// DataKeyBytes is the length of a data key and of a key file's master key:
// AES-256.
const DataKeyBytes = 32

// A KeySource holds the master keys that wrap tenants' data keys
// (envelope encryption): the data keys are stored in the database only
// wrapped, so the database and its backups alone never open a record.
// Its methods are safe for concurrent use.
//
// A source names each master key by an id, stored beside every data key it
// wrapped, so that a source holding several keys (the old and the new one
// during a rotation) knows which one unwraps it.
type KeySource interface {
	// Newest is the id of the master key Wrap uses.
	Newest() string
	// IDs are the ids of every master key Unwrap can use, Newest first.
	IDs() []string
	// Wrap encrypts a data key under the newest master key and returns
	// that key's id with the wrapped bytes.
	Wrap(ctx context.Context, dataKey []byte) (keyID string, wrapped []byte, err error)
	// Unwrap decrypts what Wrap returned under the master key keyID. It
	// returns an error wrapping ErrUnknownMasterKey when the source holds
	// no key of that id, and one wrapping ErrAuthentication when the
	// wrapped bytes do not open under it.
	Unwrap(ctx context.Context, keyID string, wrapped []byte) ([]byte, error)
}

// ErrUnknownMasterKey: a data key is wrapped under a master key the
// KeySource does not hold (removed from the key file too early, or the
// wrong file).
var ErrUnknownMasterKey = errors.New("idem/seal: no master key of that id")

// Limits of a key file: a file is a handful of keys, a name is a short
// label written into the database beside each data key.
const (
	maxKeyFileBytes = 64 << 10
	maxKeyFileKeys  = 100
	maxKeyNameBytes = 64
)

var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// FileKeySource is a KeySource of master keys read from a key file
// (LoadKeyFile, ParseKeyFile). Each key is AES-256; a wrapped data key is
// a 12-byte random nonce and the AES-GCM sealing of the data key, with the
// master key's id as associated data, so that bytes stored under one id
// never open as another's.
type FileKeySource struct {
	ids   []string
	aeads map[string]cipher.AEAD
}

// LoadKeyFile reads a key file: one key a line, "name:base64", where the
// base64 (standard, padded) holds 32 random bytes, such as
// `openssl rand -base64 32` prints. Blank lines and lines starting with #
// are skipped. The first key wraps new data keys; every key listed
// unwraps. Its errors name the file and the line, never a key's bytes.
func LoadKeyFile(path string) (*FileKeySource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("encryption key file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("encryption key file %s: %w", path, err)
	}
	defer clear(b)
	if len(b) > maxKeyFileBytes {
		return nil, fmt.Errorf("encryption key file %s: larger than %d bytes: not a key file", path, maxKeyFileBytes)
	}
	return ParseKeyFile(path, b)
}

// ParseKeyFile parses a key file's contents (see LoadKeyFile); name names
// the file in errors.
func ParseKeyFile(name string, data []byte) (*FileKeySource, error) {
	s := &FileKeySource{aeads: map[string]cipher.AEAD{}}
	lineOf := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxKeyFileBytes)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		at := fmt.Sprintf("encryption key file %s:%d", name, line)
		id, b64, ok := strings.Cut(text, ":")
		id = strings.TrimSpace(id)
		if !ok || id == "" {
			return nil, fmt.Errorf("%s: want name:base64-of-32-bytes (the line is not shown: it may hold a key)", at)
		}
		if len(id) > maxKeyNameBytes || !keyNameRE.MatchString(id) {
			return nil, fmt.Errorf("%s: a key name is letters, digits, . _ - (at most %d; the line is not shown: it may hold a key)", at, maxKeyNameBytes)
		}
		if first, dup := lineOf[id]; dup {
			return nil, fmt.Errorf("%s: key name %q repeats line %d: each master key needs a name of its own", at, id, first)
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil {
			return nil, fmt.Errorf("%s: key %q is not valid base64 (standard alphabet, padded)", at, id)
		}
		if len(key) != DataKeyBytes {
			return nil, fmt.Errorf("%s: key %q is %d bytes; want %d (openssl rand -base64 32)", at, id, len(key), DataKeyBytes)
		}
		if len(s.ids) == maxKeyFileKeys {
			return nil, fmt.Errorf("%s: more than %d keys", at, maxKeyFileKeys)
		}
		aead, err := newGCM(key)
		clear(key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		lineOf[id] = line
		s.ids = append(s.ids, id)
		s.aeads[id] = aead
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("encryption key file %s: %w", name, err)
	}
	if len(s.ids) == 0 {
		return nil, fmt.Errorf("encryption key file %s: no keys: want lines name:base64-of-32-bytes, the newest first", name)
	}
	return s, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Newest is the first key of the file.
func (s *FileKeySource) Newest() string { return s.ids[0] }

// IDs are the file's key names in the file's order.
func (s *FileKeySource) IDs() []string { return slices.Clone(s.ids) }

// Wrap seals dataKey under the file's first key.
func (s *FileKeySource) Wrap(_ context.Context, dataKey []byte) (string, []byte, error) {
	id := s.ids[0]
	aead := s.aeads[id]
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(dataKey)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return "", nil, err
	}
	return id, aead.Seal(out, out, dataKey, []byte(id)), nil
}

// Unwrap opens what Wrap returned under the key named keyID.
func (s *FileKeySource) Unwrap(_ context.Context, keyID string, wrapped []byte) ([]byte, error) {
	aead, ok := s.aeads[keyID]
	if !ok {
		return nil, fmt.Errorf("%w: %q is not in the key file (it holds %s)", ErrUnknownMasterKey, keyID, strings.Join(s.ids, ", "))
	}
	if len(wrapped) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: a wrapped data key of %d bytes is too short", ErrAuthentication, len(wrapped))
	}
	n := aead.NonceSize()
	key, err := aead.Open(nil, wrapped[:n], wrapped[n:], []byte(keyID))
	if err != nil {
		return nil, fmt.Errorf("%w: the data key does not open under master key %q", ErrAuthentication, keyID)
	}
	return key, nil
}

// KMSKey is one master key held by a key management service: the service
// wraps and unwraps, and the key itself never leaves it. Wrap and Unwrap
// are the shape of a cloud KMS's Encrypt and Decrypt calls (AWS KMS,
// Google Cloud KMS, Azure Key Vault's wrapKey and unwrapKey, Vault's
// transit engine); both must be safe for concurrent use. Unwrap is called
// once per tenant's data key a process uses (idem caches the unwrapped
// key), and by idem keys rotate once per data key.
type KMSKey struct {
	// ID names the key in the database beside each data key it wraps: the
	// KMS key's ARN, resource name or alias, at most 256 bytes.
	ID     string
	Wrap   func(ctx context.Context, plaintext []byte) ([]byte, error)
	Unwrap func(ctx context.Context, ciphertext []byte) ([]byte, error)
}

// KMSKeySource is a KeySource over KMS keys (NewKMSKeySource).
type KMSKeySource struct {
	keys []KMSKey
}

// NewKMSKeySource returns a KeySource whose first key wraps and whose
// every key unwraps: during a rotation list the new key first and the old
// one after it, as in a key file.
func NewKMSKeySource(keys ...KMSKey) (*KMSKeySource, error) {
	if len(keys) == 0 {
		return nil, errors.New("idem/seal: a KMS key source needs at least one key")
	}
	seen := map[string]bool{}
	for i, k := range keys {
		switch {
		case k.ID == "" || len(k.ID) > 256:
			return nil, fmt.Errorf("idem/seal: KMS key %d: an ID of 1..256 bytes is required", i+1)
		case seen[k.ID]:
			return nil, fmt.Errorf("idem/seal: KMS key %d: id %q given twice", i+1, k.ID)
		case k.Wrap == nil || k.Unwrap == nil:
			return nil, fmt.Errorf("idem/seal: KMS key %q: Wrap and Unwrap are required", k.ID)
		}
		seen[k.ID] = true
	}
	return &KMSKeySource{keys: slices.Clone(keys)}, nil
}

// Newest is the first key's id.
func (s *KMSKeySource) Newest() string { return s.keys[0].ID }

// IDs are the keys' ids in the order given.
func (s *KMSKeySource) IDs() []string {
	ids := make([]string, len(s.keys))
	for i, k := range s.keys {
		ids[i] = k.ID
	}
	return ids
}

// Wrap asks the KMS to encrypt dataKey under the first key.
func (s *KMSKeySource) Wrap(ctx context.Context, dataKey []byte) (string, []byte, error) {
	k := s.keys[0]
	w, err := k.Wrap(ctx, dataKey)
	if err != nil {
		return "", nil, fmt.Errorf("idem/seal: KMS key %q: wrap: %w", k.ID, err)
	}
	return k.ID, w, nil
}

// Unwrap asks the KMS to decrypt wrapped under the key keyID. A KMS error
// is returned wrapped as it is: it may be an outage, retryable later.
func (s *KMSKeySource) Unwrap(ctx context.Context, keyID string, wrapped []byte) ([]byte, error) {
	for _, k := range s.keys {
		if k.ID != keyID {
			continue
		}
		key, err := k.Unwrap(ctx, wrapped)
		if err != nil {
			return nil, fmt.Errorf("idem/seal: KMS key %q: unwrap: %w", keyID, err)
		}
		if len(key) != DataKeyBytes {
			return nil, fmt.Errorf("%w: KMS key %q unwrapped %d bytes, not a %d-byte data key", ErrAuthentication, keyID, len(key), DataKeyBytes)
		}
		return key, nil
	}
	return nil, fmt.Errorf("%w: %q is not among the KMS keys given (%s)", ErrUnknownMasterKey, keyID, strings.Join(s.IDs(), ", "))
}
