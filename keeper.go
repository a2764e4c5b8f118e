package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/benchknob"
	"github.com/idemhq/idem/internal/failpoint"
	"github.com/idemhq/idem/internal/tracing"
	"github.com/idemhq/idem/seal"
)

// Keeper claims keys, runs work once, and stores and replays outcomes.
type Keeper struct {
	d   driver.Driver
	cfg Config

	mu      sync.Mutex
	flights map[driver.KeyID]*flight

	tracer   trace.Tracer
	spansOff bool // the TracerProvider is the no-op one (span)
	reads    reads

	testHooks testHooks
}

// testHooks let tests see inside the keeper without sleeping; set only by
// export_test.go, before the keeper is used, and nil in production.
type testHooks struct {
	joined func(Key) // a copy is to wait for an in-process twin's flight
}

// flight is one in-process attempt at a key that later copies join instead
// of each holding a connection while they wait on the database. res and err
// are written before done is closed and read only after.
type flight struct {
	done    chan struct{}
	waiters int
	fp      []byte
	res     Result
	err     error
}

// errFlightAbandoned is a flight's answer until its attempt returns: twins
// woken by an attempt that never returned (it panicked outside the work, or
// its goroutine exited) see a failure that stored nothing, and try again.
var errFlightAbandoned = errors.New("idem: the attempt at this key ended without an answer")

// New returns a Keeper on d. The database must be migrated.
func New(d driver.Driver, cfg Config) (*Keeper, error) {
	if d == nil {
		return nil, errors.New("idem: nil driver")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rb, _ := driver.Optional[driver.KeyReadBatcher](d)
	if benchknob.Off("coalesce") {
		rb = nil
	}
	_, spansOff := cfg.TracerProvider.(tracenoop.TracerProvider)
	return &Keeper{d: d, cfg: cfg, flights: make(map[driver.KeyID]*flight),
		tracer: cfg.TracerProvider.Tracer(tracing.Module), spansOff: spansOff,
		reads: newReads(d, rb)}, nil
}

// Driver returns the driver the keeper writes through.
func (k *Keeper) Driver() driver.Driver { return k.d }

// Config returns the keeper's configuration with defaults applied.
func (k *Keeper) Config() Config { return k.cfg }

// Do runs work once for req's key, in a transaction it begins and commits,
// together with the key's claim and the storage of its outcome.
//
// A copy of a completed request gets the stored outcome with Replayed set. A
// copy with a different body gets a *ReusedError. A copy that arrives past
// Config.Retention and within Config.Memory gets ErrKeyExpired, nothing
// run. A copy that arrives while the first still runs waits up to
// Config.Wait, then replays or gets ErrInFlight. An error returned by work rolls everything back and is
// returned as is.
//
// A panic in work is recovered, not passed on: the transaction rolls back
// (neither the claim nor anything work wrote commits), the panic is logged
// on Config.Logger with the key and the stack, Do returns a *PanicError
// (errors.Is(err, ErrPanicked)), and twins waiting in this process wake at
// once and try for themselves. Do does not re-panic because the keeper sits
// in servers and consumers that carry other requests' transactions: one
// handler's bug must cost its own request a 500 and a retry, not the
// process, which is how net/http treats a handler's panic too. Callers
// answer it as any failure that stored nothing (idemhttp and the webhook
// intake answer 500, so the sender retries).
func (k *Keeper) Do(ctx context.Context, req Request, work Work) (res Result, err error) {
	ctx, span := k.start(ctx, "idem.Do", req.Key)
	defer func() { endSpan(span, res, err) }()
	return k.do(ctx, req, func(ctx context.Context, c claimant, lockWait time.Duration) (Result, error) {
		return k.run(ctx, c, work, lockWait)
	})
}

// attempt is one try at a key that no live record answered and no
// in-process twin holds: Do's runs the work in a transaction of its own, a
// Batcher's puts the request in a batch. lockWait bounds its waits for a
// twin's row in the database.
type attempt func(ctx context.Context, c claimant, lockWait time.Duration) (Result, error)

// do is what Do and Batcher.Do share: the key's checks, the fast-path read
// of a committed record, and the in-process flights; try is the one step in
// which they differ.
func (k *Keeper) do(ctx context.Context, req Request, try attempt) (Result, error) {
	fp, err := k.prepare(&req)
	if err != nil {
		return Result{}, err
	}
	id := req.Key.id()

	// A completed record is immutable until it expires: a plain read
	// answers a duplicate. It decides no race: a miss goes on to the
	// claim, where the constraint decides.
	if k.reads.first() {
		rec, err := k.reads.get(ctx, id)
		switch {
		case err == nil && rec.ExpiresAt.After(k.cfg.Clock()):
			k.reads.note(true)
			return k.replay(ctx, req.Key, rec, fp, k.cfg.Clock())
		case err != nil && !errors.Is(err, driver.ErrNotFound) && !errors.Is(err, errReadSkipped):
			return Result{}, err
		}
	}

	// A Sealer that writes the first time it seals for a tenant (a new
	// data key) does so now, before the attempt's transaction holds
	// SQLite's one writer, or a PostgreSQL connection (seal.Preparer).
	if p, ok := k.cfg.Sealer.(seal.Preparer); ok {
		if err := p.Prepare(ctx, req.Key.Scope); err != nil {
			return Result{}, fmt.Errorf("idem: prepare to seal tenant %q's outcomes: %w", req.Key.Scope, err)
		}
	}

	// One bound for the whole call, in real time (not Config.Clock, the
	// records' clock): waiting for an in-process twin and then for the
	// database's row lock together never exceed Config.Wait.
	lockWait := k.cfg.Wait
	waitUntil := time.Now().Add(k.cfg.Wait)
	var deadline <-chan time.Time // made by the first wait for a twin
	for {
		k.mu.Lock()
		f, running := k.flights[id]
		if !running {
			f = &flight{done: make(chan struct{}), fp: fp, err: errFlightAbandoned}
			k.flights[id] = f
			k.mu.Unlock()
			return k.lead(ctx, id, f, claimant{key: req.Key, fp: fp, keep: req.StoreHeaders, storeBody: req.StoreBody}, try, lockWait)
		}
		if f.waiters >= k.cfg.MaxWaiters {
			k.mu.Unlock()
			return Result{}, ErrInFlight
		}
		f.waiters++
		k.mu.Unlock()
		if k.testHooks.joined != nil {
			k.testHooks.joined(req.Key)
		}

		if deadline == nil {
			t := time.NewTimer(time.Until(waitUntil))
			defer t.Stop()
			deadline = t.C
		}
		_, wait := k.span(ctx, "idem.wait")
		select {
		case <-f.done:
			wait.End()
		case <-deadline:
			wait.End()
			return Result{}, ErrInFlight
		case <-ctx.Done():
			wait.End()
			return Result{}, ctx.Err()
		}
		if f.err != nil { // the twin stored nothing: this copy tries, within its wait
			lockWait = max(time.Millisecond, time.Until(waitUntil))
			continue
		}
		if string(f.fp) != string(fp) {
			return Result{}, &ReusedError{Key: req.Key, Stored: f.res.Outcome}
		}
		res := f.res
		res.Replayed = true
		if req.StoreBody != nil { // the twin's answer is what was stored
			body, err := req.StoreBody(res.Body)
			if err != nil {
				return Result{}, err
			}
			res.Body = body
		}
		return res, nil
	}
}

// lead makes the attempt that the flight's twins wait on, and lets them go
// however it ends: the flight is removed and done closed even if run
// panics, so no twin waits out Config.Wait for an attempt that is over, and
// no later copy in this process finds the key in flight.
func (k *Keeper) lead(ctx context.Context, id driver.KeyID, f *flight, c claimant, try attempt, lockWait time.Duration) (Result, error) {
	defer func() {
		k.mu.Lock()
		delete(k.flights, id)
		k.mu.Unlock()
		close(f.done)
	}()
	f.res, f.err = try(ctx, c, lockWait)
	_, reused := errors.AsType[*ReusedError](f.err)
	if f.err == nil || reused {
		k.reads.note(f.res.Replayed || reused)
	}
	return f.res, f.err
}

// DoTx is Do inside the caller's transaction, which must be READ
// COMMITTED and must not have written before its first claim (reads
// before it are fine, and so are further DoTx calls after it): a replay
// does not run work, but what the caller wrote before would commit with
// it; and under REPEATABLE READ the claim cannot see a twin's outcome. On PostgreSQL both are checked in the claim's round trip
// and a transaction that breaks them gets ErrClaimNotFirst, nothing
// claimed; SQLite cannot see what a transaction wrote, so there the rule
// is the caller's to keep. DoTx does not commit: the key, the work and the
// outcome are stored when the caller commits. A replay does not run work
// and writes nothing. A copy in flight in another transaction is waited
// for up to Config.Wait, as in Do, then ErrInFlight (on PostgreSQL the
// claim sets its own lock_timeout and restores the transaction's after
// it). A panic in work is recovered and returned as a *PanicError, as in
// Do; on that error, as on any other, the caller must roll back. A nil tx,
// or one of another database than the keeper's, is refused before
// anything runs (driver.ErrNoTx, driver.ErrWrongDialect, wrapped).
func (k *Keeper) DoTx(ctx context.Context, tx driver.Tx, req Request, work Work) (res Result, err error) {
	if err := driver.CheckTx(k.d, tx); err != nil {
		return Result{}, fmt.Errorf("idem: %w", err)
	}
	ctx, span := k.start(ctx, "idem.DoTx", req.Key)
	defer func() { endSpan(span, res, err) }()
	fp, err := k.prepare(&req)
	if err != nil {
		return Result{}, err
	}
	// The caller's transaction: the claim checks that it comes first and
	// bounds its wait for a twin's row by Wait, as Do's does.
	guard := &driver.ClaimGuard{LockTimeout: k.cfg.Wait}
	res, store, err := k.claimAndWork(ctx, tx, claimant{key: req.Key, fp: fp, keep: req.StoreHeaders, storeBody: req.StoreBody}, work, guard)
	if errors.Is(err, driver.ErrClaimNotFirst) {
		err = fmt.Errorf("idem: DoTx: %w", err)
	}
	if err != nil || store == nil {
		return res, err
	}
	if err := driver.RecordBatch(ctx, k.d, tx, store); err != nil {
		return Result{}, err
	}
	return res, nil
}

func (k *Keeper) prepare(req *Request) ([]byte, error) {
	if req.Key.Key == "" {
		return nil, ErrKeyMissing
	}
	if err := checkKey(req.Key.Key); err != nil {
		return nil, err
	}
	if req.Fingerprint != nil {
		return req.Fingerprint, nil
	}
	return Fingerprint(req.Key.Operation, req.Body, k.cfg.IgnoreFields...)
}

// run is one attempt in a transaction of the keeper's own.
// lockWait bounds its wait for a twin's row in the database.
func (k *Keeper) run(ctx context.Context, c claimant, work Work, lockWait time.Duration) (Result, error) {
	tx, err := k.d.Begin(ctx, driver.BeginOptions{LockTimeout: lockWait})
	if err != nil {
		return Result{}, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	res, store, err := k.claimAndWork(ctx, tx, c, work, nil)
	if err != nil || store == nil {
		return res, err
	}
	failpoint.Hit("keeper.before_commit")
	if err := driver.RecordCommit(ctx, k.d, tx, store); err != nil {
		return Result{}, err
	}
	return res, nil
}

// claimAndWork is one request's claim → work in tx: the core Do and DoTx
// share with the Batcher (transact), for a batch of one. store is the
// outcome to store, nil when there is none (a replay). guard is set when
// tx is the caller's (DoTx).
func (k *Keeper) claimAndWork(ctx context.Context, tx driver.Tx, c claimant, work Work, guard *driver.ClaimGuard) (Result, *driver.KeyRecordBatchParams, error) {
	answers, store, err := k.transact(ctx, tx, []claimant{c}, guard, func(ctx context.Context, _ []int) ([]ItemResult, error) {
		out, err := k.runWork(ctx, tx, c.key, work)
		return []ItemResult{{Outcome: out}}, err
	})
	if err != nil {
		return Result{}, nil, err
	}
	return answers[0].res, store, answers[0].err
}

// claimant is one request of a transaction: its key, its fingerprint and
// what of its outcome to store (Request.StoreHeaders, Request.StoreBody).
type claimant struct {
	key       Key
	fp        []byte
	keep      []string
	storeBody func([]byte) ([]byte, error)
}

// answer is one request's answer in a transaction that committed.
type answer struct {
	res Result
	err error
}

// transact is the claim → work → record core of Do, DoTx and the
// Batcher, in tx: it claims every key in one statement, answers those a
// live record holds, runs work for the claimed ones (todo: their places
// in cs, in order) and returns in store their outcomes and the refused
// ones' claims to release, for one statement. The caller stores them
// (driver.RecordCommit with the commit, or RecordBatch in a caller's
// transaction); when store is nil there is nothing to store and it rolls
// back, which also releases refused claims. guard is the claim's when tx
// is the caller's own (DoTx), else nil.
func (k *Keeper) transact(ctx context.Context, tx driver.Tx, cs []claimant, guard *driver.ClaimGuard, work func(ctx context.Context, todo []int) ([]ItemResult, error)) (answers []answer, store *driver.KeyRecordBatchParams, err error) {
	now := k.cfg.Clock()
	expires := now.Add(k.cfg.Retention)
	forget := now.Add(-k.cfg.Memory)
	claims := make([]driver.KeyClaimItem, len(cs))
	for i, c := range cs {
		claims[i] = driver.KeyClaimItem{ID: c.key.id(), Fingerprint: c.fp}
	}
	// The claim may wait on a twin's row lock in the database: its own
	// span shows that wait apart from the work's.
	_, span := k.span(ctx, "idem.claim")
	claimed, err := driver.ClaimBatch(ctx, k.d, tx, &driver.KeyClaimBatchParams{Claims: claims, Now: now, ExpiresAt: expires, ForgetBefore: forget, Guard: guard})
	if err == nil && len(claimed) != len(cs) {
		err = fmt.Errorf("idem: the driver answered %d claims of %d", len(claimed), len(cs))
	}
	if span.IsRecording() && err == nil && len(cs) == 1 {
		span.SetAttributes(attribute.Bool("idem.claimed", claimed[0].Claimed))
	}
	span.End()
	if err != nil {
		if len(cs) == 1 && errors.Is(err, driver.ErrLockTimeout) {
			err = fmt.Errorf("%w: %w", ErrInFlight, err)
		}
		if len(cs) == 1 && errors.Is(err, driver.ErrTombstoned) {
			err = fmt.Errorf("%w: %w", ErrKeyExpired, err)
		}
		return nil, nil, err
	}

	answers = make([]answer, len(cs))
	var todo []int // the requests whose keys this transaction claimed
	for i, c := range claimed {
		if c.Claimed {
			todo = append(todo, i)
			continue
		}
		answers[i].res, answers[i].err = k.replay(ctx, cs[i].key, c.Existing, cs[i].fp, now)
	}
	if len(todo) == 0 {
		return answers, nil, nil
	}
	results, err := work(ctx, todo)
	if err != nil {
		return nil, nil, err
	}
	if len(results) != len(todo) {
		return nil, nil, fmt.Errorf("idem: batch work returned %d results for %d items", len(results), len(todo))
	}
	store = &driver.KeyRecordBatchParams{}
	for j, i := range todo {
		r := results[j]
		if r.Err != nil {
			store.Release = append(store.Release, cs[i].key.id())
			answers[i].err = r.Err
			continue
		}
		rec, err := k.record(ctx, cs[i], r.Outcome)
		if err != nil {
			return nil, nil, err
		}
		store.Records = append(store.Records, rec)
		answers[i].res = Result{Outcome: r.Outcome, ExpiresAt: expires}
	}
	if len(store.Records) == 0 {
		return answers, nil, nil
	}
	return answers, store, nil
}

// runWork runs work, its panic a *PanicError (see catch), so that the
// caller's rollback runs and the error reaches whoever answers the request.
func (k *Keeper) runWork(ctx context.Context, tx driver.Tx, key Key, work Work) (out Outcome, err error) {
	defer k.catch(ctx, &err, key)
	return work(ctx, tx)
}

// catch, deferred, turns a panic of the function that deferred it into
// *err: a *PanicError of key with the panicking goroutine's stack, logged
// unless it is http.ErrAbortHandler (a deliberate abort, as in net/http);
// with no key, an error that says the work panicked.
func (k *Keeper) catch(ctx context.Context, err *error, key ...Key) {
	v := recover()
	switch {
	case v == nil:
		return
	case len(key) != 1:
		*err = fmt.Errorf("idem: batch work panicked: %v", v)
		return
	}
	pe := &PanicError{Key: key[0], Value: v, Stack: debug.Stack()}
	if v != http.ErrAbortHandler {
		k.cfg.Logger.ErrorContext(ctx, "idem: work panicked; rolled back, nothing stored",
			"scope", pe.Key.Scope, "operation", pe.Key.Operation, "key", pe.Key.Key,
			"panic", fmt.Sprint(v), "stack", string(pe.Stack))
	}
	*err = pe
}

// start begins the span of one keeper call. Attributes are set only on a
// recording span: with tracing off the call costs the API's no-op.
func (k *Keeper) start(ctx context.Context, name string, key Key) (context.Context, trace.Span) {
	ctx, span := k.span(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("idem.operation", key.Operation))
	}
	return ctx, span
}

// span starts a span of the keeper's. With a no-op TracerProvider and no
// recording span in ctx, the no-op tracer would return ctx's own span in
// a context of its own: span returns ctx and its span, the same answer
// without a context made per call.
func (k *Keeper) span(ctx context.Context, name string) (context.Context, trace.Span) {
	if k.spansOff {
		if s := trace.SpanFromContext(ctx); !s.IsRecording() {
			return ctx, s
		}
	}
	return k.tracer.Start(ctx, name)
}

// endSpan records how a keeper call ended: idem.replayed for an answer
// from storage (or from an in-process twin), an error status otherwise.
func endSpan(span trace.Span, res Result, err error) {
	if span.IsRecording() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.Bool("idem.replayed", res.Replayed))
		}
	}
	span.End()
}
