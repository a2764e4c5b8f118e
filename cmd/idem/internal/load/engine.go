package load

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// ErrViolations is returned (wrapped) by the command when a run or a
// verification found violations.
var ErrViolations = errors.New("load: violations found")

// engine runs one load run.
type engine struct {
	cfg  Config
	pool *Pool
	cl   *client
	st   *stats
	gen  *generator
	rnd  *mrand.Rand // the dispatching goroutine's

	mu  sync.Mutex
	ops []*Op

	prog *progress
}

// Run sends the run's load at the configured targets, settles, verifies,
// and returns the report and the journal. Violations are in the report; the
// error is for a run that could not be made at all.
func Run(ctx context.Context, cfg Config) (*Report, *Journal, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	if cfg.WebhookSecret != "" && cfg.WebhookEndpoint == "" {
		return nil, nil, errors.New("load: --webhook-secret without --webhook-endpoint: name the endpoint to deliver to")
	}
	seed := uint64(cfg.Seed)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	pool := cfg.Pool
	if pool == nil {
		pool = NewPool(cfg.Targets...)
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	runID := "ld" + hex.EncodeToString(rb[:])
	st := newStats(seed)
	e := &engine{cfg: cfg, pool: pool, st: st, cl: newClient(cfg, pool, st, seed),
		gen: newGenerator(cfg, runID, seed), rnd: mrand.New(mrand.NewPCG(seed, 5)),
		prog: newProgress(cfg.Progress, cfg.ProgressBar, st)}
	defer e.cl.close()
	start := time.Now()
	j := &Journal{Version: journalVersion, RunID: runID, Targets: pool.URLs(), Started: start.UTC()}

	// Accounts first: transfers need acknowledged accounts on both sides.
	e.prog.phase("accounts", cfg.Accounts)
	next := 0
	e.drive(ctx, cfg.Accounts, time.Time{}, func() *Op {
		o := e.gen.account(next, cfg.Accounts)
		next++
		return o
	})
	e.settle(ctx, e.snapshot())
	for _, o := range e.snapshot() {
		if o.Applied() {
			e.gen.useAccount(o)
		}
	}
	if !e.gen.ready() {
		e.prog.stop()
		return nil, nil, fmt.Errorf("load: the service acknowledged too few accounts to transfer between (targets %v)", pool.URLs())
	}

	e.prog.phase("transfers", cfg.Operations)
	e.drive(ctx, cfg.Operations, start.Add(cfg.Duration), e.gen.next)
	e.prog.phase("settle", 0)
	e.settle(ctx, e.snapshot())
	e.prog.stop()

	j.Ops = e.snapshot()
	if cfg.BeforeVerify != nil {
		cfg.BeforeVerify()
	}
	r := &Report{RunID: runID, Targets: j.Targets}
	e.prog.phaseOf("verify", len(j.Ops), &st.checked)
	err := verify(ctx, cfg, e.cl, st, j, r)
	e.prog.stop()
	st.fill(r)
	r.ElapsedSeconds = time.Since(start).Seconds()
	return r, j, err
}

// Verify checks a journal recorded by an earlier run against the service.
func Verify(ctx context.Context, cfg Config, j *Journal) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, o := range j.Ops {
		if o.Kind != KindWebhook {
			continue
		}
		if cfg.WebhookSecret == "" {
			return nil, errors.New("load verify: the journal holds webhook deliveries; pass --webhook-secret so the probes can sign them")
		}
		if !cfg.CheckEvents {
			return nil, errors.New("load verify: the journal holds webhook deliveries, which are verified through GET /v1/events: drop --check-events=false")
		}
		break
	}
	pool := cfg.Pool
	if pool == nil {
		pool = NewPool(cfg.Targets...)
	}
	start := time.Now()
	st := newStats(uint64(start.UnixNano()))
	cl := newClient(cfg, pool, st, uint64(start.UnixNano()))
	defer cl.close()
	r := &Report{RunID: j.RunID, Targets: pool.URLs()}
	prog := newProgress(cfg.Progress, cfg.ProgressBar, st)
	prog.phaseOf("verify", len(j.Ops), &st.checked)
	err := verify(ctx, cfg, cl, st, j, r)
	prog.stop()
	st.fill(r)
	r.ElapsedSeconds = time.Since(start).Seconds()
	return r, err
}

func (e *engine) snapshot() []*Op {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Op(nil), e.ops...)
}

// task is one dispatch: copies of o sent at the same instant.
type task struct {
	o      *Op
	copies int
}

// drive sends up to limit new operations made by next, until the deadline
// (zero: none) or ctx ends, mixing in duplicates so that about
// cfg.Duplicates of all requests are copies: late copies of operations
// already sent (some still in flight) and bursts of concurrent copies.
func (e *engine) drive(ctx context.Context, limit int, deadline time.Time, next func() *Op) {
	tasks := make(chan task)
	var wg sync.WaitGroup
	for range e.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range tasks {
				e.dispatch(ctx, t)
			}
		}()
	}
	defer func() {
		close(tasks)
		wg.Wait()
	}()

	var (
		sent    []*Op
		reqs    float64
		dups    float64
		created int
		paced   = time.Now()
	)
	for created < limit {
		if ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
			return
		}
		needDup := e.cfg.Duplicates > 0 && dups < e.cfg.Duplicates*(reqs+1)
		var t task
		if needDup && len(sent) > 0 && (e.cfg.Burst == 1 || e.rnd.Float64() < 0.6) {
			// A late copy, half the time of one of the newest operations
			// (likely still in flight), else of any sent so far.
			i := e.rnd.IntN(len(sent))
			if e.rnd.IntN(2) == 0 {
				i = len(sent) - 1 - e.rnd.IntN(min(len(sent), 4*e.cfg.Concurrency))
			}
			t = task{o: sent[i], copies: 1}
			e.st.duplicates.Add(1)
			dups++
		} else {
			o := next()
			t = task{o: o, copies: 1}
			if needDup && e.cfg.Burst > 1 {
				t.copies = 2 + e.rnd.IntN(e.cfg.Burst-1)
				e.st.duplicates.Add(int64(t.copies - 1))
				dups += float64(t.copies - 1)
			}
			e.mu.Lock()
			e.ops = append(e.ops, o)
			e.mu.Unlock()
			sent = append(sent, o)
			created++
		}
		reqs += float64(t.copies)
		if e.cfg.Rate > 0 {
			paced = paced.Add(time.Duration(float64(t.copies) * float64(time.Second) / e.cfg.Rate))
			if d := time.Until(paced); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		select {
		case tasks <- t:
		case <-ctx.Done():
			return
		}
	}
}

// dispatch sends a task's copies, concurrently when there are several.
func (e *engine) dispatch(ctx context.Context, t task) {
	t.o.mu.Lock()
	t.o.Copies += t.copies
	t.o.mu.Unlock()
	if t.copies == 1 {
		e.one(ctx, t.o)
		return
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range t.copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			e.one(ctx, t.o)
		}()
	}
	close(gate)
	wg.Wait()
}

// one sends one copy and records its final answer.
func (e *engine) one(ctx context.Context, o *Op) {
	a, ok := e.cl.send(ctx, o)
	if ok {
		e.record(o, a)
	}
}

// record keeps the first final answer of o and compares every later one
// with it byte for byte.
func (e *engine) record(o *Op, a answer) {
	if a.status == 422 && problemCode(a.body) == "idempotency_key_reused" {
		e.st.violate(Violation{Check: "key_reused", Key: o.Key, ID: o.ID,
			Detail: "a copy with the identical body was refused as a reused key"})
	}
	if o.Kind == KindWebhook && a.status >= 300 && !a.replayed {
		// Every delivery is authentic and fresh: a refusal is a wrong
		// --webhook-secret or endpoint, or a verifier refusing what the
		// Standard Webhooks spec allows. Either way the run cannot show
		// exactly-once for it.
		e.st.violate(Violation{Check: "webhook_refused", Key: o.Key, ID: o.ID,
			Detail: fmt.Sprintf("a signed delivery was answered %d %s (check --webhook-endpoint and --webhook-secret)", a.status, truncate(a.body))})
	}
	o.mu.Lock()
	first := o.Status == 0
	if first {
		o.Status, o.Answer = a.status, string(a.body)
	}
	prevStatus, prev := o.Status, o.Answer
	o.mu.Unlock()
	if first {
		e.st.done.Add(1)
		if a.status == 201 {
			e.gen.acknowledged(o)
		}
		return
	}
	if a.status != prevStatus || !bytes.Equal(a.body, []byte(prev)) {
		e.st.violate(Violation{Check: "replay_differs", Key: o.Key, ID: o.ID,
			Detail: fmt.Sprintf("first answer %d %s; later answer %d %s", prevStatus, truncate([]byte(prev)), a.status, truncate(a.body))})
	}
}

// settle sends every unacknowledged operation again with its key until it
// gets a final answer or cfg.Settle runs out: the client's own remedy for a
// lost answer, which leaves as few operations unresolved as possible.
func (e *engine) settle(ctx context.Context, ops []*Op) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Settle)
	defer cancel()
	work := make(chan *Op)
	var wg sync.WaitGroup
	for range e.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range work {
				for !o.acked() && ctx.Err() == nil {
					e.st.retries.Add(1)
					e.one(ctx, o)
				}
			}
		}()
	}
	for _, o := range ops {
		if !o.acked() {
			select {
			case work <- o:
			case <-ctx.Done():
			}
		}
	}
	close(work)
	wg.Wait()
}

// problemCode is the code member of a problem+json body ("" if none).
func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}
