package gate

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateFixture is a Gate under a clock the test moves.
type gateFixture struct {
	*Gate
	waits *waits
	mu    sync.Mutex
	now   time.Time
}

// waits counts a gate's waits by tenant and outcome.
type waits struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (w *waits) count(tenant, outcome string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n[[2]string{tenant, outcome}]++
}

func (w *waits) of(tenant, outcome string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[[2]string{tenant, outcome}]
}

func newWaits() *waits { return &waits{n: map[[2]string]int{}} }

// errRefused is the test gates' refusal.
var errRefused = errors.New("refused")

func newGateFixture(t *testing.T, capacity int, share float64) *gateFixture {
	t.Helper()
	w := newWaits()
	g, err := New(capacity, share, time.Minute, errRefused)
	if err != nil {
		t.Fatal(err)
	}
	f := &gateFixture{Gate: g, waits: w, now: time.Unix(1_000_000, 0)}
	g.now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	g.presence = time.Hour // the test moves presences on by hand (pass)
	return f
}

// pass moves the clock past every presence and serves the waiters.
func (f *gateFixture) pass() {
	f.mu.Lock()
	f.now = f.now.Add(2 * time.Hour)
	f.mu.Unlock()
	f.Gate.mu.Lock()
	f.serve()
	f.Gate.mu.Unlock()
}

func (f *gateFixture) take(t *testing.T, tenant string) func() {
	t.Helper()
	release, err := f.Acquire(context.Background(), tenant, f.waits.count)
	if err != nil {
		t.Fatal(err)
	}
	return release
}

// wait starts an acquire that must wait; its slot's release arrives on
// the returned channel once granted.
func (f *gateFixture) wait(t *testing.T, ctx context.Context, tenant string) <-chan func() {
	t.Helper()
	before := f.Waiting(tenant)
	got := make(chan func(), 1)
	errc := make(chan error, 1)
	go func() {
		release, err := f.Acquire(ctx, tenant, f.waits.count)
		if err != nil {
			errc <- err
			close(got)
			return
		}
		got <- release
	}()
	for {
		if f.Waiting(tenant) > before {
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

func TestGateShare(t *testing.T) {
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
		if g.Waiting(tenant) != 1 {
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
	if got := g.InUse(); got != 4 {
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

func TestGateTurns(t *testing.T) {
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
	if got := g.InUse(); got != 0 {
		t.Fatalf("slots in use %d after every release", got)
	}
}

// TestGateWriteTime: on one writer, waiting tenants are served
// by the write time they used, not by turns of one transaction each:
// after one of A's long transactions B's short ones go first until B has
// used as much, and a tenant that was away starts at the others' time.
func TestGateWriteTime(t *testing.T) {
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
	if got := g.InUse(); got != 0 {
		t.Fatalf("slots in use %d after every release", got)
	}
}

func TestGateWaitEnds(t *testing.T) {
	t.Parallel()
	waits := newWaits()
	g, err := New(1, 0.5, time.Minute, errRefused)
	if err != nil {
		t.Fatal(err)
	}
	hold, err := g.Acquire(context.Background(), "a", waits.count)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := g.Acquire(ctx, "b", waits.count)
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
	if !errors.Is(err, errRefused) || !errors.Is(err, context.Canceled) || !errors.Is(err, ErrTurn) {
		t.Fatalf("acquire after its context ended: %v, want its refusal, ErrTurn and context.Canceled", err)
	}
	if got, expired := waits.of("b", "canceled"), waits.of("b", "expired"); got != 1 || expired != 0 {
		t.Fatalf("B's canceled waits %v, expired %v; want 1 canceled (its caller went away), none expired", got, expired)
	}
	// A wait that outlasts its deadline expires.
	short, stop := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer stop()
	if _, err := g.Acquire(short, "b", waits.count); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire past its deadline: %v", err)
	}
	if got := waits.of("b", "expired"); got != 1 {
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
