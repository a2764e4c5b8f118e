package seal

import (
	"container/list"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/driver"
)

// Store is where an Envelope keeps the tenants' wrapped data keys
// (idem_data_keys). Both drivers, driver/postgres and driver/sqlite, are
// Stores.
type Store interface {
	Begin(ctx context.Context, opts driver.BeginOptions) (driver.TxCloser, error)
	driver.DataKeyDriver
}

// Config tunes an Envelope. The zero Config is the defaults.
type Config struct {
	// CacheTenants bounds the tenants whose data keys an Envelope keeps
	// unwrapped in memory; past it the least recently used tenant's are
	// dropped, and read and unwrapped again at its next use. Default
	// 10,000; bound 1..1,000,000.
	CacheTenants int
	// Recheck is how long an Envelope uses a tenant's cached data keys
	// before it reads them again: the bound on how long a process goes on
	// opening (and sealing under) a data key that another process forgot
	// (idem tenants forget). It costs one read of the tenant's keys per
	// Recheck while the tenant is in use. Default 10s; bound 100ms..5m.
	Recheck time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// DefaultRecheck is Config.Recheck's default.
const DefaultRecheck = 10 * time.Second

func (c Config) withDefaults() Config {
	if c.CacheTenants == 0 {
		c.CacheTenants = 10_000
	}
	if c.Recheck == 0 {
		c.Recheck = DefaultRecheck
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.CacheTenants < 1 || c.CacheTenants > 1_000_000:
		return fmt.Errorf("idem/seal: CacheTenants %d is outside 1..1000000", c.CacheTenants)
	case c.Recheck < 100*time.Millisecond || c.Recheck > 5*time.Minute:
		return fmt.Errorf("idem/seal: Recheck %s is outside 100ms..5m", c.Recheck)
	}
	return nil
}

// Envelope is the Sealer of envelope encryption: each tenant's records are
// sealed with AES-256-GCM under a random data key of the tenant's own,
// which is stored in idem_data_keys only wrapped by the KeySource's
// newest master key. A tenant's first Seal creates its data key; when two
// processes race to create it, the table's primary key keeps one and the
// other process uses it.
//
// Data keys are cached unwrapped (Config.CacheTenants), so a tenant's
// Seals and Opens after its first do no database round trip, except one
// read every Config.Recheck to learn of a forget or a newer version.
//
// A sealed record is self-describing: a format byte (1), the data key's
// version (4 bytes, big-endian), a 12-byte random nonce, then the AES-GCM
// ciphertext and its 16-byte tag: 33 bytes more than the plaintext. The
// associated data is the format byte, the version, the table, the tenant
// and the key, so a record opens only in the row it was sealed for.
// Random nonces keep a nonce collision below 2^-32 for up to 2^32
// records sealed under one data key version.
type Envelope struct {
	store  Store
	source KeySource
	cfg    Config

	mu    sync.Mutex // guards cache and lru
	cache map[string]*list.Element
	lru   *list.List // of *tenantKeys, most recently used first
}

// tenantKeys is one tenant's cache entry. Readers use its snapshot
// without a lock; loads of the tenant's keys hold load, so that one
// caller reads the database while the others wait for its result.
type tenantKeys struct {
	tenant string
	load   sync.Mutex
	snap   atomic.Pointer[keySnap]
}

// keySnap is what a tenant's keys were when last read. It is never
// changed once published.
type keySnap struct {
	checked time.Time
	keys    map[int]*dataKey
	newest  int // the highest version, forgotten or not; 0: none
}

type dataKey struct {
	aead      cipher.AEAD
	forgotten bool
}

// New returns an Envelope that keeps data keys in store, wrapped by
// source.
func New(store Store, source KeySource, cfg Config) (*Envelope, error) {
	if store == nil || source == nil {
		return nil, errors.New("idem/seal: New needs a store and a key source")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Envelope{store: store, source: source, cfg: cfg,
		cache: map[string]*list.Element{}, lru: list.New()}, nil
}

const (
	formatV1     = 1
	headerBytes  = 1 + 4 + 12
	maxTagLength = 16
	// maxVersion bounds a tenant's data key versions: a new one is made
	// only by a forget, so the bound is never near.
	maxVersion = 1 << 30
)

// Seal encrypts plaintext under the tenant's newest data key, creating
// one when the tenant has none, or none that is not forgotten: a tenant
// forgotten then written to again gets a new data key version, and what
// was sealed before the forget stays unreadable.
func (e *Envelope) Seal(ctx context.Context, table, tenant, key string, plaintext []byte) ([]byte, error) {
	snap, err := e.keys(ctx, tenant, 0, true)
	if err != nil {
		return nil, err
	}
	dk := snap.keys[snap.newest]
	out := make([]byte, headerBytes, headerBytes+len(plaintext)+maxTagLength)
	out[0] = formatV1
	binary.BigEndian.PutUint32(out[1:5], uint32(snap.newest))
	if _, err := rand.Read(out[5:headerBytes]); err != nil {
		return nil, err
	}
	ad := associatedData(out[:5], table, tenant, key)
	return dk.aead.Seal(out, out[5:headerBytes], plaintext, ad), nil
}

// Prepare makes sure the tenant has a live data key, creating one as Seal
// would, so that Seals in a write transaction begun afterwards need no
// write of their own (Preparer). With the tenant's keys cached it does no
// database round trip; once they are older than Config.Recheck, a Seal
// reads them again with a read-only transaction, which SQLite's writer
// does not block. Only a forget between Prepare and Seal makes that Seal
// create a key, and so write, again.
func (e *Envelope) Prepare(ctx context.Context, tenant string) error {
	_, err := e.keys(ctx, tenant, 0, true)
	return err
}

// Open decrypts what Seal returned for the same table, tenant and key.
func (e *Envelope) Open(ctx context.Context, table, tenant, key string, sealed []byte) ([]byte, error) {
	if len(sealed) < headerBytes+maxTagLength {
		return nil, fmt.Errorf("%w: %d bytes is shorter than any sealed record", ErrAuthentication, len(sealed))
	}
	if sealed[0] != formatV1 {
		return nil, fmt.Errorf("%w: unknown format %d", ErrAuthentication, sealed[0])
	}
	version := int(binary.BigEndian.Uint32(sealed[1:5]))
	if version < 1 || version > maxVersion {
		return nil, fmt.Errorf("%w: data key version %d", ErrAuthentication, version)
	}
	snap, err := e.keys(ctx, tenant, version, false)
	if err != nil {
		return nil, err
	}
	dk, ok := snap.keys[version]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: tenant %q has no data key version %d", ErrAuthentication, tenant, version)
	case dk.forgotten:
		return nil, ErrForgotten
	}
	ad := associatedData(sealed[:5], table, tenant, key)
	plain, err := dk.aead.Open(nil, sealed[5:headerBytes], sealed[headerBytes:], ad)
	if err != nil {
		return nil, fmt.Errorf("%w: table %s, tenant %q", ErrAuthentication, table, tenant)
	}
	return plain, nil
}

// associatedData binds a record to its header and its row. Each name is
// length-prefixed, so that no two rows give the same bytes.
func associatedData(header []byte, table, tenant, key string) []byte {
	ad := make([]byte, 0, len(header)+3*binary.MaxVarintLen64+len(table)+len(tenant)+len(key))
	ad = append(ad, header...)
	for _, s := range [...]string{table, tenant, key} {
		ad = binary.AppendUvarint(ad, uint64(len(s)))
		ad = append(ad, s...)
	}
	return ad
}

// keys returns the tenant's keys, read at most Recheck ago. It reads them
// again sooner when version is one the cache does not hold (another
// process created it), and, when forSeal, makes sure the newest version
// is a live key, creating one if need be.
func (e *Envelope) keys(ctx context.Context, tenant string, version int, forSeal bool) (*keySnap, error) {
	tk := e.entry(tenant)
	if s := tk.snap.Load(); s != nil && e.usable(s, version, forSeal) {
		return s, nil
	}
	tk.load.Lock()
	defer tk.load.Unlock()
	if s := tk.snap.Load(); s != nil && e.usable(s, version, forSeal) {
		return s, nil // another caller loaded them meanwhile
	}
	s, err := e.read(ctx, tenant, tk.snap.Load())
	if err != nil {
		return nil, err
	}
	if forSeal && !s.live() {
		if s, err = e.create(ctx, tenant, s); err != nil {
			return nil, err
		}
	}
	tk.snap.Store(s)
	return s, nil
}

func (e *Envelope) usable(s *keySnap, version int, forSeal bool) bool {
	if e.cfg.Now().Sub(s.checked) >= e.cfg.Recheck {
		return false
	}
	if forSeal {
		return s.live()
	}
	return version <= s.newest
}

// live reports whether the newest version is a key to seal under.
func (s *keySnap) live() bool {
	dk, ok := s.keys[s.newest]
	return ok && !dk.forgotten
}

// entry returns the tenant's cache entry, made empty if it has none,
// and marks it the most recently used.
func (e *Envelope) entry(tenant string) *tenantKeys {
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.cache[tenant]; ok {
		e.lru.MoveToFront(el)
		return el.Value.(*tenantKeys)
	}
	tk := &tenantKeys{tenant: tenant}
	e.cache[tenant] = e.lru.PushFront(tk)
	for e.lru.Len() > e.cfg.CacheTenants {
		last := e.lru.Back()
		e.lru.Remove(last)
		delete(e.cache, last.Value.(*tenantKeys).tenant)
	}
	return tk
}

// drop removes the tenant's cached keys.
func (e *Envelope) drop(tenant string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.cache[tenant]; ok {
		e.lru.Remove(el)
		delete(e.cache, tenant)
	}
}

// read reads the tenant's keys, unwrapping only the versions prev does not
// already hold live: a rotation re-wraps a data key, it does not change
// it, so a cached key stays valid.
func (e *Envelope) read(ctx context.Context, tenant string, prev *keySnap) (*keySnap, error) {
	tx, err := e.store.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("idem/seal: read tenant %q's data keys: %w", tenant, err)
	}
	rows, err := e.store.DataKeys(ctx, tx, &driver.DataKeysParams{Tenant: tenant})
	_ = tx.Rollback(ctx)
	if err != nil {
		return nil, fmt.Errorf("idem/seal: read tenant %q's data keys: %w", tenant, err)
	}
	s := &keySnap{checked: e.cfg.Now(), keys: make(map[int]*dataKey, len(rows))}
	for _, r := range rows {
		s.newest = max(s.newest, r.Version)
		if !r.ForgottenAt.IsZero() {
			s.keys[r.Version] = &dataKey{forgotten: true}
			continue
		}
		if prev != nil {
			if dk, ok := prev.keys[r.Version]; ok && !dk.forgotten {
				s.keys[r.Version] = dk
				continue
			}
		}
		dk, err := e.unwrap(ctx, r)
		if err != nil {
			return nil, err
		}
		s.keys[r.Version] = dk
	}
	return s, nil
}

func (e *Envelope) unwrap(ctx context.Context, r driver.DataKeyRow) (*dataKey, error) {
	raw, err := e.source.Unwrap(ctx, r.MasterKeyID, r.Wrapped)
	if errors.Is(err, ErrUnknownMasterKey) {
		// No key the Sealer holds opens the record: an authentication
		// failure to the caller, with the reason kept.
		return nil, fmt.Errorf("%w: tenant %q's data key version %d: %w", ErrAuthentication, r.Tenant, r.Version, err)
	}
	if err != nil {
		return nil, fmt.Errorf("idem/seal: tenant %q's data key version %d: %w", r.Tenant, r.Version, err)
	}
	defer clear(raw)
	if len(raw) != DataKeyBytes {
		return nil, fmt.Errorf("%w: tenant %q's data key version %d is %d bytes", ErrAuthentication, r.Tenant, r.Version, len(raw))
	}
	aead, err := newGCM(raw)
	if err != nil {
		return nil, err
	}
	return &dataKey{aead: aead}, nil
}

// create stores a new data key version for the tenant, after the newest
// one s knows. When another process stored that version first, its key
// is read and used instead.
func (e *Envelope) create(ctx context.Context, tenant string, s *keySnap) (*keySnap, error) {
	for range 3 {
		version := s.newest + 1
		if version > maxVersion {
			return nil, fmt.Errorf("idem/seal: tenant %q has %d data key versions, the limit", tenant, s.newest)
		}
		raw := make([]byte, DataKeyBytes)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		masterID, wrapped, err := e.source.Wrap(ctx, raw)
		if err != nil {
			clear(raw)
			return nil, fmt.Errorf("idem/seal: wrap tenant %q's new data key: %w", tenant, err)
		}
		aead, err := newGCM(raw)
		clear(raw)
		if err != nil {
			return nil, err
		}
		stored, err := e.insert(ctx, &driver.DataKeyInsertParams{Tenant: tenant, Version: version,
			MasterKeyID: masterID, Wrapped: wrapped, Now: e.cfg.Now().UTC()})
		if err != nil {
			return nil, fmt.Errorf("idem/seal: store tenant %q's new data key: %w", tenant, err)
		}
		if stored {
			keys := make(map[int]*dataKey, len(s.keys)+1)
			for v, dk := range s.keys {
				keys[v] = dk
			}
			keys[version] = &dataKey{aead: aead}
			return &keySnap{checked: s.checked, keys: keys, newest: version}, nil
		}
		// Lost the race: the winner's key is the tenant's.
		if s, err = e.read(ctx, tenant, s); err != nil {
			return nil, err
		}
		if s.live() {
			return s, nil
		}
	}
	return nil, fmt.Errorf("idem/seal: tenant %q: could not create a data key: its versions keep changing", tenant)
}

func (e *Envelope) insert(ctx context.Context, p *driver.DataKeyInsertParams) (bool, error) {
	tx, err := e.store.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	stored, err := e.store.DataKeyInsert(ctx, tx, p)
	if err != nil {
		return false, err
	}
	return stored, tx.Commit(ctx)
}

// Forget destroys the tenant's data keys (see package function Forget)
// and drops them from this Envelope's cache at once. Other Envelopes
// learn of it within their Config.Recheck.
func (e *Envelope) Forget(ctx context.Context, tenant string) (int, error) {
	defer e.drop(tenant)
	return Forget(ctx, e.store, tenant, e.cfg.Now())
}
