package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/failpoint"
	"github.com/idemhq/idem/internal/gate"
)

// Batcher coalesces concurrent first arrivals into one transaction ("group
// commit"), up to BatchConfig.MaxBatch requests a transaction. Each request
// is still all-or-nothing and answered only once its batch committed:
// Batcher.Do keeps everything Keeper.Do does but the transaction of its
// own. A batch that fails for a reason one of its requests may cause is
// tried again in halves, down to single requests.
//
// It has no goroutine and no timer of its own. A batch carries one
// scope's (Key.Scope: the tenant's) requests: a request joins its scope's
// batch that has not begun; failing that, while its scope runs fewer than
// Concurrency batches, it starts one and runs it in its own goroutine;
// otherwise it waits, and its scope's next batch is run by the oldest
// waiting request's goroutine. Before it begins, a batch takes a slot of
// the gate that shares the database among scopes, the one authority on
// which scope goes next. docs/architecture.md, "Group commit", says more,
// and what the knobs trade.
type Batcher[T any] struct {
	k    *Keeper
	work BatchWork[T]
	cfg  BatchConfig

	gate   *gate.Gate                   // a batch's slot among the scopes' transactions
	waited func(tenant, outcome string) // counts the gate's waits, or nil

	mu     sync.Mutex
	idle   sync.Cond                // adm.running fell to 0: for Close
	adm    admission[*pending[T]]   // who is taken into which batch, and when (admit.go)
	open   map[string]*gathering[T] // each scope's newest batch while it may be joined
	closed bool

	testHooks batchHooks
}

// gathering is a batch from when it is taken until its transaction has
// begun, open meanwhile to arrivals of its scope (see submit). Its batch is
// guarded by Batcher.mu, and final once it is no longer its scope's open.
type gathering[T any] struct {
	scope string
	batch []*pending[T]
	*callers
}

// batchHooks let tests see the batches without sleeping; set only by
// export_test.go, before the batcher is used, and nil in production.
type batchHooks struct {
	queued  func(Key)   // a request waits in the queue
	joined  func(Key)   // a request joined a batch that had not begun
	attempt func([]Key) // a transaction is to begin, with the keys in it so far
	// commit, when set, is called in place of the batch's commit (its
	// outcomes' statement and COMMIT), which it is given.
	commit func(ctx context.Context, commit func(context.Context) error) error
}

// BatchWork is the work of a batch of first arrivals, run inside the one
// transaction that claims all their keys. It writes through tx for each
// item and returns one ItemResult per item, in order; it must not commit or
// roll back tx. A result for each item is required: anything else is a bug,
// reported as an error.
//
// Returning an error, or panicking, rolls the whole batch back; the items
// are then tried again in smaller batches, down to one, so the work must be
// safe to run again for an item after a rollback. The error (a panic: a
// *PanicError) reaches only the request whose work fails alone.
//
// ctx is the batch's: it carries none of the callers' values, and is done
// only when every caller in the batch gave up. Put what the work needs to
// know of a request in its item. The work's statements run under the
// session's own planner settings.
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

// pending is one request from the moment it is submitted until its batch
// answers it. queued is guarded by Batcher.mu; res and err are written
// before done is closed and read only after.
type pending[T any] struct {
	ctx      context.Context // the caller's; its span is linked from the batch's
	claimant                 // its key, fingerprint and headers to store
	item     T
	deadline time.Time          // its waits for row locks, over all its attempts, end by then
	queued   trace.Span         // idem.queue, while it waits: ended when taken or given up
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
	b := &Batcher[T]{k: k, work: work, cfg: cfg, adm: newAdmission[*pending[T]](cfg.MaxBatch, cfg.MaxQueued, cfg.Concurrency), open: map[string]*gathering[T]{}}
	if h, ok := driver.Optional[gate.Holder](k.d); ok {
		b.gate, b.waited = h.WriteGate()
	} else {
		refuse := fmt.Errorf("%w: no place for a batch within %s (MaxWait)", ErrBusy, cfg.MaxWait)
		var err error
		if b.gate, err = gate.New(2*cfg.Concurrency, cfg.Share, cfg.MaxWait, refuse); err != nil {
			return nil, err
		}
	}
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
	for b.adm.running > 0 && ctx.Err() == nil {
		b.idle.Wait()
	}
	if b.adm.running > 0 {
		return fmt.Errorf("idem: close: %d batches still running: %w", b.adm.running, ctx.Err())
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

// makeItem calls makeItem, its panic a *PanicError as the work's is:
// nothing was stored.
func (b *Batcher[T]) makeItem(ctx context.Context, key Key, makeItem func(context.Context) (T, error)) (item T, err error) {
	defer b.k.catch(ctx, &err, key)
	return makeItem(ctx)
}

// submit admits a request (admit.go: it joins its scope's open batch,
// starts a batch, waits or is refused) and returns its answer.
func (b *Batcher[T]) submit(ctx context.Context, c claimant, item T, lockWait time.Duration) (Result, error) {
	p := &pending[T]{ctx: ctx, claimant: c, item: item, deadline: time.Now().Add(lockWait), done: make(chan struct{})}
	scope := c.key.Scope
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Result{}, fmt.Errorf("%w: the batcher is closed", ErrBusy)
	}
	admitted, batch := b.adm.arrive(scope, p)
	for admitted == joins && !b.open[scope].join(p) {
		b.closeOpen(scope) // every caller in it has gone: it takes nobody
		admitted, batch = b.adm.arrive(scope, p)
	}
	switch admitted {
	case joins:
		b.adm.join(scope)
		b.mu.Unlock()
		if h := b.testHooks.joined; h != nil {
			h(c.key)
		}
		<-p.done
		return p.res, p.err
	case starts:
		g := b.gather(scope, batch)
		b.mu.Unlock()
		b.lead(g)
		return p.res, p.err
	case busy:
		b.mu.Unlock()
		return Result{}, fmt.Errorf("%w: %d requests already wait for a batch (MaxQueued)", ErrBusy, b.cfg.MaxQueued)
	}
	p.next = make(chan *gathering[T], 1)
	_, p.queued = b.k.span(ctx, "idem.queue")
	b.mu.Unlock()
	if h := b.testHooks.queued; h != nil {
		h(c.key)
	}
	for gone := ctx.Done(); ; {
		select {
		case <-p.done: // handed a batch another leads
			return p.res, p.err
		case g := <-p.next: // handed a batch to lead
			b.lead(g)
			return p.res, p.err
		case <-gone:
			b.mu.Lock()
			left := b.adm.leave(scope, p)
			b.mu.Unlock()
			if left {
				p.queued.End()
				return Result{}, ctx.Err()
			}
			gone = nil // handed a batch meanwhile: it answers
		}
	}
}

// gather makes batch its scope's open batch, which one of its requests'
// goroutines leads. b.mu is held.
func (b *Batcher[T]) gather(scope string, batch []*pending[T]) *gathering[T] {
	ctxs := make([]context.Context, len(batch))
	for i, p := range batch {
		ctxs[i] = p.ctx
		if p.queued != nil {
			p.queued.End()
		}
	}
	// The batch's context carries its scope (ScopeFrom).
	g := &gathering[T]{scope: scope, batch: batch, callers: newCallers(withScope(context.Background(), scope))}
	g.callers.join(ctxs...)
	b.open[scope] = g
	return g
}

// lead runs g's batch in the calling goroutine, then hands each batch of
// its scope that may start now to the goroutine that leads it.
func (b *Batcher[T]) lead(g *gathering[T]) {
	defer func() {
		b.mu.Lock()
		for _, next := range b.adm.end(g.scope, len(g.batch)) {
			next[0].next <- b.gather(g.scope, next)
		}
		if b.adm.running == 0 {
			b.idle.Broadcast()
		}
		b.mu.Unlock()
	}()
	b.run(g)
}

// join adds p to g's batch unless every caller in it has gone. b.mu is
// held.
func (g *gathering[T]) join(p *pending[T]) bool {
	if !g.callers.join(p.ctx) {
		return false
	}
	g.batch = append(g.batch, p)
	return true
}

// closeOpen closes scope's open batch to arrivals. b.mu is held.
func (b *Batcher[T]) closeOpen(scope string) {
	delete(b.open, scope)
	b.adm.closeOpen(scope)
}

// seal closes g to arrivals and returns its batch, final from then on.
func (b *Batcher[T]) seal(g *gathering[T]) []*pending[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open[g.scope] == g {
		b.closeOpen(g.scope)
	}
	return g.batch
}

// run runs g's batch and answers each of its requests once.
func (b *Batcher[T]) run(g *gathering[T]) {
	ctx, span := b.k.span(g.ctx, "idem.batch")
	release, err := b.gate.Acquire(ctx, g.scope, b.waited)
	defer func() {
		batch := b.seal(g)
		g.end()
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
	if err != nil { // no slot within MaxWait, or every caller gone
		for _, p := range b.seal(g) {
			p.answer(Result{}, err)
		}
		return
	}
	defer release()
	b.attempt(gate.WithHeld(ctx, b.gate), nil, g, nil)
}

// attempt tries ps in one transaction (g's batch when g is set: the
// batch's first attempt). When that fails for a reason one of them may
// have caused, it tries each half in turn, down to single requests, which
// get the error. unsure is set when an earlier attempt of ps sent a
// commit whose answer was lost (ErrCommitUnknown): a failure that comes
// before this attempt's claims could find what that commit stored says
// nothing of it, so the requests get unsure, never "nothing stored".
func (b *Batcher[T]) attempt(ctx context.Context, ps []*pending[T], g *gathering[T], unsure error) {
	ps, answers, whole, err := b.try(ctx, ps, g)
	if err != nil && unsure != nil && (whole || !itemMayCause(err)) {
		err = unsure
	}
	if errors.Is(err, ErrCommitUnknown) {
		unsure = err
	}
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
		b.attempt(ctx, ps[:half], nil, unsure)
		b.attempt(ctx, ps[half:], nil, unsure)
	}
}

// itemMayCause reports whether err may be one request's doing, so that
// trying the requests apart can help: a failed commit (it may have
// happened, and the halves' claims then find their records), a statement
// timeout (one request's slow work), but not an ended context nor an
// unavailable database, which fail every half alike.
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
	answers, store, err := k.transact(ctx, tx, cs, nil, func(ctx context.Context, todo []int) ([]ItemResult, error) {
		items := make([]T, len(todo))
		for j, i := range todo {
			items[j] = ps[i].item
		}
		return b.runWork(ctx, tx, ps, items)
	})
	if err != nil || store == nil {
		return ps, answers, false, err // the rollback ends it, releasing refused claims
	}
	failpoint.Hit("keeper.before_commit")
	commit := func(ctx context.Context) error { return driver.RecordCommit(ctx, k.d, tx, store) }
	if h := b.testHooks.commit; h != nil {
		inner := commit
		commit = func(ctx context.Context) error { return h(ctx, inner) }
	}
	if err := commit(ctx); err != nil {
		// A commit lost on the way back (ErrCommitUnknown) may have
		// happened: the halves' claims then find the records and replay
		// them. Not one that
		// happened without its standbys: a replay would acknowledge what
		// a failover may lose.
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

// runWork runs the batch's work, its panic a *PanicError for a single
// request, and for several an error that splits the batch, not logged,
// since it is not yet known whose it is.
func (b *Batcher[T]) runWork(ctx context.Context, tx driver.Tx, ps []*pending[T], items []T) (results []ItemResult, err error) {
	if len(ps) == 1 {
		defer b.k.catch(ctx, &err, ps[0].key)
	} else {
		defer b.k.catch(ctx, &err)
	}
	return b.work(ctx, tx, items)
}

type scopeKey struct{}

func withScope(ctx context.Context, scope string) context.Context {
	return context.WithValue(ctx, scopeKey{}, scope)
}

// ScopeFrom returns the scope (Key.Scope: the tenant) of the Batcher's
// batch whose transaction ctx belongs to, and whether ctx is one. A
// batch carries one scope's requests, so a driver wrapper can tell whose
// work a transaction is (the batch has already taken its slot of the
// gate that shares the database among scopes).
func ScopeFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(scopeKey{}).(string)
	return s, ok
}
