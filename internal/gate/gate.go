// Package gate shares a database's connections among tenants: the one
// authority that decides which tenant's transaction goes next, for the
// Batcher's batches and the service's transactions alike.
package gate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Gate shares connections of the database among tenants: the
// transactions they may hold at once (capacity). A tenant takes a free
// slot at once unless it holds its share of them
// (ceil(share × capacity), at least 1) while another tenant is present;
// then it waits. Waiting tenants are served in turn, the one whose
// transactions held slots for the least time first (its use time, a
// fair share of the capacity's time rather than of its grants: one long
// transaction of one tenant's weighs as many short ones of another's),
// each tenant's waiters first come, first served, and a slot nobody
// below its share waits for goes to the next tenant in turn anyway: no
// slot stays idle while a tenant waits for one, except the slots kept
// free for a present tenant.
//
// A tenant's use time counts from when it became active (held or
// waited for a slot) at the least use time of the tenants active then,
// so that the time it spent idle is no credit against them.
//
// A tenant is present while it holds or waits for a slot, and for
// presenceWindow after its last transaction ended: a tenant with steady
// but spaced writes (one group-commit batch at a time) then finds a slot
// free when its next one begins, instead of waiting for another tenant's
// long transaction to end. A tenant alone uses every slot.
//
// A wait ends when the caller's context does, or after maxWait: the
// caller is answered the gate's refusal (the service's: 503 with
// Retry-After), never kept waiting without bound. A slot is freed by its
// release, which its holder calls on every path (the service's: the
// transaction's Commit or Rollback, whichever comes first, a deferred
// Rollback included; the Batcher's: the batch's end).
//
// Its tenants are those of its callers (the service's: its API keys'
// tenants, which are its batches' scopes); it keeps only those of the
// moment.
type Gate struct {
	capacity int
	share    int
	maxWait  time.Duration
	presence time.Duration
	refuse   error // what a wait that did not end granted is wrapped in
	now      func() time.Time
	epoch    time.Time // the instants of the use times are since it

	mu      sync.Mutex
	inUse   int
	tenants map[string]*tenant
	turns   []*tenant   // the tenants with waiters
	grants  uint64      // slots granted so far: the turns' order among equal use times
	timer   *time.Timer // re-serves the waiters when a presence ends
}

type tenant struct {
	name     string
	held     int
	waiters  []*waiter     // first come, first served
	lastSeen time.Time     // when its last transaction ended
	served   uint64        // g.grants when it last took a slot
	used     time.Duration // use time of its ended transactions (Gate.used adds those it holds)
	started  time.Duration // the sum of its held slots' grant instants, since g.epoch
}

type waiter struct {
	ready   chan struct{} // closed when granted
	granted bool
	start   time.Duration // its grant's instant, since g.epoch
}

// presenceWindow is how long a tenant counts as present after its last
// write transaction ended: longer than the gap between a steady tenant's
// transactions, short enough that a tenant left alone soon has every slot.
const presenceWindow = time.Second

// ErrTurn is in the error of a wait that ended before the tenant's turn
// came.
var ErrTurn = errors.New("idem: the tenant's share of the database's connections stayed taken")

// New returns a gate of capacity slots, a tenant's share of them
// ceil(share × capacity), at least 1. A wait ends at maxWait (0: only
// with its context) with an error wrapping refuse and ErrTurn.
func New(capacity int, share float64, maxWait time.Duration, refuse error) (*Gate, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("idem: tenant gate: capacity %d, want at least 1", capacity)
	}
	if !(share > 0 && share <= 1) {
		return nil, fmt.Errorf("idem: tenant gate: share %v is outside 0 < share ≤ 1", share)
	}
	return &Gate{
		capacity: capacity,
		share:    min(capacity, max(1, int(math.Ceil(share*float64(capacity)-1e-9)))),
		maxWait:  maxWait,
		refuse:   refuse,
		presence: presenceWindow,
		now:      time.Now,
		epoch:    time.Now(),
		tenants:  map[string]*tenant{},
	}, nil
}

// Acquire takes a slot for tenant name, waiting for its turn while the
// tenant holds its share and another is present; waited, when set, is
// called with the tenant and outcome of a wait ("granted", "expired",
// "canceled"). A nil error's release must be called once the transaction
// ends; it may be called more than once.
func (g *Gate) Acquire(ctx context.Context, name string, waited func(tenant, outcome string)) (release func(), err error) {
	g.mu.Lock()
	t := g.tenants[name]
	if t == nil {
		t = &tenant{name: name}
		g.tenants[name] = t
	}
	if t.held == 0 && len(t.waiters) == 0 {
		g.activate(t)
	}
	if len(t.waiters) == 0 && g.mayTake(t) {
		start := g.take(t)
		g.mu.Unlock()
		return g.releaser(t, start), nil
	}
	w := &waiter{ready: make(chan struct{})}
	t.waiters = append(t.waiters, w)
	if len(t.waiters) == 1 {
		g.turns = append(g.turns, t)
	}
	g.mu.Unlock()

	var expired <-chan time.Time
	if g.maxWait > 0 {
		timer := time.NewTimer(g.maxWait)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case <-w.ready:
		if waited != nil {
			waited(name, "granted")
		}
		return g.releaser(t, w.start), nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = context.DeadlineExceeded
	}
	// A caller that went away is no sign of the database's pressure, as a
	// wait past its deadline is: counted apart.
	outcome := "expired"
	if errors.Is(err, context.Canceled) {
		outcome = "canceled"
	}
	g.mu.Lock()
	if w.granted { // granted as the wait ended: give it back
		g.mu.Unlock()
		g.releaser(t, w.start)()
	} else {
		t.waiters = slices.DeleteFunc(t.waiters, func(x *waiter) bool { return x == w })
		if len(t.waiters) == 0 {
			g.turns = slices.DeleteFunc(g.turns, func(x *tenant) bool { return x == t })
		}
		g.serve() // its leaving may make a slot it kept for nothing grantable
		g.mu.Unlock()
	}
	if waited != nil {
		waited(name, outcome)
	}
	return nil, fmt.Errorf("%w: %w: %w", g.refuse, ErrTurn, err)
}

type heldKey struct{}

// WithHeld marks ctx as that of a transaction holding a slot of g, so
// that a gated driver does not take another for it.
func WithHeld(ctx context.Context, g *Gate) context.Context {
	return context.WithValue(ctx, heldKey{}, g)
}

// Holds reports whether ctx is that of a transaction holding a slot of g
// (WithHeld).
func Holds(ctx context.Context, g *Gate) bool {
	h, _ := ctx.Value(heldKey{}).(*Gate)
	return h == g
}

// Holder is a driver that gates its write transactions: a Batcher over it
// takes its batches' slots from WriteGate, counting its waits with the
// function it gives, and has no gate of its own.
type Holder interface {
	WriteGate() (*Gate, func(tenant, outcome string))
}

func (g *Gate) releaser(t *tenant, start time.Duration) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.inUse--
			t.held--
			t.lastSeen = g.now()
			t.used += t.lastSeen.Sub(g.epoch) - start
			t.started -= start
			g.serve()
		})
	}
}

// take gives t a slot and returns the instant it did, since g.epoch.
func (g *Gate) take(t *tenant) time.Duration {
	start := g.now().Sub(g.epoch)
	g.inUse++
	t.held++
	t.started += start
	g.grants++
	t.served = g.grants
	return start
}

// used is t's use time: that of its ended transactions and of those it
// holds so far. g.mu is held.
func (g *Gate) used(t *tenant, now time.Duration) time.Duration {
	return t.used + time.Duration(t.held)*now - t.started
}

// activate starts t's use time, as t becomes active, at the least of
// the other active tenants' when that is more. g.mu is held.
func (g *Gate) activate(t *tenant) {
	now := g.now().Sub(g.epoch)
	least := time.Duration(-1)
	for _, o := range g.tenants {
		if o != t && (o.held > 0 || len(o.waiters) > 0) {
			if u := g.used(o, now); least < 0 || u < least {
				least = u
			}
		}
	}
	t.used = max(t.used, least)
}

// nextInTurn returns the index in g.turns of the tenant with the least
// use time among those ok accepts, the least recently served of equals,
// or -1. g.mu is held.
func (g *Gate) nextInTurn(ok func(*tenant) bool) int {
	now := g.now().Sub(g.epoch)
	best, bestUsed := -1, time.Duration(0)
	for i, t := range g.turns {
		if !ok(t) {
			continue
		}
		u := g.used(t, now)
		if best < 0 || u < bestUsed || u == bestUsed && t.served < g.turns[best].served {
			best, bestUsed = i, u
		}
	}
	return best
}

// mayTake reports whether t may take a free slot now: below its share,
// or when the slots left free after it would still cover what the other
// present tenants may take within their shares. g.mu is held.
func (g *Gate) mayTake(t *tenant) bool {
	if g.inUse >= g.capacity {
		return false
	}
	if t.held < g.share {
		return true
	}
	now := g.now()
	kept := 0
	for _, o := range g.tenants {
		if o != t && (o.held > 0 || len(o.waiters) > 0 || now.Sub(o.lastSeen) < g.presence) {
			kept += max(0, g.share-o.held)
		}
	}
	return g.capacity-g.inUse > kept
}

// serve grants the free slots to the waiters, the tenants in turn: first
// those below their share, then, while slots stay free, any whose taking
// keeps none from a present tenant's share (mayTake). It forgets the
// tenants gone from the presence window, and sets a timer to serve again
// when a presence that keeps a slot from a waiter ends. g.mu is held.
func (g *Gate) serve() {
	for g.inUse < g.capacity && len(g.turns) > 0 {
		i := g.nextInTurn(func(t *tenant) bool { return t.held < g.share })
		if i < 0 {
			i = g.nextInTurn(g.mayTake)
		}
		if i < 0 {
			break
		}
		t := g.turns[i]
		w := t.waiters[0]
		t.waiters = t.waiters[1:]
		if len(t.waiters) == 0 {
			g.turns = slices.Delete(g.turns, i, i+1)
		}
		w.start = g.take(t)
		w.granted = true
		close(w.ready)
	}
	now := g.now()
	for name, t := range g.tenants {
		if t.held == 0 && len(t.waiters) == 0 && now.Sub(t.lastSeen) >= g.presence {
			delete(g.tenants, name)
		}
	}
	if len(g.turns) > 0 && g.inUse < g.capacity && g.timer == nil {
		g.timer = time.AfterFunc(g.presence, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.timer = nil
			g.serve()
		})
	}
}

// InUse is the number of slots held.
func (g *Gate) InUse() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inUse
}

// Waiting is the number of tenant name's callers waiting for a slot.
func (g *Gate) Waiting(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t := g.tenants[name]; t != nil {
		return len(t.waiters)
	}
	return 0
}
