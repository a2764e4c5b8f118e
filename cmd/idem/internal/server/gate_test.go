package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/gate"
	"github.com/idemhq/idem/ledger"
)

// TestTenantWriteGateDriver runs the gates around real databases: a
// tenant's write transaction takes a slot and frees it on commit, on
// rollback after an error and after a panic, and when the database
// refuses to begin; a tenant's read-only transaction takes a slot of the
// readers' gate (on PostgreSQL the same gate: one pool), and those of no
// tenant pass; statements run through the wrapped transaction
// (Postgres's pipeline looks through it).
func TestTenantWriteGateDriver(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		gd, err := newGatedDriver(d, 0.5, time.Minute, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if shared := gd.reads == gd.writes; shared != (d.Dialect() == "postgres") {
			t.Fatalf("%s: reads and writes share a gate: %v", d.Dialect(), shared)
		}
		// The driver's fast paths stay on behind the gate: every optional
		// interface it has is found through the gated driver.
		for name, has := range map[string]func(any) bool{
			"WriterBound":    func(d any) bool { _, ok := driver.Optional[driver.WriterBound](d); return ok },
			"KeyBatcher":     func(d any) bool { _, ok := driver.Optional[driver.KeyBatcher](d); return ok },
			"KeyReadBatcher": func(d any) bool { _, ok := driver.Optional[driver.KeyReadBatcher](d); return ok },
		} {
			if has(d) != has(gd) {
				t.Fatalf("%s: the driver has it %v, the gated driver %v", name, has(d), has(gd))
			}
		}
		if _, ok := driver.Optional[driver.KeyBatcher](gd); !ok {
			t.Fatal("the gated driver hides the driver's batch statements")
		}
		l, err := ledger.New(gd, ledger.Config{})
		if err != nil {
			t.Fatal(err)
		}
		gates := []*gate.Gate{gd.writes}
		if gd.reads != gd.writes {
			gates = append(gates, gd.reads)
		}
		inUse := func() int {
			n := 0
			for _, g := range gates {
				n += g.InUse()
			}
			return n
		}
		ctx := withTenant(context.Background(), "t1")

		// Commit.
		tx, err := gd.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if inUse() != 1 {
			t.Fatalf("a tenant's write transaction holds %d slots, want 1", inUse())
		}
		if _, err := l.CreateAccount(ctx, tx, "t1", ledger.NewAccount{ID: "gate-1", Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		if inUse() != 0 {
			t.Fatalf("slots in use %d after commit", inUse())
		}

		// An error, then a panic, each ends in the deferred rollback.
		for _, fail := range []string{"error", "panic"} {
			func() {
				defer func() { _ = recover() }()
				tx, err := gd.Begin(ctx, driver.BeginOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				_, err = l.CreateAccount(ctx, tx, "t1", ledger.NewAccount{ID: "gate-2"})
				if err == nil {
					t.Fatal("an account without a currency was created")
				}
				if fail == "panic" {
					panic("work panicked")
				}
			}()
			if inUse() != 0 {
				t.Fatalf("slots in use %d after a rollback on %s", inUse(), fail)
			}
		}

		// The database refuses to begin: the slot is freed.
		ended, cancel := context.WithCancel(ctx)
		cancel()
		if tx, err := gd.Begin(ended, driver.BeginOptions{}); err == nil {
			_ = tx.Rollback(ctx)
			t.Fatal("Begin under an ended context succeeded")
		}
		if inUse() != 0 {
			t.Fatalf("slots in use %d after a failed Begin", inUse())
		}

		// A tenant's read-only transaction takes a slot; those of no
		// tenant pass ungated.
		for _, c := range []struct {
			ctx   context.Context
			opts  driver.BeginOptions
			slots int
		}{
			{ctx, driver.BeginOptions{ReadOnly: true}, 1},
			{context.Background(), driver.BeginOptions{ReadOnly: true}, 0},
			{context.Background(), driver.BeginOptions{}, 0},
			{gate.WithHeld(ctx, gd.writes), driver.BeginOptions{}, 0}, // a batch's: it holds its slot
		} {
			tx, err := gd.Begin(c.ctx, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if inUse() != c.slots {
				t.Fatalf("slots in use %d by a transaction (read-only %v), want %d", inUse(), c.opts.ReadOnly, c.slots)
			}
			if _, err := l.GetAccount(c.ctx, tx, ledger.AccountQuery{Tenant: "t1", ID: "gate-1"}); err != nil {
				t.Fatal(err)
			}
			_ = tx.Rollback(c.ctx)
		}
	})
}

// TestTenantReadsShareThePool: tenant A opens more read-only transactions
// than the pool (4 connections; SQLite's 4 readers) has, while tenant B
// holds one. A holds its share (2) and its others wait at the gate, not
// on the pool; B's second read begins at once and reads, while A still
// holds its two. Once A's first reads end its waiting ones are granted
// and read too, each counted as a granted read wait.
func TestTenantReadsShareThePool(t *testing.T) {
	t.Parallel()
	const conns = 4
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			d := smallPool(t, dialect, conns)
			gd, err := newGatedDriver(d, 0.5, time.Minute, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			l, err := ledger.New(gd, ledger.Config{})
			if err != nil {
				t.Fatal(err)
			}
			asA, asB := withTenant(context.Background(), "a"), withTenant(context.Background(), "b")
			currency := map[string]string{"a": "EUR", "b": "USD"} // tells whose account a read found
			for ctx, tenant := range map[context.Context]string{asA: "a", asB: "b"} {
				tx, err := gd.Begin(ctx, driver.BeginOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.CreateAccount(ctx, tx, tenant, ledger.NewAccount{ID: "acct", Currency: currency[tenant]}); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			read := func(ctx context.Context, tenant string) (driver.TxCloser, error) {
				tx, err := gd.Begin(ctx, driver.BeginOptions{ReadOnly: true})
				if err != nil {
					return nil, err
				}
				if a, err := l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: tenant, ID: "acct"}); err != nil || a.Currency != currency[tenant] {
					_ = tx.Rollback(ctx)
					return nil, fmt.Errorf("%s's read: %+v %v", tenant, a, err)
				}
				return tx, nil
			}
			b1, err := read(asB, "b")
			if err != nil {
				t.Fatal(err)
			}
			defer b1.Rollback(asB) //nolint:errcheck

			// A's reads, each held open until A's release closes; closed
			// however the test ends, since the pool's Close waits for them.
			release := make(chan struct{})
			releaseA := sync.OnceFunc(func() { close(release) })
			var (
				mu    sync.Mutex
				begun int
				wg    sync.WaitGroup
			)
			for range conns {
				wg.Go(func() {
					tx, err := read(asA, "a")
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					begun++
					mu.Unlock()
					<-release
					_ = tx.Rollback(asA)
				})
			}
			defer wg.Wait()
			defer releaseA()
			waitingA := func() int { return gd.reads.Waiting("a") }
			begunA := func() int { mu.Lock(); defer mu.Unlock(); return begun }
			for deadline := time.Now().Add(10 * time.Second); waitingA() < conns-2 || begunA() < 2; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of A's reads began and %d wait at the gate, want 2 and %d", begunA(), waitingA(), conns-2)
				}
			}

			// B reads while A holds its share and waits for more.
			ctx, cancel := context.WithTimeout(asB, 5*time.Second)
			defer cancel()
			b2, err := read(ctx, "b")
			if err != nil {
				t.Fatalf("B's read while A's reads wait: %v", err)
			}
			if n := begunA(); n != 2 {
				t.Errorf("A's reads begun while B read: %d, want its share, 2", n)
			}
			_ = b2.Rollback(ctx)
			releaseA()
			wg.Wait()
			if begun != conns {
				t.Fatalf("A's reads begun %d, want %d", begun, conns)
			}
			if got := testutil.ToFloat64(gd.readWaits.WithLabelValues("a", "granted")); got != conns-2 {
				t.Fatalf("A's granted read waits %v, want %d", got, conns-2)
			}
		})
	}
}

// TestBatchesTakeTheWriteGate: the Batcher's batches take their slots of
// the service's one write gate, once each, beside the tenants' other
// transactions: with tenant B holding two plain write transactions and
// tenant A two batches held in their work, the pool's four slots are
// taken, tenant C's write waits at the gate, and it is granted the slot
// A's first batch frees.
func TestBatchesTakeTheWriteGate(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres"} { // SQLite's one writer: one slot
		t.Run(dialect, func(t *testing.T) {
			d := smallPool(t, dialect, 4)
			gd, err := newGatedDriver(d, 0.5, time.Minute, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			k, err := idem.New(gd, idem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan string, 2), map[string]chan struct{}{"a1": make(chan struct{}), "a2": make(chan struct{})}
			b, err := idem.NewBatcher(k, func(ctx context.Context, tx driver.Tx, items []string) ([]idem.ItemResult, error) {
				entered <- items[0]
				<-release[items[0]]
				return []idem.ItemResult{{Outcome: idem.Outcome{Status: 201, Body: []byte(`{}`)}}}, nil
			}, idem.BatchConfig{Concurrency: 2, MaxBatch: 1})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for range 2 {
				tx, err := gd.Begin(withTenant(ctx, "b"), driver.BeginOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx) //nolint:errcheck
			}
			answered := make(chan error, 2)
			for _, key := range []string{"a1", "a2"} {
				go func() {
					_, err := b.Do(ctx, idem.Request{Key: idem.Key{Scope: "a", Operation: "POST /t", Key: key}, Body: []byte(`{}`)}, key)
					answered <- err
				}()
				<-entered
			}
			if n := gd.writes.InUse(); n != 4 {
				t.Fatalf("slots in use %d with B's two transactions and A's two batches, want 4: one a batch", n)
			}
			granted := make(chan error, 1)
			go func() {
				tx, err := gd.Begin(withTenant(ctx, "c"), driver.BeginOptions{})
				if err == nil {
					err = tx.Rollback(ctx)
				}
				granted <- err
			}()
			for deadline := time.Now().Add(time.Minute); gd.writes.Waiting("c") != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("C's write did not wait at the gate")
				}
			}
			close(release["a1"])
			if err := <-answered; err != nil {
				t.Fatal(err)
			}
			if err := <-granted; err != nil {
				t.Fatalf("C's write after A's batch ended: %v", err)
			}
			close(release["a2"])
			if err := <-answered; err != nil {
				t.Fatal(err)
			}
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
