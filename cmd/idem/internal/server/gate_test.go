package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// gateFixture is a tenantGate under a clock the test moves.
type gateFixture struct {
	*tenantGate
	waits *prometheus.CounterVec
	mu    sync.Mutex
	now   time.Time
}

// newWaits is a gate's wait counter, registered nowhere.
func newWaits() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waits"}, []string{"tenant", "outcome"})
}

func newGateFixture(t *testing.T, capacity int, share float64) *gateFixture {
	t.Helper()
	g, err := newTenantGate(capacity, share, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := &gateFixture{tenantGate: g, waits: newWaits(), now: time.Unix(1_000_000, 0)}
	g.now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	g.presence = time.Hour // the test moves presences on by hand (pass)
	return f
}

// pass moves the clock past every presence and serves the waiters.
func (f *gateFixture) pass() {
	f.mu.Lock()
	f.now = f.now.Add(2 * time.Hour)
	f.mu.Unlock()
	f.tenantGate.mu.Lock()
	f.serve()
	f.tenantGate.mu.Unlock()
}

func (f *gateFixture) take(t *testing.T, tenant string) func() {
	t.Helper()
	release, err := f.acquire(context.Background(), tenant, f.waits)
	if err != nil {
		t.Fatal(err)
	}
	return release
}

// wait starts an acquire that must wait; its slot's release arrives on
// the returned channel once granted.
func (f *gateFixture) wait(t *testing.T, ctx context.Context, tenant string) <-chan func() {
	t.Helper()
	f.tenantGate.mu.Lock()
	before := f.waiting(tenant)
	f.tenantGate.mu.Unlock()
	got := make(chan func(), 1)
	errc := make(chan error, 1)
	go func() {
		release, err := f.acquire(ctx, tenant, f.waits)
		if err != nil {
			errc <- err
			close(got)
			return
		}
		got <- release
	}()
	for {
		f.tenantGate.mu.Lock()
		n := f.waiting(tenant)
		f.tenantGate.mu.Unlock()
		if n > before {
			return got
		}
		select {
		case r := <-got:
			if r != nil {
				r()
			}
			t.Fatalf("%s's acquire did not wait", tenant)
		case err := <-errc:
			t.Fatalf("%s's acquire: %v", tenant, err)
		default:
			time.Sleep(time.Millisecond)
		}
	}
}

func (f *gateFixture) waiting(tenant string) int {
	if t := f.tenants[tenant]; t != nil {
		return len(t.waiters)
	}
	return 0
}

func (f *gateFixture) inUseNow() int {
	f.tenantGate.mu.Lock()
	defer f.tenantGate.mu.Unlock()
	return f.inUse
}

func TestTenantWriteGateShare(t *testing.T) {
	t.Parallel()
	g := newGateFixture(t, 4, 0.5) // share: 2 slots

	// A tenant alone takes every slot.
	var a []func()
	for range 4 {
		a = append(a, g.take(t, "a"))
	}
	// B waits for a slot; the first one freed is B's, although A waited
	// first: A holds beyond its share.
	a5 := g.wait(t, context.Background(), "a")
	b1 := g.wait(t, context.Background(), "b")
	a[0]()
	rb1 := <-b1
	stillWaits := func(tenant string) {
		t.Helper()
		g.tenantGate.mu.Lock()
		defer g.tenantGate.mu.Unlock()
		if g.waiting(tenant) != 1 {
			t.Fatalf("%s's waiter was granted a slot kept for another tenant", tenant)
		}
	}
	stillWaits("a")
	// A, beyond its share, gets no freed slot while B is present.
	a[1]()
	stillWaits("a")
	a[2]()
	ra5 := <-a5 // A below its share again: A holds 2, B 1
	// The last free slot is within B's share: A waits, B takes it.
	a6 := g.wait(t, context.Background(), "a")
	rb2 := g.take(t, "b")
	if got := g.inUseNow(); got != 4 {
		t.Fatalf("slots in use %d, want 4", got)
	}
	// B's slots stay free for it while it is present, held or not.
	rb1()
	stillWaits("a")
	rb2()
	stillWaits("a")
	// B's presence ends: A alone has every slot again.
	g.pass()
	ra6 := <-a6
	a[3]()
	ra5()
	ra6()
	for range 4 {
		defer g.take(t, "a")()
	}
}

func TestTenantWriteGateTurns(t *testing.T) {
	t.Parallel()
	g := newGateFixture(t, 1, 0.5) // SQLite's one writer: share 1
	hold := g.take(t, "a")
	a1 := g.wait(t, context.Background(), "a")
	a2 := g.wait(t, context.Background(), "a")
	b1 := g.wait(t, context.Background(), "b")
	// The least recently served tenant first, each one's waiters in order.
	// A release grants the next slot before it returns: exactly one of
	// the heads below receives it.
	var order []string
	next := map[string][]<-chan func(){"a": {a1, a2}, "b": {b1}}
	head := func(name string) <-chan func() {
		if len(next[name]) == 0 {
			return nil
		}
		return next[name][0]
	}
	for range 3 {
		hold()
		var name string
		select {
		case hold = <-head("a"):
			name = "a"
		case hold = <-head("b"):
			name = "b"
		}
		order = append(order, name)
		next[name] = next[name][1:]
	}
	hold()
	if got := order; len(got) != 3 || got[0] != "b" || got[1] != "a" || got[2] != "a" {
		t.Fatalf("served %v, want [b a a]", got)
	}
	if got := g.inUseNow(); got != 0 {
		t.Fatalf("slots in use %d after every release", got)
	}
}

// TestTenantWriteGateWriteTime: on one writer, waiting tenants are served
// by the write time they used, not by turns of one transaction each:
// after one of A's long transactions B's short ones go first until B has
// used as much, and a tenant that was away starts at the others' time.
func TestTenantWriteGateWriteTime(t *testing.T) {
	t.Parallel()
	g := newGateFixture(t, 1, 0.5)
	advance := func(d time.Duration) { g.mu.Lock(); g.now = g.now.Add(d); g.mu.Unlock() }
	hold := g.take(t, "a")
	b1 := g.wait(t, context.Background(), "b")
	a1 := g.wait(t, context.Background(), "a")
	b2 := g.wait(t, context.Background(), "b")
	b3 := g.wait(t, context.Background(), "b")
	advance(4 * time.Second) // A's long transaction: B starts at A's 0
	hold()
	for i, b := range []<-chan func(){b1, b2, b3} {
		var release func()
		select {
		case release = <-b:
		case <-a1:
			t.Fatalf("A was served before B's transaction %d: B has used %v of A's 4s", i+1, time.Duration(i)*time.Second)
		}
		advance(time.Second)
		release()
	}
	// B has used 3s, A 4s: A's turn comes only once B waits no more.
	release := <-a1
	// C, new, and B, idle, start at the least active write time: A's 4s.
	c1 := g.wait(t, context.Background(), "c")
	b4 := g.wait(t, context.Background(), "b")
	advance(time.Second)
	release() // A 5s, B 4s, C 4s: C, the least recently served of equals
	select {
	case release = <-c1:
	case <-b4:
		t.Fatal("B was served before C, served less recently at the same write time")
	}
	a2 := g.wait(t, context.Background(), "a")
	c2 := g.wait(t, context.Background(), "c")
	advance(3 * time.Second)
	release() // A 5s, B 4s, C 7s: B, A, C (C from 0 would come before A)
	var order []string
	heads := map[string]<-chan func(){"a": a2, "b": b4, "c": c2}
	for range 3 {
		var name string
		select {
		case release = <-heads["a"]:
			name = "a"
		case release = <-heads["b"]:
			name = "b"
		case release = <-heads["c"]:
			name = "c"
		}
		order = append(order, name)
		delete(heads, name)
		release()
	}
	if got := strings.Join(order, " "); got != "b a c" {
		t.Fatalf("served %s, want b a c", got)
	}
	if got := g.inUseNow(); got != 0 {
		t.Fatalf("slots in use %d after every release", got)
	}
}

func TestTenantWriteGateWaitEnds(t *testing.T) {
	t.Parallel()
	g, err := newTenantGate(1, 0.5, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waits := newWaits()
	hold, err := g.acquire(context.Background(), "a", waits)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := g.acquire(ctx, "b", waits)
		errc <- err
	}()
	for {
		g.mu.Lock()
		n := 0
		if b := g.tenants["b"]; b != nil {
			n = len(b.waiters)
		}
		g.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	err = <-errc
	if !errors.Is(err, driver.ErrUnavailable) || !errors.Is(err, context.Canceled) || !errors.Is(err, errTenantGate) {
		t.Fatalf("acquire after its context ended: %v, want ErrUnavailable and context.Canceled", err)
	}
	if got, expired := testutil.ToFloat64(waits.WithLabelValues("b", "canceled")), testutil.ToFloat64(waits.WithLabelValues("b", "expired")); got != 1 || expired != 0 {
		t.Fatalf("B's canceled waits %v, expired %v; want 1 canceled (its caller went away), none expired", got, expired)
	}
	// A wait that outlasts its deadline expires.
	short, stop := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer stop()
	if _, err := g.acquire(short, "b", waits); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire past its deadline: %v", err)
	}
	if got := testutil.ToFloat64(waits.WithLabelValues("b", "expired")); got != 1 {
		t.Fatalf("B's expired waits %v, want 1", got)
	}
	hold()
	hold() // twice is once
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inUse != 0 || len(g.turns) != 0 {
		t.Fatalf("in use %d, turns %d after the wait ended and the slot was freed", g.inUse, len(g.turns))
	}
}

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
		gates := []*tenantGate{gd.writes}
		if gd.reads != gd.writes {
			gates = append(gates, gd.reads)
		}
		inUse := func() int {
			n := 0
			for _, g := range gates {
				g.mu.Lock()
				n += g.inUse
				g.mu.Unlock()
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
			waitingA := func() int {
				gd.reads.mu.Lock()
				defer gd.reads.mu.Unlock()
				if a := gd.reads.tenants["a"]; a != nil {
					return len(a.waiters)
				}
				return 0
			}
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
