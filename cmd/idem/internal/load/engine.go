// Package load drives duplicate-heavy load at an idem service and verifies
// afterwards, through the public API only, that every acknowledged operation
// happened exactly once: transfers exist with the body that acknowledged
// them, balances and entry counts add up, replays were byte-identical to
// first answers, and the run's accounts sum to zero per currency.
//
// A run has three phases. The account phase creates the run's accounts; the
// main phase sends transfers and reversals, each operation under its own
// Idempotency-Key and a share of them several times (late duplicates and
// bursts of concurrent copies), with clients that retry timeouts, 409 and
// 5xx with the same key; the settle phase retries, still with the same key,
// every operation that never got a final answer. Then package verify checks.
//
// Operation kinds are a closed list (run.Kind): accounts, transfers, reversals
// and, with a webhook endpoint configured, Standard Webhooks deliveries
// (run/webhook.go), signed by the tool itself and redelivered under new
// timestamps and signatures. A kind adds a generator in generate.go and its
// checks in verify/verify.go or verify/events.go; the engine and the journal
// need no change, and the client only signs what it sends.
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

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
	"github.com/idemhq/idem/cmd/idem/internal/load/verify"
)

// ErrViolations is returned (wrapped) by the command when a run or a
// verification found violations.
var ErrViolations = errors.New("load: violations found")

// engine runs one load run.
type engine struct {
	cfg  run.Config
	pool *run.Pool
	cl   *run.Client
	st   *run.Stats
	gen  *generator
	rnd  *mrand.Rand // the dispatching goroutine's

	mu  sync.Mutex
	ops []*run.Op
	// suspects are the differing answers of a run with ExpectLoss:
	// violations unless their operation was found lost.
	suspects []suspect

	prog *run.Progress
}

// Run sends the run's load at the configured targets, settles, verifies,
// and returns the report and the journal. Violations are in the report; the
// error is for a run that could not be made at all.
func Run(ctx context.Context, cfg run.Config) (*run.Report, *run.Journal, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
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
		pool = run.NewPool(cfg.Targets...)
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	runID := "ld" + hex.EncodeToString(rb[:])
	st := run.NewStats(seed)
	e := &engine{cfg: cfg, pool: pool, st: st, cl: run.NewClient(cfg, pool, st, seed),
		gen: newGenerator(cfg, runID, seed), rnd: mrand.New(mrand.NewPCG(seed, 5)),
		prog: run.NewProgress(cfg.Progress, cfg.ProgressBar, st)}
	defer e.cl.Close()
	start := time.Now()
	j := &run.Journal{Version: run.JournalVersion, RunID: runID, Targets: pool.URLs(), Started: start.UTC()}

	// Accounts first: transfers need acknowledged accounts on both sides.
	e.prog.Phase("accounts", cfg.Accounts)
	next := 0
	e.drive(ctx, cfg.Accounts, time.Time{}, func() *run.Op {
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
		e.prog.Stop()
		return nil, nil, fmt.Errorf("load: the service acknowledged too few accounts to transfer between (targets %v)", pool.URLs())
	}

	e.prog.Phase("transfers", cfg.Operations)
	e.drive(ctx, cfg.Operations, start.Add(cfg.Duration), e.gen.next)
	e.prog.Phase("settle", 0)
	e.settle(ctx, e.snapshot())
	e.prog.Stop()
	loaded := time.Since(start)

	j.Ops = e.snapshot()
	if cfg.BeforeVerify != nil {
		cfg.BeforeVerify()
	}
	r := &run.Report{RunID: runID, Targets: j.Targets}
	if cfg.Faults != nil {
		r.Faults = st.Figures(cfg.Faults(), start, time.Now())
	}
	r.LoadSeconds = loaded.Seconds()
	verifying := time.Now()
	err := verify.Check(ctx, cfg, e.cl, st, e.prog, j, r)
	e.prog.Stop()
	r.VerifySeconds = time.Since(verifying).Seconds()
	e.judge(r)
	st.Fill(r)
	r.ElapsedSeconds = time.Since(start).Seconds()
	return r, j, err
}

func (e *engine) snapshot() []*run.Op {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*run.Op(nil), e.ops...)
}

// task is one dispatch: copies of o sent at the same instant, and with
// them, on o's first dispatch, its rival (a void racing a post).
type task struct {
	o      *run.Op
	copies int
	rival  bool
}

// drive sends up to limit new operations made by next, until the deadline
// (zero: none) or ctx ends, mixing in duplicates so that about
// cfg.Duplicates of all requests are copies: late copies of operations
// already sent (some still in flight) and bursts of concurrent copies.
func (e *engine) drive(ctx context.Context, limit int, deadline time.Time, next func() *run.Op) {
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
		sent    []*run.Op
		reqs    float64
		dups    float64
		created int
		paced   = time.Now()
	)
	for created < limit {
		if ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
			return
		}
		if e.cfg.Enough != nil && !deadline.IsZero() && e.cfg.Enough() {
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
			e.st.Duplicates.Add(1)
			dups++
		} else {
			o := next()
			t = task{o: o, copies: 1, rival: o.Rival != nil}
			if needDup && e.cfg.Burst > 1 {
				t.copies = 2 + e.rnd.IntN(e.cfg.Burst-1)
				e.st.Duplicates.Add(int64(t.copies - 1))
				dups += float64(t.copies - 1)
			}
			e.mu.Lock()
			e.ops = append(e.ops, o)
			if t.rival {
				e.ops = append(e.ops, o.Rival)
			}
			e.mu.Unlock()
			sent = append(sent, o)
			created++
			if t.rival {
				sent = append(sent, o.Rival)
				created++
				reqs++
			}
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

// dispatch sends a task's copies, and its rival, concurrently when there
// are several: released by one gate, each takes the pool's next server.
func (e *engine) dispatch(ctx context.Context, t task) {
	t.o.AddCopies(t.copies)
	sends := make([]*run.Op, t.copies, t.copies+1)
	for i := range sends {
		sends[i] = t.o
	}
	if t.rival {
		t.o.Rival.AddCopies(1)
		sends = append(sends, t.o.Rival)
	}
	if len(sends) == 1 {
		e.one(ctx, t.o)
		return
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for _, o := range sends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			e.one(ctx, o)
		}()
	}
	close(gate)
	wg.Wait()
}

// one sends one copy and records its final answer.
func (e *engine) one(ctx context.Context, o *run.Op) {
	a, ok := e.cl.Send(ctx, o)
	if ok {
		e.record(o, a)
	}
}

// record keeps the first final answer of o and compares every later one
// with it byte for byte.
func (e *engine) record(o *run.Op, a run.Answer) {
	if a.Status == 422 && problemCode(a.Body) == "idempotency_key_reused" {
		e.st.Violate(run.Violation{Check: "key_reused", Key: o.Key, ID: o.ID,
			Detail: "a copy with the identical body was refused as a reused key"})
	}
	if o.Kind == run.KindWebhook && a.Status >= 300 && !a.Replayed {
		// Every delivery is authentic and fresh: a refusal is a wrong
		// --webhook-secret or endpoint, or a verifier refusing what the
		// Standard Webhooks spec allows. Either way the run cannot show
		// exactly-once for it.
		e.st.Violate(run.Violation{Check: "webhook_refused", Key: o.Key, ID: o.ID,
			Detail: fmt.Sprintf("a signed delivery was answered %d %s (check --webhook-endpoint and --webhook-secret)", a.Status, run.Truncate(a.Body))})
	}
	prevStatus, prev, first := o.Keep(a.Status, string(a.Body))
	if first {
		e.st.Done.Add(1)
		if a.Status == 201 {
			e.gen.acknowledged(o)
		}
		return
	}
	if a.Status != prevStatus || !bytes.Equal(a.Body, []byte(prev)) {
		v := run.Violation{Check: "replay_differs", Key: o.Key, ID: o.ID,
			Detail: fmt.Sprintf("first answer %d %s; later answer %d %s", prevStatus, run.Truncate([]byte(prev)), a.Status, run.Truncate(a.Body))}
		if e.cfg.ExpectLoss {
			// One of the acknowledgements may have been lost with its
			// commit and another copy done the work again: the verifier
			// tells (Stats.Lost), and the run decides after it.
			e.mu.Lock()
			e.suspects = append(e.suspects, suspect{v: v, redone: !a.Replayed})
			e.mu.Unlock()
			return
		}
		e.st.Violate(v)
	}
}

// suspect is a later answer that differed from an operation's first,
// in a run with ExpectLoss.
type suspect struct {
	v run.Violation
	// redone: the later answer was no replay, so the service ran the
	// work again: it had lost the commit of an acknowledgement, the
	// first answer or this one (copies' answers can arrive out of order).
	redone bool
}

// judge decides the suspects once the verifier has found the lost
// operations: one that was lost, or whose work the service ran again, is
// counted lost (once); any other is the violation it looked like.
func (e *engine) judge(r *run.Report) {
	for _, s := range e.suspects {
		switch {
		case e.st.Lost(s.v.Key):
		case s.redone:
			e.st.MarkLost(s.v.Key)
			r.Lost++
			if len(r.LostKeys) < verify.MaxLostKeys {
				r.LostKeys = append(r.LostKeys, s.v.Key)
			}
		default:
			e.st.Violate(s.v)
		}
	}
}

// settle sends every unacknowledged operation again with its key until it
// gets a final answer or cfg.Settle runs out: the client's own remedy for a
// lost answer, which leaves as few operations unresolved as possible.
func (e *engine) settle(ctx context.Context, ops []*run.Op) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Settle)
	defer cancel()
	work := make(chan *run.Op)
	var wg sync.WaitGroup
	for range e.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range work {
				for !o.Acked() && ctx.Err() == nil {
					e.st.Retries.Add(1)
					e.one(ctx, o)
				}
			}
		}()
	}
	for _, o := range ops {
		if !o.Acked() {
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
