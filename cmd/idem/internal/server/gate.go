package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
)

// tenantGate shares connections of the database among tenants: the
// transactions they may hold at once (capacity). A
// tenant takes a free slot at once unless it holds its share of them
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
// caller is answered driver.ErrUnavailable (503 with Retry-After), never
// kept waiting without bound. A slot is freed by the transaction's Commit
// or Rollback, whichever comes first; callers roll back on every path
// (a deferred Rollback), panics included.
//
// Its tenants are those of the configured API keys (or "default") and the
// scopes of group-commit batches, which are the same: the map and the
// metrics' tenant label are bounded by the configuration.
type tenantGate struct {
	capacity int
	share    int
	maxWait  time.Duration
	presence time.Duration
	now      func() time.Time
	epoch    time.Time // the instants of the use times are since it

	mu      sync.Mutex
	inUse   int
	tenants map[string]*gateTenant
	turns   []*gateTenant // the tenants with waiters
	grants  uint64        // slots granted so far: the turns' order among equal use times
	timer   *time.Timer   // re-serves the waiters when a presence ends
}

type gateTenant struct {
	name     string
	held     int
	waiters  []*gateWaiter // first come, first served
	lastSeen time.Time     // when its last transaction ended
	served   uint64        // g.grants when it last took a slot
	used     time.Duration // use time of its ended transactions (tenantGate.used adds those it holds)
	started  time.Duration // the sum of its held slots' grant instants, since g.epoch
}

type gateWaiter struct {
	ready   chan struct{} // closed when granted
	granted bool
	start   time.Duration // its grant's instant, since g.epoch
}

// presenceWindow is how long a tenant counts as present after its last
// write transaction ended: longer than the gap between a steady tenant's
// transactions, short enough that a tenant left alone soon has every slot.
const presenceWindow = time.Second

// errTenantGate is the error of a transaction that waited for its
// tenant's turn until its deadline.
var errTenantGate = errors.New("idem: the tenant's share of the database's connections stayed taken")

func newTenantGate(capacity int, share float64, maxWait time.Duration) (*tenantGate, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("idem: tenant gate: capacity %d, want at least 1", capacity)
	}
	return &tenantGate{
		capacity: capacity,
		share:    min(capacity, max(1, int(math.Ceil(share*float64(capacity))))),
		maxWait:  maxWait,
		presence: presenceWindow,
		now:      time.Now,
		epoch:    time.Now(),
		tenants:  map[string]*gateTenant{},
	}, nil
}

// acquire takes a slot for tenant, waiting for its turn while the tenant
// holds its share and another is present; a wait is counted in waits by
// tenant and outcome. A nil error's release must be called once the
// transaction ends; it may be called more than once.
func (g *tenantGate) acquire(ctx context.Context, tenant string, waits *prometheus.CounterVec) (release func(), err error) {
	g.mu.Lock()
	t := g.tenants[tenant]
	if t == nil {
		t = &gateTenant{name: tenant}
		g.tenants[tenant] = t
	}
	if t.held == 0 && len(t.waiters) == 0 {
		g.activate(t)
	}
	if len(t.waiters) == 0 && g.mayTake(t) {
		start := g.take(t)
		g.mu.Unlock()
		return g.releaser(t, start), nil
	}
	w := &gateWaiter{ready: make(chan struct{})}
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
		waits.WithLabelValues(tenant, "granted").Inc()
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
		t.waiters = slices.DeleteFunc(t.waiters, func(x *gateWaiter) bool { return x == w })
		if len(t.waiters) == 0 {
			g.turns = slices.DeleteFunc(g.turns, func(x *gateTenant) bool { return x == t })
		}
		g.serve() // its leaving may make a slot it kept for nothing grantable
		g.mu.Unlock()
	}
	waits.WithLabelValues(tenant, outcome).Inc()
	return nil, fmt.Errorf("%w: %w: %w", driver.ErrUnavailable, errTenantGate, err)
}

func (g *tenantGate) releaser(t *gateTenant, start time.Duration) func() {
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
func (g *tenantGate) take(t *gateTenant) time.Duration {
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
func (g *tenantGate) used(t *gateTenant, now time.Duration) time.Duration {
	return t.used + time.Duration(t.held)*now - t.started
}

// activate starts t's use time, as t becomes active, at the least of
// the other active tenants' when that is more. g.mu is held.
func (g *tenantGate) activate(t *gateTenant) {
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
func (g *tenantGate) nextInTurn(ok func(*gateTenant) bool) int {
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
func (g *tenantGate) mayTake(t *gateTenant) bool {
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
func (g *tenantGate) serve() {
	for g.inUse < g.capacity && len(g.turns) > 0 {
		i := g.nextInTurn(func(t *gateTenant) bool { return t.held < g.share })
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

// gatedDriver is a driver whose transactions on a tenant's behalf take a
// slot of a tenantGate first: those begun under a request's context (its
// tenant) or a group-commit batch's (its scope). Where reads and writes
// share one pool (PostgreSQL) one gate of the pool's size serves both;
// where the writers are a pool of their own (SQLite's one writer beside
// its readers) each pool has its gate. Those of no tenant (the relay, the
// janitor, migrations) pass ungated, as do the keeper's one-statement
// reads of a stored answer, which take no transaction.
type gatedDriver struct {
	driver.Driver
	writes, reads         *tenantGate // the same gate for one shared pool
	writeWaits, readWaits *prometheus.CounterVec
}

func newGatedDriver(d driver.Driver, share float64, maxWait time.Duration, reg prometheus.Registerer) (*gatedDriver, error) {
	g := &gatedDriver{Driver: d, writeWaits: waitCounter("write", "Write"), readWaits: waitCounter("read", "Read-only")}
	var err error
	if g.writes, err = newTenantGate(writeCapacity(d), share, maxWait); err != nil {
		return nil, err
	}
	g.reads = g.writes
	if w, ok := driver.Optional[driver.WriterBound](d); ok && w.Writers() > 0 {
		if g.reads, err = newTenantGate(max(1, d.PoolStats().MaxConns-w.Writers()), share, maxWait); err != nil {
			return nil, err
		}
	}
	for _, c := range []prometheus.Collector{g.writeWaits, g.readWaits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// waitCounter counts the transactions of a kind ("write", "read";
// what names them in its help) that waited for a slot, by tenant and
// outcome.
func waitCounter(kind, what string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_tenant_" + kind + "_waits_total",
		Help: what + " transactions that waited for a slot of the database's connections while other tenants held theirs, by tenant and outcome (granted, expired, canceled).",
	}, []string{"tenant", "outcome"})
}

// Unwrap is the driver gated: its optional interfaces (driver.Optional)
// are the gated driver's.
func (d *gatedDriver) Unwrap() driver.Driver { return d.Driver }

func (d *gatedDriver) Begin(ctx context.Context, opts driver.BeginOptions) (driver.TxCloser, error) {
	tenant, ok := idem.ScopeFrom(ctx)
	if !ok {
		tenant = tenantFrom(ctx)
	}
	if tenant == "" {
		return d.Driver.Begin(ctx, opts)
	}
	gate, waits := d.writes, d.writeWaits
	if opts.ReadOnly {
		gate, waits = d.reads, d.readWaits
	}
	release, err := gate.acquire(ctx, tenant, waits)
	if err != nil {
		return nil, err
	}
	tx, err := d.Driver.Begin(ctx, opts)
	if err != nil {
		release()
		return nil, err
	}
	return &gatedTx{TxCloser: tx, release: release}, nil
}

// gatedTx frees its slot when it commits or rolls back.
type gatedTx struct {
	driver.TxCloser
	release func()
}

func (t *gatedTx) Unwrap() driver.Tx { return t.TxCloser }

func (t *gatedTx) Commit(ctx context.Context) error {
	defer t.release()
	return t.TxCloser.Commit(ctx)
}

func (t *gatedTx) Rollback(ctx context.Context) error {
	defer t.release()
	return t.TxCloser.Rollback(ctx)
}
