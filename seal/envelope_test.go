package seal_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/seal"
)

// clock is a test clock the Envelopes of one test share.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }
func source(t testing.TB, names ...string) *seal.FileKeySource {
	t.Helper()
	s, err := seal.ParseKeyFile("keys", []byte(keyFile(t, names...)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// withKeys is a key file holding the keys of the given sources, in order.
func withKeys(t testing.TB, text ...string) *seal.FileKeySource {
	t.Helper()
	s, err := seal.ParseKeyFile("keys", []byte(strings.Join(text, "")))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newEnvelope(t testing.TB, d driver.Driver, src seal.KeySource, c *clock) *seal.Envelope {
	t.Helper()
	e, err := seal.New(d, src, seal.Config{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// dataKeys reads idem_data_keys of a tenant directly.
func dataKeys(t testing.TB, d driver.Driver, tenant string) []driver.DataKeyRow {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := d.DataKeys(ctx, tx, &driver.DataKeysParams{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

const marker = "MARKER-4b1d-plaintext"

func TestEnvelopeRoundTripAndBinding(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		c := newClock()
		e := newEnvelope(t, d, source(t, "k1"), c)
		plain := []byte(`{"answer":"` + marker + `"}`)
		sealed, err := e.Seal(ctx, "idem_keys", "acme", "key-1", plain)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(sealed, []byte(marker)) || len(sealed) != len(plain)+33 {
			t.Fatalf("sealed %d bytes for %d, or holds the plaintext", len(sealed), len(plain))
		}
		got, err := e.Open(ctx, "idem_keys", "acme", "key-1", sealed)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("open: %q %v", got, err)
		}
		// Another Envelope (another process) reads the same data key.
		other := newEnvelope(t, d, source(t, "unused"), c)
		if _, err := other.Open(ctx, "idem_keys", "acme", "key-1", sealed); !errors.Is(err, seal.ErrUnknownMasterKey) ||
			!errors.Is(err, seal.ErrAuthentication) {
			t.Fatalf("open with a key file lacking the master key: %v", err)
		}
		// A record moved to another row, table or tenant, or changed, is
		// refused.
		for _, tc := range []struct{ table, tenant, key string }{
			{"idem_keys", "acme", "key-2"}, {"idem_outbox", "acme", "key-1"}, {"idem_keys", "globex", "key-1"},
		} {
			if _, err := e.Open(ctx, tc.table, tc.tenant, tc.key, sealed); !errors.Is(err, seal.ErrAuthentication) {
				t.Fatalf("open as %v: %v", tc, err)
			}
		}
		flipped := bytes.Clone(sealed)
		flipped[len(flipped)-1] ^= 1
		if _, err := e.Open(ctx, "idem_keys", "acme", "key-1", flipped); !errors.Is(err, seal.ErrAuthentication) {
			t.Fatalf("open of a changed record: %v", err)
		}
		rows := dataKeys(t, d, "acme")
		if len(rows) != 1 || rows[0].Version != 1 || rows[0].MasterKeyID != "k1" || len(rows[0].Wrapped) != 12+32+16 {
			t.Fatalf("data keys %+v", rows)
		}
		// Two rows' ciphertexts swapped in a table: each fails in the
		// other's row.
		a, _ := e.Seal(ctx, "idem_outbox", "acme", "1", []byte("one"))
		b, _ := e.Seal(ctx, "idem_outbox", "acme", "2", []byte("two"))
		if _, err := e.Open(ctx, "idem_outbox", "acme", "1", b); !errors.Is(err, seal.ErrAuthentication) {
			t.Fatalf("swapped: %v", err)
		}
		if _, err := e.Open(ctx, "idem_outbox", "acme", "2", a); !errors.Is(err, seal.ErrAuthentication) {
			t.Fatalf("swapped: %v", err)
		}
	})
}

// Processes racing to create a tenant's first data key end with one key,
// which all of them use.
func TestEnvelopeCreationRace(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		c := newClock()
		src := source(t, "k1")
		const n = 8
		sealed := make([][]byte, n)
		envs := make([]*seal.Envelope, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			envs[i] = newEnvelope(t, d, src, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var err error
				if sealed[i], err = envs[i].Seal(ctx, "t", "racing", "k", []byte{byte(i)}); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if rows := dataKeys(t, d, "racing"); len(rows) != 1 {
			t.Fatalf("%d data keys after the race, want 1", len(rows))
		}
		for i := range n {
			for j := range n {
				got, err := envs[j].Open(ctx, "t", "racing", "k", sealed[i])
				if err != nil || !bytes.Equal(got, []byte{byte(i)}) {
					t.Fatalf("envelope %d opening %d's record: %v", j, i, err)
				}
			}
		}
	})
}

// Rotation re-wraps every data key under the newest master key; afterwards
// a key file without the old key opens everything, and the check agrees.
func TestRotate(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		c := newClock()
		oldLine, _ := keyLine(t, "old", seal.DataKeyBytes)
		newLine, _ := keyLine(t, "new", seal.DataKeyBytes)
		oldOnly := withKeys(t, oldLine+"\n")
		e := newEnvelope(t, d, oldOnly, c)
		const tenants = 25
		sealed := map[string][]byte{}
		for i := range tenants {
			tenant := "t" + string(rune('a'+i))
			s, err := e.Seal(ctx, "idem_keys", tenant, "k", []byte(tenant))
			if err != nil {
				t.Fatal(err)
			}
			sealed[tenant] = s
		}
		// A forgotten tenant is not rotated.
		if _, err := seal.Forget(ctx, d, "ta", c.Now()); err != nil {
			t.Fatal(err)
		}
		both := withKeys(t, newLine+"\n", oldLine+"\n")
		if err := seal.CheckSource(ctx, d, both); err != nil {
			t.Fatal(err)
		}
		// New tenants' keys are wrapped under the new key at once; old
		// ones still open through the old key.
		e2 := newEnvelope(t, d, both, c)
		if _, err := e2.Seal(ctx, "idem_keys", "fresh", "k", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if rows := dataKeys(t, d, "fresh"); rows[0].MasterKeyID != "new" {
			t.Fatalf("a new tenant's key is under %q", rows[0].MasterKeyID)
		}
		before := dataKeys(t, d, "tb")[0].Wrapped

		var progress []int64
		n, err := seal.Rotate(ctx, d, both, seal.RotateConfig{Batch: 10, Progress: func(done, total int64) {
			if total != tenants-1 {
				t.Errorf("total %d, want %d", total, tenants-1)
			}
			progress = append(progress, done)
		}})
		if err != nil || n != tenants-1 {
			t.Fatalf("rotated %d, %v", n, err)
		}
		if len(progress) != 3 || progress[2] != tenants-1 {
			t.Fatalf("progress %v", progress)
		}
		used, err := seal.MasterKeysInUse(ctx, d)
		if err != nil || len(used) != 1 || used[0].ID != "new" || used[0].DataKeys != tenants {
			t.Fatalf("in use after rotation: %+v %v", used, err)
		}
		if bytes.Equal(before, dataKeys(t, d, "tb")[0].Wrapped) {
			t.Fatal("tb's wrapped key did not change")
		}
		// Running again finds nothing to do.
		if n, err := seal.Rotate(ctx, d, both, seal.RotateConfig{}); err != nil || n != 0 {
			t.Fatalf("second rotation: %d %v", n, err)
		}
		// The running Envelope keeps its cached keys across a re-read.
		c.Add(seal.DefaultRecheck)
		if _, err := e.Open(ctx, "idem_keys", "tb", "k", sealed["tb"]); err != nil {
			t.Fatalf("a process with the old key file only, after rotation: %v", err)
		}
		// The old key removed: everything still opens.
		newOnly := withKeys(t, newLine+"\n")
		if err := seal.CheckSource(ctx, d, newOnly); err != nil {
			t.Fatal(err)
		}
		e3 := newEnvelope(t, d, newOnly, c)
		for tenant, s := range sealed {
			got, err := e3.Open(ctx, "idem_keys", tenant, "k", s)
			if tenant == "ta" {
				if !errors.Is(err, seal.ErrForgotten) {
					t.Fatalf("forgotten tenant: %v", err)
				}
				continue
			}
			if err != nil || string(got) != tenant {
				t.Fatalf("%s after rotation without the old key: %q %v", tenant, got, err)
			}
		}
		// Only the old key: a process refuses to start, naming the key.
		err = seal.CheckSource(ctx, d, oldOnly)
		if !errors.Is(err, seal.ErrUnknownMasterKey) || !strings.Contains(err.Error(), "master keys new,") ||
			!strings.Contains(err.Error(), "it holds old") {
			t.Fatalf("check with the old key file only: %v", err)
		}
	})
}

// A forget reaches another process's Envelope within Config.Recheck; the
// tenant's later writes get a new data key version; forgetting twice and
// an unknown tenant are clear errors.
func TestForget(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		c := newClock()
		src := source(t, "k1")
		a, b := newEnvelope(t, d, src, c), newEnvelope(t, d, src, c)
		sealed, err := a.Seal(ctx, "idem_keys", "gone", "k", []byte(marker))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Open(ctx, "idem_keys", "gone", "k", sealed); err != nil {
			t.Fatal(err)
		}
		n, err := a.Forget(ctx, "gone")
		if err != nil || n != 1 {
			t.Fatalf("forget: %d %v", n, err)
		}
		rows := dataKeys(t, d, "gone")
		if len(rows) != 1 || len(rows[0].Wrapped) != 0 || rows[0].MasterKeyID != "" || !rows[0].ForgottenAt.Equal(c.Now()) {
			t.Fatalf("after forget: %+v", rows)
		}
		if _, err := a.Open(ctx, "idem_keys", "gone", "k", sealed); !errors.Is(err, seal.ErrForgotten) {
			t.Fatalf("the forgetting process: %v", err)
		}
		// b has the key cached; within Recheck it may still open.
		c.Add(seal.DefaultRecheck - time.Millisecond)
		if _, err := b.Open(ctx, "idem_keys", "gone", "k", sealed); err != nil {
			t.Fatalf("within the bound: %v", err)
		}
		c.Add(time.Millisecond)
		if _, err := b.Open(ctx, "idem_keys", "gone", "k", sealed); !errors.Is(err, seal.ErrForgotten) {
			t.Fatalf("another process after Recheck: %v", err)
		}
		// Written again: a new version, readable; the old stays forgotten.
		again, err := b.Seal(ctx, "idem_keys", "gone", "k2", []byte("new"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := a.Open(ctx, "idem_keys", "gone", "k2", again); err != nil || string(got) != "new" {
			t.Fatalf("new version: %q %v", got, err)
		}
		if _, err := a.Open(ctx, "idem_keys", "gone", "k", sealed); !errors.Is(err, seal.ErrForgotten) {
			t.Fatalf("old version: %v", err)
		}
		if rows := dataKeys(t, d, "gone"); len(rows) != 2 || rows[1].Version != 2 || rows[1].ForgottenAt != (time.Time{}) {
			t.Fatalf("versions %+v", rows)
		}
		// Forget both; then twice is refused and changes nothing.
		if n, err := seal.Forget(ctx, d, "gone", c.Now()); err != nil || n != 1 {
			t.Fatalf("second forget: %d %v", n, err)
		}
		before := dataKeys(t, d, "gone")
		c.Add(time.Hour)
		if _, err := seal.Forget(ctx, d, "gone", c.Now()); !errors.Is(err, seal.ErrAlreadyForgotten) {
			t.Fatalf("forgot twice: %v", err)
		}
		if after := dataKeys(t, d, "gone"); after[1].ForgottenAt != before[1].ForgottenAt {
			t.Fatal("a refused forget changed the rows")
		}
		if _, err := seal.Forget(ctx, d, "nobody", c.Now()); !errors.Is(err, seal.ErrUnknownTenant) ||
			!strings.Contains(err.Error(), `"nobody"`) {
			t.Fatalf("unknown tenant: %v", err)
		}
	})
}

func BenchmarkSeal(b *testing.B) {
	ctx := context.Background()
	d := drivertest.Open(b, "sqlite")
	e := newEnvelope(b, d, source(b, "k1"), newClock())
	plain := bytes.Repeat([]byte("x"), 1024)
	sealed, err := e.Seal(ctx, "idem_keys", "acme", "key", plain)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Seal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			if _, err := e.Seal(ctx, "idem_keys", "acme", "key", plain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Open", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			if _, err := e.Open(ctx, "idem_keys", "acme", "key", sealed); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// countingStore counts the transactions an Envelope begins: each is a
// database round trip or more.
type countingStore struct {
	driver.Driver
	begins atomic.Int64
}

func (s *countingStore) Begin(ctx context.Context, opts driver.BeginOptions) (driver.TxCloser, error) {
	s.begins.Add(1)
	return s.Driver.Begin(ctx, opts)
}

// After a tenant's first use its Seals and Opens touch no database until
// Recheck has passed, which costs one read; past CacheTenants the least
// recently used tenant is read again.
func TestEnvelopeHotPathSkipsDatabase(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		c := newClock()
		store := &countingStore{Driver: d}
		e, err := seal.New(store, source(t, "k1"), seal.Config{Now: c.Now, CacheTenants: 2})
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := e.Seal(ctx, "t", "acme", "k", []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		if n := store.begins.Load(); n != 2 { // read none, insert version 1
			t.Fatalf("first seal: %d transactions, want 2", n)
		}
		for range 100 {
			if _, err := e.Seal(ctx, "t", "acme", "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Open(ctx, "t", "acme", "k", sealed); err != nil {
				t.Fatal(err)
			}
		}
		if n := store.begins.Load(); n != 2 {
			t.Fatalf("hot path: %d transactions, want still 2", n)
		}
		c.Add(seal.DefaultRecheck)
		if _, err := e.Open(ctx, "t", "acme", "k", sealed); err != nil {
			t.Fatal(err)
		}
		if n := store.begins.Load(); n != 3 {
			t.Fatalf("after Recheck: %d transactions, want 3", n)
		}
		for _, tenant := range []string{"globex", "initech"} {
			if _, err := e.Seal(ctx, "t", tenant, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		before := store.begins.Load()
		if _, err := e.Open(ctx, "t", "acme", "k", sealed); err != nil {
			t.Fatal(err)
		}
		if n := store.begins.Load() - before; n != 1 {
			t.Fatalf("a tenant evicted from a cache of 2: %d reads, want 1", n)
		}
	})
}

// A tenant prepared before a write transaction begins is sealed inside it
// without a write of its own: on SQLite the transaction holds the one
// writer, and a Seal that had to store the tenant's data key then would
// wait for it until the deadline. Prepare creates the key once, and a
// Seal after the cached keys' Recheck reads them without the writer.
func TestEnvelopePrepareBeforeWriteTransaction(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		c := newClock()
		e := newEnvelope(t, d, source(t, "k1"), c)
		var _ seal.Preparer = e
		for _, tenant := range []string{"acme", "globex"} {
			if err := e.Prepare(ctx, tenant); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Prepare(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if rows := dataKeys(t, d, "acme"); len(rows) != 1 || rows[0].Version != 1 {
			t.Fatalf("acme's data keys after two Prepares: %+v", rows)
		}
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		a, err := e.Seal(sctx, "idem_keys", "acme", "k", []byte("in the transaction"))
		if err != nil {
			t.Fatalf("Seal inside a write transaction, tenant prepared: %v", err)
		}
		c.Add(seal.DefaultRecheck) // the cached keys are read again
		g, err := e.Seal(sctx, "idem_keys", "globex", "k", []byte("after the recheck"))
		if err != nil {
			t.Fatalf("Seal inside a write transaction after the recheck: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for tenant, s := range map[string][]byte{"acme": a, "globex": g} {
			if _, err := e.Open(ctx, "idem_keys", tenant, "k", s); err != nil {
				t.Fatalf("%s: %v", tenant, err)
			}
		}
	})
}
