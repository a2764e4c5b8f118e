package idem

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/failpoint"
)

// Batcher coalesces concurrent first arrivals into one transaction ("group
// commit"): where Keeper.Do spends a transaction on each request, a Batcher
// spends one on all the requests that arrived while its batches ran, up to
// BatchConfig.MaxBatch. Each request is still all-or-nothing and answered
// only once its batch committed; Batcher.Do keeps everything Keeper.Do does
// but the transaction of its own. A batch that fails for a reason one of
// its requests may cause is rolled back and tried again in halves, down to
// single requests, so that one request's fault is answered to it alone.
//
// It has no goroutine and no timer of its own: a request that finds no
// batch running runs one at once, so a lone request costs what Do costs;
// otherwise it waits, and what waits starts a batch when one ends, or
// beside the running ones (up to Concurrency) once as many requests wait
// as a running batch carries on average (startable), or once it has waited
// a quarter of MaxWait. docs/architecture.md, "Group commit", says what the
// knobs trade.
//
// Scopes (Key.Scope: the service's tenants) do not share batches: a batch
// carries one scope's requests, so that a request waiting on a row lock
// its own scope holds holds back only its own scope. Everything above is
// per scope: a request runs at once when nothing of its scope runs or
// waits, and waits for company among its own scope's. The places go to
// the waiting scopes in turn, and a scope holding its share of them
// (BatchConfig.Share) takes another only while no scope below its share
// waits. A scope with no batch running takes a place beside the
// Concurrency ones when those are full (up to as many again), so that a
// scope whose batches all sit on its own locks cannot keep another's
// requests waiting for them. With one scope it runs as it would with
// none.
type Batcher[T any] struct {
	k     *Keeper
	work  BatchWork[T]
	cfg   BatchConfig
	share int // ceil(Share × Concurrency): the places a scope holds while others wait

	mu      sync.Mutex
	idle    sync.Cond           // running fell to 0: for Close
	running int                 // batches running, of every scope; while 0, nothing waits
	waiting int                 // requests waiting to be taken, of every scope (MaxQueued)
	lanes   map[string]*lane[T] // the scopes with a batch running or a request waiting
	turns   []*lane[T]          // the scopes with requests waiting, in the order they take places
	closed  bool

	testHooks batchHooks
}

// lane is one scope's part of a Batcher. Its fields are guarded by
// Batcher.mu.
type lane[T any] struct {
	scope   string
	running int           // its batches running
	carried int           // requests in its running batches
	queue   []*pending[T] // oldest first; holds given-up requests until compacted
	waiting int           // requests in queue still waiting to be taken
	stale   int           // requests in queue that gave up
	open    *gathering[T] // its newest batch while it waits to begin, which arrivals join
}

// gathering is a batch from when it is taken until its transaction has
// begun: a request of its scope that arrives meanwhile, with no place
// free for a batch of its own and nothing of its scope waiting, joins it
// (up to MaxBatch) instead of waiting for the next batch, so that a batch
// waiting for a connection or for the database's one writer carries
// everyone who came while it waited. Its batch is guarded by Batcher.mu,
// and final once the lane's open is no longer it.
type gathering[T any] struct {
	lane   *lane[T]
	batch  []*pending[T]
	ctx    context.Context // the batch's: ended once every caller in it has gone
	cancel context.CancelFunc
	left   atomic.Int64 // callers in batch still there; at 0 ctx ends and nobody joins
	stops  []func() bool
}

// batchHooks let tests see the batches without sleeping; set only by
// export_test.go, before the batcher is used, and nil in production.
type batchHooks struct {
	// queued is called with each request's key once it waits in the
	// queue (not when it starts a batch as it arrives).
	queued func(Key)
	// joined is called with a request's key once it joined a batch that
	// had not begun.
	joined func(Key)
	// attempt is called with the keys of each transaction a batch
	// begins, before it begins it: for a batch's first, those in it so
	// far (more may join while it begins).
	attempt func([]Key)
	// commit, when set, commits tx in place of tx.Commit: a test makes a
	// commit fail after it happened.
	commit func(ctx context.Context, tx driver.TxCloser) error
	// ended is called once a batch has freed its place or handed it on.
	ended func()
}

// BatchWork is the work of a batch of first arrivals, run inside the one
// transaction that claims all their keys. It writes through tx for each
// item and returns one ItemResult per item, in order; it must not commit or
// roll back tx. A result for each item is required: anything else is a bug,
// reported as an error.
//
// Returning an error, or panicking, rolls the whole batch back; the keeper
// then tries the items again in smaller batches, down to one item, so the
// work must be safe to run again for an item after a rollback, as Work is
// for a retry. The error (a panic: a *PanicError) reaches only the request
// whose work fails alone.
//
// ctx is the batch's: it carries none of the callers' values, and is done
// only when every caller in the batch gave up. Put what the work needs to
// know of a request in its item.
//
// The work's own statements run as written, under the session's planner
// settings: idem's settings apply to idem's statements only.
type BatchWork[T any] func(ctx context.Context, tx driver.Tx, items []T) ([]ItemResult, error)

// ItemResult is the answer of a batch's work for one item.
type ItemResult struct {
	// Outcome is stored with the item's key, committed with the batch and
	// answered to the request.
	Outcome Outcome
	// Err, when set, refuses this item without storing anything: its claim
	// is released inside the batch's transaction, the key stays free for a
	// retry, and Do returns Err. The work must have written nothing for
	// the item, since the rest of the batch commits.
	Err error
}

// BatchConfig configures a Batcher. The zero value is usable.
type BatchConfig struct {
	// MaxBatch bounds the requests one transaction carries: a larger batch
	// spends fewer commits but holds its rows' locks longer and costs more
	// to retry when one request fails. Default 128; bound 1..1000.
	MaxBatch int
	// Concurrency is how many batches run at once, each on a connection of
	// its own. More batches answer sooner when clients are few; fewer make
	// larger batches, and spend fewer transactions, when they are many.
	// Default 2: one batch can run its statements while the other waits
	// for its commit. A batch starts beside running ones only once as many
	// requests wait as they carry on average (see Batcher), since a
	// batch's statements cost about as much for one request as for ten
	// (docs/benchmarks.md, "Group commit"). 1 on SQLite: with one writer a
	// second batch only queues for it, holding requests that would have
	// joined the next batch. Scopes that meet may run up to as many
	// again beside them (see Share). Bound 1..64.
	Concurrency int
	// MaxQueued bounds the requests waiting to be taken into a batch; the
	// next one gets ErrBusy at once, nothing stored. Default 1000; bound
	// 1..100000.
	MaxQueued int
	// MaxWait bounds how long a request waits to be taken into a batch
	// before it gets ErrBusy, nothing stored: a queue that long means the
	// database is not keeping up, and the client is better told to retry.
	// Default 1s; bound 1ms..60s.
	MaxWait time.Duration
	// Share bounds the places one scope's batches (Key.Scope: a tenant)
	// hold while another scope waits for one: ceil(Share × Concurrency),
	// at least one. A scope alone uses every place; beyond its share it
	// takes a free place only while no scope below its share waits. A
	// scope with no batch running is never kept waiting by the others'
	// batches: it takes a place beside them, so that batches may hold up
	// to 2 × Concurrency connections while scopes meet. Default 0.5 (with
	// Concurrency 2, one place each for two tenants); bound 0 < Share ≤ 1.
	Share float64
}

func (c BatchConfig) withDefaults(d driver.Driver) BatchConfig {
	if c.MaxBatch == 0 {
		c.MaxBatch = 128
	}
	if c.Concurrency == 0 {
		c.Concurrency = 2
		if w, ok := driver.Optional[driver.WriterBound](d); ok && w.Writers() > 0 {
			c.Concurrency = min(c.Concurrency, w.Writers())
		}
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = 1000
	}
	if c.MaxWait == 0 {
		c.MaxWait = time.Second
	}
	if c.Share == 0 {
		c.Share = 0.5
	}
	return c
}

func (c BatchConfig) validate() error {
	switch {
	case c.MaxBatch < 1 || c.MaxBatch > 1000:
		return fmt.Errorf("idem: MaxBatch %d is outside 1..1000", c.MaxBatch)
	case c.Concurrency < 1 || c.Concurrency > 64:
		return fmt.Errorf("idem: Concurrency %d is outside 1..64", c.Concurrency)
	case c.MaxQueued < 1 || c.MaxQueued > 100000:
		return fmt.Errorf("idem: MaxQueued %d is outside 1..100000", c.MaxQueued)
	case c.MaxWait < time.Millisecond || c.MaxWait > time.Minute:
		return fmt.Errorf("idem: MaxWait %s is outside 1ms..60s", c.MaxWait)
	case !(c.Share > 0 && c.Share <= 1):
		return fmt.Errorf("idem: Share %v is outside 0 < Share ≤ 1", c.Share)
	}
	return nil
}

// pending is one request from the moment it is submitted until its batch
// answers it. taken and gaveUp are guarded by Batcher.mu; res and err are
// written before done is closed and read only after.
type pending[T any] struct {
	ctx      context.Context // the caller's; its span is linked from the batch's
	lane     *lane[T]        // its scope's
	claimant                 // its key, fingerprint and headers to store
	item     T
	deadline time.Time          // its waits for row locks, over all its attempts, end by then
	queued   trace.Span         // idem.queue, while it waits: ended when taken or given up
	taken    bool               // it is in a batch, which answers it
	gaveUp   bool               // MaxWait or the caller's ctx ended its wait first
	next     chan *gathering[T] // the batch its goroutine is to run (it is the first in it)
	done     chan struct{}
	res      Result
	err      error
}

func (p *pending[T]) answer(res Result, err error) {
	p.res, p.err = res, err
	close(p.done) // a second answer panics here: it would be a bug
}

// NewBatcher returns a Batcher that runs work for the first arrivals of k's
// keys. It starts no goroutine.
func NewBatcher[T any](k *Keeper, work BatchWork[T], cfg BatchConfig) (*Batcher[T], error) {
	if k == nil {
		return nil, errors.New("idem: nil keeper")
	}
	if work == nil {
		return nil, errors.New("idem: nil batch work")
	}
	cfg = cfg.withDefaults(k.d)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &Batcher[T]{k: k, work: work, cfg: cfg, lanes: map[string]*lane[T]{},
		share: max(1, int(math.Ceil(cfg.Share*float64(cfg.Concurrency)-1e-9)))}
	b.idle.L = &b.mu
	return b, nil
}

// Config returns the batcher's configuration with defaults applied.
func (b *Batcher[T]) Config() BatchConfig { return b.cfg }

// Close stops taking requests (Do then gets ErrBusy), lets those already
// queued run in their batches, and returns nil once every batch has
// answered, or ctx's error when ctx ends first (the batches still run to
// their answers). Calling it again waits again.
func (b *Batcher[T]) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.idle.Broadcast()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.running > 0 && ctx.Err() == nil {
		b.idle.Wait()
	}
	if b.running > 0 {
		return fmt.Errorf("idem: close: %d batches still running: %w", b.running, ctx.Err())
	}
	return nil
}

// Do is Keeper.Do with item done by the batcher's work, in a transaction
// shared with the other first arrivals of the moment.
//
// A replay, a reuse (*ReusedError) and a copy that joins an in-process twin
// are answered as Keeper.Do answers them, without a batch. A first arrival
// waits to be taken into a batch, bounded by BatchConfig (ErrBusy), and is
// answered once its batch committed: with the outcome the work gave it, or
// with its ItemResult.Err, nothing stored. When the work fails for it alone
// Do returns what Keeper.Do would: the work's error, a *PanicError, or
// ErrInFlight when a twin in another process held the key past Config.Wait.
//
// Once a request is taken into a batch, Do waits for the batch's answer
// even if ctx ends meanwhile, so that it never says "nothing stored" of a
// request its batch then commits; a batch stops early only when all its
// callers have gone.
func (b *Batcher[T]) Do(ctx context.Context, req Request, item T) (Result, error) {
	return b.DoFunc(ctx, req, func(context.Context) (T, error) { return item, nil })
}

// DoFunc is Do with the item made by makeItem, called only when the request
// goes into a batch: not for a replay, a reuse, or a copy answered by an
// in-process twin. An error from makeItem is returned as is, nothing
// stored; in-process twins waiting on the request then try for themselves.
// idemhttp's Batched decodes a request's body this way, after the checks
// that refuse a reused key.
func (b *Batcher[T]) DoFunc(ctx context.Context, req Request, makeItem func(context.Context) (T, error)) (res Result, err error) {
	ctx, span := b.k.start(ctx, "idem.Do", req.Key)
	defer func() { endSpan(span, res, err) }()
	return b.k.do(ctx, req, func(ctx context.Context, c claimant, lockWait time.Duration) (Result, error) {
		item, err := b.makeItem(ctx, c.key, makeItem)
		if err != nil {
			return Result{}, err
		}
		return b.submit(ctx, c, item, lockWait)
	})
}

// makeItem calls makeItem and turns its panic into a *PanicError, logged
// as a panic of the work is: nothing was stored, and the caller (a server
// carrying other requests) answers it as any failure.
func (b *Batcher[T]) makeItem(ctx context.Context, key Key, makeItem func(context.Context) (T, error)) (item T, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = b.k.panicked(ctx, key, v)
		}
	}()
	return makeItem(ctx)
}

// submit runs a request in a batch of its own when nothing of its scope
// runs or waits and a place is free for it, or queues it, and returns its
// answer.
func (b *Batcher[T]) submit(ctx context.Context, c claimant, item T, lockWait time.Duration) (Result, error) {
	p := &pending[T]{ctx: ctx, claimant: c, item: item, deadline: time.Now().Add(lockWait),
		next: make(chan *gathering[T], 1), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Result{}, fmt.Errorf("%w: the batcher is closed", ErrBusy)
	}
	l := b.lanes[c.key.Scope]
	if l == nil {
		l = &lane[T]{scope: c.key.Scope}
		b.lanes[c.key.Scope] = l
	}
	p.lane = l
	switch {
	case l.waiting == 0 && l.open != nil && len(l.open.batch) < b.cfg.MaxBatch && !b.placeFor(l, b.below(l)) && l.open.join(p):
		// No place for a batch of its own, and its scope's newest batch
		// has not begun yet: it rides in it.
		l.carried++
		b.mu.Unlock()
		if h := b.testHooks.joined; h != nil {
			h(c.key)
		}
		<-p.done
		return p.res, p.err
	case l.running == 0 && l.waiting == 0 && b.placeFor(l, b.below(l)):
		// Nothing of its scope runs or waits, so this request is alone:
		// it runs now. (With one scope: no batch runs, since nothing
		// waits while none runs.)
		b.running++
		l.running++
		l.carried++
		g := b.gather(l, []*pending[T]{p})
		b.mu.Unlock()
		b.lead(g)
		return p.res, p.err
	case b.waiting >= b.cfg.MaxQueued:
		b.forget(l)
		b.mu.Unlock()
		return Result{}, fmt.Errorf("%w: %d requests already wait for a batch (MaxQueued)", ErrBusy, b.cfg.MaxQueued)
	}
	_, p.queued = b.k.tracer.Start(ctx, "idem.queue")
	l.queue = append(l.queue, p)
	if l.waiting++; l.waiting == 1 {
		b.turns = append(b.turns, l)
	}
	b.waiting++
	if b.startable(l, b.below(l)) {
		b.handOn(l)
	}
	waits := !p.taken
	b.mu.Unlock()
	if h := b.testHooks.queued; h != nil && waits {
		h(c.key)
	}

	timer := time.NewTimer(b.cfg.MaxWait)
	defer timer.Stop()
	// A batch that runs long (its rows are locked by another process)
	// must not hold back the requests waiting for company beside it.
	restless := time.NewTimer(b.cfg.MaxWait / 4)
	defer restless.Stop()
	expired, gone, impatient := timer.C, ctx.Done(), restless.C
	for {
		select {
		case <-p.done:
			return p.res, p.err
		case <-impatient:
			impatient = nil
			b.mu.Lock()
			if !p.taken && b.placeFor(l, b.below(l)) {
				b.handOn(l)
			}
			b.mu.Unlock()
		case g := <-p.next:
			b.lead(g)
			<-p.done
			return p.res, p.err
		case <-expired:
			if b.giveUp(p) {
				return Result{}, fmt.Errorf("%w: not taken into a batch within %s (MaxWait)", ErrBusy, b.cfg.MaxWait)
			}
			expired = nil // taken meanwhile: its batch answers it
		case <-gone:
			if b.giveUp(p) {
				return Result{}, ctx.Err()
			}
			gone = nil
		}
	}
}

// giveUp withdraws p from the queue unless it was taken into a batch.
func (b *Batcher[T]) giveUp(p *pending[T]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.taken {
		return false
	}
	l := p.lane
	p.gaveUp = true
	p.queued.End()
	b.waiting--
	if l.waiting--; l.waiting == 0 {
		// Nothing of its scope waits: it leaves the turns, and the
		// given-up requests with it.
		b.turns = slices.DeleteFunc(b.turns, func(o *lane[T]) bool { return o == l })
		clear(l.queue)
		l.queue, l.stale = l.queue[:0], 0
		b.forget(l)
		return true
	}
	// Given-up requests stay in the queue until a batch passes them; when
	// they are most of it, drop them now, so that the queue stays bounded
	// however long the batches take.
	if l.stale++; l.stale > len(l.queue)/2 {
		n := 0
		for _, q := range l.queue {
			if !q.gaveUp {
				l.queue[n] = q
				n++
			}
		}
		clear(l.queue[n:])
		l.queue, l.stale = l.queue[:n], 0
	}
	return true
}

// forget drops l once nothing of its scope runs or waits, so that the
// lanes are only the scopes of the moment. b.mu is held.
func (b *Batcher[T]) forget(l *lane[T]) {
	if l.running == 0 && l.waiting == 0 {
		delete(b.lanes, l.scope)
	}
}

// lead runs g's batch in the calling goroutine, then hands what waits to
// the oldest waiting request's goroutine of the next scope in turn whose
// requests may start a batch (startable), or frees its place among the
// Concurrency batches.
func (b *Batcher[T]) lead(g *gathering[T]) {
	defer func() {
		b.mu.Lock()
		l := g.lane
		b.running--
		l.running--
		l.carried -= len(g.batch)
		if next := b.nextInTurn(); next != nil {
			b.handOn(next)
		} else if b.running == 0 {
			b.idle.Broadcast()
		}
		b.forget(l)
		b.mu.Unlock()
		if h := b.testHooks.ended; h != nil {
			h()
		}
	}()
	b.run(g)
}

// gather makes batch l's newest, open to the requests that arrive until
// its transaction begins. b.mu is held.
func (b *Batcher[T]) gather(l *lane[T], batch []*pending[T]) *gathering[T] {
	// The batch runs under a context of its own, ended only when every
	// caller in it has gone: one caller's hang-up must not roll back its
	// neighbours. It carries the batch's one scope (ScopeFrom), so that
	// what begins its transaction can tell whose it is.
	ctx, cancel := context.WithCancel(withScope(context.Background(), l.scope))
	g := &gathering[T]{lane: l, ctx: ctx, cancel: cancel}
	for _, p := range batch {
		g.join(p)
	}
	l.open = g
	return g
}

// join adds p to g's batch unless every caller in it has gone (its
// context ended). b.mu is held.
func (g *gathering[T]) join(p *pending[T]) bool {
	for {
		n := g.left.Load()
		if n == 0 && len(g.batch) > 0 {
			return false
		}
		if g.left.CompareAndSwap(n, n+1) {
			break
		}
	}
	p.taken = true
	g.batch = append(g.batch, p)
	g.stops = append(g.stops, context.AfterFunc(p.ctx, func() {
		if g.left.Add(-1) == 0 {
			g.cancel()
		}
	}))
	return true
}

// seal closes g to arrivals and returns its batch, final from then on.
func (b *Batcher[T]) seal(g *gathering[T]) []*pending[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g.lane.open == g {
		g.lane.open = nil
	}
	return g.batch
}

// placeFor reports whether a batch of l's scope may take a place now,
// below being b.below(l): one of the Concurrency places while one is
// free, unless l's scope holds its share of them and a scope below its
// share waits; or, for a scope with no batch running, a place beside
// them, up to as many again. b.mu is held.
func (b *Batcher[T]) placeFor(l *lane[T], below int) bool {
	switch {
	case b.running < b.cfg.Concurrency:
		return l.running < b.share || below == 0
	case l.running == 0:
		return b.running < 2*b.cfg.Concurrency
	}
	return false
}

// below counts the scopes other than l's below their share whose requests
// wait. b.mu is held.
func (b *Batcher[T]) below(l *lane[T]) int {
	n := 0
	for _, o := range b.turns {
		if o != l && o.running < b.share {
			n++
		}
	}
	return n
}

// startable reports whether what waits of l's scope should start a batch
// now, below being b.below(l). It does whenever a place is free for it
// and none of its scope's batches runs; beside its scope's running
// batches only once as many of its requests wait as one of them carries
// on average, so that the database spends its per-transaction cost on
// batches of about one size rather than on a stream of small ones. b.mu
// is held.
func (b *Batcher[T]) startable(l *lane[T], below int) bool {
	if l.waiting == 0 || !b.placeFor(l, below) {
		return false
	}
	return l.running == 0 || l.waiting*l.running >= l.carried
}

// nextInTurn returns the first scope in turn whose requests are startable,
// or nil. b.mu is held.
func (b *Batcher[T]) nextInTurn() *lane[T] {
	needy := 0 // scopes below their share whose requests wait
	for _, l := range b.turns {
		if l.running < b.share {
			needy++
		}
	}
	for _, l := range b.turns {
		below := needy
		if l.running < b.share {
			below--
		}
		if b.startable(l, below) {
			return l
		}
	}
	return nil
}

// handOn starts a batch of what waits of l's scope, run by its oldest
// waiting request's goroutine. b.mu is held and l.waiting is above 0.
func (b *Batcher[T]) handOn(l *lane[T]) {
	next := b.take(l)
	b.running++
	l.running++
	l.carried += len(next)
	next[0].next <- b.gather(l, next)
}

// take removes up to MaxBatch waiting requests from the head of l's queue
// and sends l's scope to the back of the turns, or out of them when
// nothing of it waits any more. b.mu is held and l.waiting is above 0.
func (b *Batcher[T]) take(l *lane[T]) []*pending[T] {
	batch := make([]*pending[T], 0, min(l.waiting, b.cfg.MaxBatch))
	i := 0
	for ; i < len(l.queue) && len(batch) < b.cfg.MaxBatch; i++ {
		p := l.queue[i]
		if p.gaveUp {
			l.stale--
			continue
		}
		p.taken = true
		p.queued.End()
		batch = append(batch, p)
	}
	n := copy(l.queue, l.queue[i:])
	clear(l.queue[n:])
	l.queue = l.queue[:n]
	l.waiting -= len(batch)
	b.waiting -= len(batch)
	b.turns = slices.DeleteFunc(b.turns, func(o *lane[T]) bool { return o == l })
	if l.waiting > 0 {
		b.turns = append(b.turns, l)
	} else {
		clear(l.queue) // given-up requests only
		l.queue, l.stale = l.queue[:0], 0
	}
	return batch
}

// run runs g's batch and answers each of its requests once.
func (b *Batcher[T]) run(g *gathering[T]) {
	ctx, span := b.k.tracer.Start(g.ctx, "idem.batch")
	defer func() {
		batch := b.seal(g)
		for _, stop := range g.stops {
			stop()
		}
		g.cancel()
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("idem.batch.size", len(batch)))
			for _, p := range batch {
				span.AddLink(trace.Link{SpanContext: trace.SpanContextFromContext(p.ctx)})
			}
		}
		span.End()
		// A panic outside the work is a bug of the batcher's. It goes on to
		// the caller, but the batch's other requests must not wait forever.
		if v := recover(); v != nil {
			for _, p := range batch {
				select {
				case <-p.done:
				default:
					p.answer(Result{}, fmt.Errorf("idem: the batch ended without an answer: %v", v))
				}
			}
			panic(v)
		}
	}()
	b.attempt(ctx, nil, g)
}

// attempt tries ps in one transaction (g's batch when g is set: the
// batch's first attempt). When that fails for a reason one of them may
// have caused, it tries each half in turn, down to single requests, which
// get the error.
func (b *Batcher[T]) attempt(ctx context.Context, ps []*pending[T], g *gathering[T]) {
	ps, answers, whole, err := b.try(ctx, ps, g)
	switch {
	case err == nil:
		for i, p := range ps {
			p.answer(answers[i].res, answers[i].err)
		}
	case len(ps) == 1 || whole || ctx.Err() != nil || !itemMayCause(err):
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetStatus(codes.Error, err.Error())
		}
		for _, p := range ps {
			p.answer(Result{}, err)
		}
	default:
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent("idem.batch.split", trace.WithAttributes(
				attribute.Int("idem.batch.size", len(ps)), attribute.String("error", err.Error())))
		}
		half := len(ps) / 2
		b.attempt(ctx, ps[:half], nil)
		b.attempt(ctx, ps[half:], nil)
	}
}

// itemMayCause reports whether err may be one request's doing, so that
// trying the requests apart can help: not a context that ended, nor a
// database that is unavailable (a lost connection, a closed pool), which
// fail every part alike. A failed commit is the exception (try marks it):
// it may have happened, and the parts' claims then find their records.
func itemMayCause(err error) bool {
	var c *commitError
	switch {
	case errors.As(err, &c):
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, driver.ErrUnavailable):
		return false
	}
	return true
}

// commitError is a batch's failed commit, which may have happened.
type commitError struct{ err error }

func (e *commitError) Error() string { return e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// try is one transaction for ps, or for g's batch as it is once the
// transaction has begun: the shared core (Keeper.transact), then the
// commit. It returns the requests it tried. whole is set when the error
// is not any request's doing (the transaction could not begin), so that
// splitting cannot help.
func (b *Batcher[T]) try(ctx context.Context, ps []*pending[T], g *gathering[T]) (_ []*pending[T], answers []answer, whole bool, err error) {
	k := b.k
	if g != nil {
		b.mu.Lock()
		ps = g.batch[:len(g.batch):len(g.batch)] // those who joined so far
		b.mu.Unlock()
	}
	if h := b.testHooks.attempt; h != nil {
		keys := make([]Key, len(ps))
		for i, p := range ps {
			keys[i] = p.key
		}
		h(keys)
	}
	// Those who join later came later: their deadlines are later.
	tx, err := k.d.Begin(ctx, driver.BeginOptions{LockTimeout: lockWait(ps)})
	if g != nil {
		ps = b.seal(g)
	}
	if err != nil {
		return ps, nil, true, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op

	cs := make([]claimant, len(ps))
	for i, p := range ps {
		cs[i] = p.claimant
	}
	answers, write, err := k.transact(ctx, tx, cs, func(ctx context.Context, todo []int) ([]ItemResult, error) {
		items := make([]T, len(todo))
		for j, i := range todo {
			items[j] = ps[i].item
		}
		return b.runWork(ctx, tx, ps, items)
	})
	if err != nil || !write {
		return ps, answers, false, err // the rollback ends it, releasing refused claims
	}
	failpoint.Hit("keeper.before_commit")
	commit := tx.Commit
	if h := b.testHooks.commit; h != nil {
		commit = func(ctx context.Context) error { return h(ctx, tx) }
	}
	if err := commit(ctx); err != nil {
		// The commit may have happened all the same (the connection was
		// lost on the way back): the retry that splitting makes then finds
		// the records and answers them as replays of their own outcomes.
		// Not when the database said it committed without the standbys it
		// must wait for: that replay would acknowledge what a failover
		// may lose, so every request of the batch gets the error.
		if errors.Is(err, ErrUnreplicated) {
			return ps, nil, true, err
		}
		return ps, nil, false, &commitError{err}
	}
	return ps, answers, false, nil
}

// lockWait bounds the waits of ps's transaction for row locks. Each
// request's waits, over all the attempts its batch splits into, end by its
// deadline (Config.Wait after it came, as in Do). A batch of several takes
// half of what its most pressed request has left, so that when a key held
// in another process makes it wait, the halves it splits into still have
// time: the held key's request gets ErrInFlight within its bound, and its
// neighbours commit.
func lockWait[T any](ps []*pending[T]) time.Duration {
	left := time.Until(ps[0].deadline)
	for _, p := range ps[1:] {
		left = min(left, time.Until(p.deadline))
	}
	if len(ps) > 1 {
		left /= 2
	}
	return max(left, time.Millisecond)
}

// runWork runs the batch's work. A panic is recovered: for a single
// request it becomes that request's *PanicError, logged as Do logs it; for
// several it is an error that splits the batch, not logged, since it is
// not yet known whose it is.
func (b *Batcher[T]) runWork(ctx context.Context, tx driver.Tx, ps []*pending[T], items []T) (results []ItemResult, err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if len(ps) == 1 {
			err = b.k.panicked(ctx, ps[0].key, v)
			return
		}
		err = fmt.Errorf("idem: batch work panicked: %v", v)
	}()
	return b.work(ctx, tx, items)
}

type scopeKey struct{}

func withScope(ctx context.Context, scope string) context.Context {
	return context.WithValue(ctx, scopeKey{}, scope)
}

// ScopeFrom returns the scope (Key.Scope: the tenant) of the Batcher's
// batch whose transaction ctx belongs to, and whether ctx is one. A
// batch carries one scope's requests, so a driver wrapper can share the
// database among scopes by it (the service's per-tenant write gate).
func ScopeFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(scopeKey{}).(string)
	return s, ok
}
