package outbox

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/failpoint"
	"github.com/idemhq/idem/internal/outage"
	"github.com/idemhq/idem/internal/tracing"
	"github.com/idemhq/idem/seal"
)

// Failpoints of the relay, for crash tests (package internal/failpoint).
const (
	FailpointBeforePublish = "relay.before_publish"
	FailpointAfterPublish  = "relay.after_publish" // published, not yet marked sent
)

// RelayConfig configures NewRelay; Publisher is required.
type RelayConfig struct {
	// Publisher sends the messages. Required.
	Publisher Publisher
	// BatchSize bounds the rows one read takes and one publish round
	// sends. The relay holds up to about twice that many messages (a batch
	// in flight and the next one read). Default 2000 (a 1M-row backlog
	// drains ~25% faster than at 1000, docs/benchmarks.md); bound 1..10000.
	BatchSize int
	// PollInterval is how often the relay looks for rows when nobody calls
	// Notify (rows committed by other processes). Default 100ms; bound
	// 1ms..1m.
	PollInterval time.Duration
	// LeaseTTL is how long a relay's shard leases last without renewal:
	// after a crash, its rows wait this long for another relay. Default 30s;
	// bound 1s..10m.
	LeaseTTL time.Duration
	// PublishTimeout bounds the publishing of one cycle. Default 10s, or
	// LeaseTTL/3 when smaller; bound 10ms..LeaseTTL/3, so leases are renewed
	// in time between cycles.
	PublishTimeout time.Duration
	// DBTimeout bounds each of the relay's database transactions, its
	// commit included: a read, a mark of what was published, a lease
	// renewal, a retention batch. A database that stops answering fails
	// the step, logged, instead of hanging the relay. Default 10s, or
	// LeaseTTL/3 when smaller; bound 10ms..LeaseTTL/3, so a renewal ends
	// before the leases it renews.
	DBTimeout time.Duration
	// MaxAttempts is how many times the broker may refuse a message before
	// it becomes a dead letter. Broker outages (ErrBrokerUnavailable) do not
	// count; an undeliverable message (ErrUndeliverable) is dead at its
	// first refusal. Default 10; bound 1..1000.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the wait before a failed message's
	// next attempt (exponential, with jitter), and the relay's wait during
	// a broker outage. Defaults 1s and 5m; bounds 1ms..1h and
	// BackoffMin..24h.
	BackoffMin, BackoffMax time.Duration
	// Retention is how long published rows stay (GET /v1/events shows
	// them). Default 168h (7 days); bound 1m..8760h.
	Retention time.Duration
	// RetentionBatch bounds the rows one retention statement deletes; a
	// pass, once a minute, runs statements until one deletes fewer, beside
	// the publishing. Default 1000; bound 1..100000.
	RetentionBatch int
	// Registerer receives the relay's metrics. Default none.
	Registerer prometheus.Registerer
	// Logger logs errors. Default slog.Default().
	Logger *slog.Logger
	// Owner names this relay in shard leases. Default host-pid-random.
	Owner string
	// Clock returns the current time: backoffs, leases, retention and the
	// backlog's age. Default time.Now.
	Clock func() time.Time
	// TracerProvider receives a publish span per message (kind producer),
	// a child of the trace context stored with its row; the message's
	// traceparent header carries the span's context. A row stored without
	// a trace context gets no span and no trace headers. Default
	// otel.GetTracerProvider(), the API's no-op until the program sets
	// one; then a traced row's stored context is sent as it is.
	TracerProvider trace.TracerProvider
	// Sealer opens the messages that Enqueue sealed (Config.Sealer)
	// before they are published: brokers and endpoints get the plaintext.
	// A sealed message it cannot open is not published: one of a
	// forgotten tenant becomes a dead letter at once; without a Sealer, or
	// when the message fails authentication, it fails an attempt, as a
	// broker's refusal does. Default nil: sealed messages cannot be
	// published.
	Sealer seal.Sealer
}

func (c RelayConfig) withDefaults() RelayConfig {
	if c.BatchSize == 0 {
		c.BatchSize = 2000
	}
	if c.PollInterval == 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = min(10*time.Second, c.LeaseTTL/3)
	}
	if c.DBTimeout == 0 {
		c.DBTimeout = min(10*time.Second, c.LeaseTTL/3)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = time.Second
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(5*time.Minute, c.BackoffMin)
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.RetentionBatch == 0 {
		c.RetentionBatch = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = crand.Read(b)
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

func (c RelayConfig) validate() error {
	switch {
	case c.Publisher == nil:
		return errors.New("outbox: RelayConfig.Publisher is required")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("outbox: BatchSize %d is outside 1..10000", c.BatchSize)
	case c.PollInterval < time.Millisecond || c.PollInterval > time.Minute:
		return fmt.Errorf("outbox: PollInterval %s is outside 1ms..1m", c.PollInterval)
	case c.LeaseTTL < time.Second || c.LeaseTTL > 10*time.Minute:
		return fmt.Errorf("outbox: LeaseTTL %s is outside 1s..10m", c.LeaseTTL)
	case c.PublishTimeout < 10*time.Millisecond || c.PublishTimeout > c.LeaseTTL/3:
		return fmt.Errorf("outbox: PublishTimeout %s is outside 10ms..LeaseTTL/3 (%s)", c.PublishTimeout, c.LeaseTTL/3)
	case c.DBTimeout < 10*time.Millisecond || c.DBTimeout > c.LeaseTTL/3:
		return fmt.Errorf("outbox: DBTimeout %s is outside 10ms..LeaseTTL/3 (%s)", c.DBTimeout, c.LeaseTTL/3)
	case c.MaxAttempts < 1 || c.MaxAttempts > 1000:
		return fmt.Errorf("outbox: MaxAttempts %d is outside 1..1000", c.MaxAttempts)
	case c.BackoffMin < time.Millisecond || c.BackoffMin > time.Hour:
		return fmt.Errorf("outbox: BackoffMin %s is outside 1ms..1h", c.BackoffMin)
	case c.BackoffMax < c.BackoffMin || c.BackoffMax > 24*time.Hour:
		return fmt.Errorf("outbox: BackoffMax %s is outside BackoffMin..24h", c.BackoffMax)
	case c.Retention < time.Minute || c.Retention > 8760*time.Hour:
		return fmt.Errorf("outbox: Retention %s is outside 1m..8760h", c.Retention)
	case c.RetentionBatch < 1 || c.RetentionBatch > 100000:
		return fmt.Errorf("outbox: RetentionBatch %d is outside 1..100000", c.RetentionBatch)
	case len(c.Owner) > 200:
		return errors.New("outbox: Owner is longer than 200 bytes")
	}
	return nil
}

// Relay publishes committed outbox rows. Several relays, in one process or
// many, share the work by leasing shards of the keys (see docs/outbox.md).
type Relay struct {
	d       driver.Driver
	cfg     RelayConfig
	wake    chan struct{}
	metrics *metrics
	log     *slog.Logger
	tracer  trace.Tracer
	// An outage is logged when it begins, once a minute while it lasts and
	// when it ends, not at every retry.
	dbOutage, pubOutage *outage.Log
	// replOutage is a database that answers but does not confirm the
	// relay's commits replicated (driver.ErrUnreplicated): after a
	// failover to a primary that still requires a synchronous standby it
	// lacks. Reads succeed meanwhile, so it is not dbOutage, which a
	// successful cycle ends: only a confirmed commit (a lease renewal)
	// ends it.
	replOutage *outage.Log

	// Owned only by the Run goroutine.
	shards     []int
	leaseAt    time.Time // the next renewal
	leaseUntil time.Time // the end of the leases last renewed
	statsAt    time.Time
	outageWait time.Duration
}

// NewRelay returns a relay over d's outbox. Call Run to start it.
func NewRelay(d driver.Driver, cfg RelayConfig) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("relay", cfg.Owner)
	return &Relay{d: d, cfg: cfg, wake: make(chan struct{}, 1), metrics: m, log: log,
		tracer:   cfg.TracerProvider.Tracer(tracing.Module + "/outbox"),
		dbOutage: outage.New("outbox relay: database", log, cfg.Clock),
		replOutage: outage.NewWords("outbox relay: database commits", outage.Words{
			Down:  " not confirmed replicated: the primary waits for a synchronous standby it lacks, so leases and sent marks are not acknowledged",
			Still: " still not confirmed replicated",
			Up:    " confirmed replicated again",
		}, log, cfg.Clock),
		pubOutage: outage.New("outbox relay: broker", log, cfg.Clock),
	}, nil
}

// Notify wakes the relay after a commit that enqueued messages, so they go
// out without waiting for the next poll. It never blocks, and concurrent
// commits each calling it cost one wake-up, not one each.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run publishes until ctx ends, then gives up its leases so that another
// relay takes over at once, and returns nil. It returns an error only for a
// fault it cannot outlive; database and broker outages are retried.
func (r *Relay) Run(ctx context.Context) error {
	defer r.releaseAll()
	retention, stopRetention := context.WithCancel(ctx)
	retained := make(chan struct{})
	go func() {
		defer close(retained)
		r.runRetention(retention)
	}()
	defer func() {
		stopRetention()
		<-retained
	}()
	idle := time.NewTimer(0)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		default:
		}
		now := r.cfg.Clock()
		if !now.Before(r.leaseAt) {
			r.leaseAt = now.Add(r.cfg.LeaseTTL / 3)
			switch err := r.manageLeases(ctx, now); {
			case err == nil:
				r.replOutage.OK()
			case ctx.Err() == nil:
				r.leaseFailed(now, err)
			}
		}
		if !now.Before(r.statsAt) {
			r.refreshStats(ctx)
			r.statsAt = now.Add(5 * time.Second)
		}
		n, err := r.cycle(ctx)
		wait := r.cfg.PollInterval
		switch {
		case errors.Is(err, ErrBrokerUnavailable):
			r.outageWait = jitter(min(max(2*r.outageWait, r.cfg.BackoffMin), r.cfg.BackoffMax))
			wait = r.outageWait
			r.dbOutage.OK()
			r.pubOutage.Fail("publish", err)
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			switch {
			case errors.Is(err, driver.ErrUnreplicated):
				r.replOutage.Fail("cycle", err)
			case driver.IsRetryable(err):
				r.dbOutage.Fail("cycle", err)
			default:
				r.log.Warn("outbox relay: cycle", "err", err)
			}
			wait = max(wait, time.Second)
		default:
			r.outageWait = 0
			r.dbOutage.OK()
			r.pubOutage.OK()
			if n == r.cfg.BatchSize {
				continue // a full batch: more is likely waiting
			}
		}
		wait = min(wait, max(time.Until(r.leaseAt), 0))
		idle.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			if !idle.Stop() {
				<-idle.C
			}
		case <-idle.C:
		}
	}
}

// Unreplicated reports whether the database has stopped confirming the
// relay's commits replicated, and since when: its primary waits for a
// synchronous standby it lacks. The relay goes on reading, but neither
// its leases nor its sent marks are acknowledged until a commit is
// confirmed again. /readyz shows it.
func (r *Relay) Unreplicated() (since time.Time, ok bool) { return r.replOutage.Down() }

// leaseFailed handles a renewal that failed: it is tried again in a
// second, and once the leases last renewed have ended the relay publishes
// nothing until a renewal succeeds (another relay may hold its shards by
// then), saying so at error level. A renewal the database committed
// without its synchronous standbys counts as failed (driver.ErrUnreplicated).
func (r *Relay) leaseFailed(now time.Time, err error) {
	r.leaseAt = now.Add(min(time.Second, r.cfg.LeaseTTL/3))
	if len(r.shards) == 0 || now.Before(r.leaseUntil) {
		if errors.Is(err, driver.ErrUnreplicated) {
			r.replOutage.Fail("leases", err)
		} else {
			r.dbOutage.Fail("leases", err)
		}
		return
	}
	r.log.Error("outbox relay: leases expired without renewal; publishing nothing until they are renewed",
		"shards", len(r.shards), "expired_at", r.leaseUntil, "err", err)
	r.shards = nil
	r.metrics.shards.Set(0)
}

// cycle publishes the owned shards' unsent rows batch after batch, as a
// pipeline: while one batch is being published, the batch before it is
// marked sent and then the next one is read. It stops after a batch that
// was not full, a failure, or at the next lease renewal, and returns the
// size of the last batch read (BatchSize means more is likely waiting).
//
// The first read starts from the oldest unsent row; each next one
// continues after the last row read, so it neither walks the rows the
// cycle already published nor reads the batch in flight. Two kinds of rows
// could still appear behind it, and neither is passed over:
//
//   - Rows that commit late (transactions commit out of id order). Every
//     read also fetches the rows behind it whose transactions had not ended
//     when the cycle began (the driver's horizon), and publishes them first,
//     in id order with the rest. Too many of those ends the cycle instead,
//     and the next one starts from the oldest row again.
//   - Rows of a key released mid-cycle. Every read judges holds as they
//     stood at the cycle's start, and a hold never disappears under a
//     cycle: a redrive turns it into a short backoff, and retention deletes
//     holds only an hour after they expired.
//
// A row of the next batch is published only after the whole current batch
// was acknowledged, so a key with a row in both never has two in flight,
// and its rows reach the broker in order; marking them sent can lag
// behind, as within a batch, because a republish after a crash is dropped
// by the broker's deduplication. A failure or outage ends the pipeline:
// the rows read ahead are dropped unpublished, and the next cycle reads
// again, where held keys are left out.
func (r *Relay) cycle(ctx context.Context) (int, error) {
	if len(r.shards) == 0 {
		return 0, nil
	}
	c := &cycleReads{start: r.cfg.Clock()}
	rows, err := r.fetch(ctx, c, nil)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	var marking chan error // the previous batch's mark-sent, when in flight
	for {
		done := make(chan publishResult, 1)
		go func(rows []driver.OutboxRow) {
			res, err := r.publish(ctx, rows)
			done <- publishResult{res, err}
		}(rows)

		var markErr error
		if marking != nil {
			markErr = <-marking
			marking = nil
		}
		var next fetched
		readAhead := markErr == nil && len(rows) == r.cfg.BatchSize && r.cfg.Clock().Before(r.leaseAt)
		if readAhead {
			next.rows, next.err = r.fetch(ctx, c, rows)
		}

		p := <-done
		res := p.res
		if p.err != nil || markErr != nil || res.outage != nil || len(res.failed) > 0 || !readAhead {
			// The rows read ahead, if any, are dropped: read again next
			// cycle.
			if p.err != nil {
				return 0, p.err
			}
			if rerr := r.record(ctx, res.sent, res.failed); rerr != nil {
				return 0, rerr
			}
			if markErr != nil {
				return 0, markErr
			}
			return len(rows), res.outage
		}

		marking = make(chan error, 1)
		go func(sent []string) { marking <- r.record(ctx, sent, nil) }(res.sent)
		if next.err != nil || len(next.rows) == 0 {
			// Nothing more to publish, or too many late rows to continue:
			// the cycle ends once its last mark is in, so the next cycle
			// cannot read those rows again.
			if err := <-marking; err != nil {
				return 0, err
			}
			if errors.Is(next.err, errLateOverflow) {
				return r.cfg.BatchSize, nil // start over at once
			}
			return 0, next.err
		}
		rows = next.rows
	}
}

// cycleReads is what a cycle's reads share.
type cycleReads struct {
	start   time.Time         // holds are judged as they stood then
	horizon int64             // see driver.OutboxFetched
	last    *driver.OutboxRow // the last row read, in read order
}

type publishResult struct {
	res published
	err error
}

type fetched struct {
	rows []driver.OutboxRow
	err  error
}

// holdGrace is how long retention keeps a hold after it expired. A cycle
// judges holds as they stood at its start, and another relay's retention
// must not delete a hold under it: a cycle lasts at most a third of a
// lease (10m at most), and an hour also covers any sane skew between the
// relays' clocks.
const holdGrace = time.Hour

// errLateOverflow ends a cycle whose read found more late rows than it
// fetched: the next cycle reads from the oldest row.
var errLateOverflow = errors.New("outbox: too many rows committed behind the relay's reads")

// fetch reads the cycle's next batch: the first (inFlight nil) from the
// oldest unsent row, the others after the last row read, with the rows
// committed behind it first. inFlight is the batch being published: late
// rows may include it (its rows are unsent until marked), so they are
// left out here.
func (r *Relay) fetch(ctx context.Context, c *cycleReads, inFlight []driver.OutboxRow) ([]driver.OutboxRow, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	tx, err := r.d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	f, err := r.d.OutboxFetch(ctx, tx, &driver.OutboxFetchParams{Shards: r.shards, Now: c.start,
		Limit: r.cfg.BatchSize, After: c.last, Horizon: c.horizon, LateLimit: r.cfg.BatchSize + len(inFlight)})
	if err != nil {
		return nil, err
	}
	if c.last == nil {
		c.horizon = f.Horizon
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	if f.LateFull {
		return nil, errLateOverflow
	}
	rows, ahead := f.Rows, len(f.Rows)
	if len(f.Late) > 0 {
		skip := make(map[string]struct{}, len(inFlight))
		for _, row := range inFlight {
			skip[row.ID] = struct{}{}
		}
		late := f.Late[:0]
		for _, row := range f.Late {
			if _, ok := skip[row.ID]; !ok {
				late = append(late, row)
			}
		}
		// Late rows lie behind every row after the last read: they go
		// first, in read order, and the batch keeps its size.
		slices.SortFunc(late, func(a, b driver.OutboxRow) int { return strings.Compare(a.ID, b.ID) })
		rows = append(late, rows...)
		if len(rows) > r.cfg.BatchSize {
			rows = rows[:r.cfg.BatchSize]
		}
		ahead = max(len(rows)-len(late), 0)
	}
	if ahead > 0 {
		// The next read continues after the newest row this batch keeps
		// of those after the last read; rows the batch left out are read
		// again.
		last := f.Rows[ahead-1]
		c.last = &last
	}
	return rows, nil
}

type published struct {
	sent   []string
	failed []failure
	outage error
}

// publish sends a batch in rounds, one message per key per round, so that
// a message is never in flight beside a later one of its key.
func (r *Relay) publish(ctx context.Context, rows []driver.OutboxRow) (published, error) {
	// Queues per key, in commit order; keys in order of their first row.
	queues := make(map[string][]driver.OutboxRow)
	var keys []string
	for _, row := range rows {
		k := row.Tenant + "\x00" + row.Key
		if _, ok := queues[k]; !ok {
			keys = append(keys, k)
		}
		queues[k] = append(queues[k], row)
	}

	failpoint.Hit(FailpointBeforePublish)
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	var res published
	res.sent = make([]string, 0, len(rows))
	heads := make([]driver.OutboxRow, 0, len(keys))
	msgs := make([]Message, 0, len(keys))
	spans := make([]trace.Span, 0, len(keys))
	round := make([]string, 0, len(keys)) // the keys of msgs
	for len(keys) > 0 && res.outage == nil && pctx.Err() == nil {
		heads, msgs, spans, round = heads[:0], msgs[:0], spans[:0], round[:0]
		for _, k := range keys {
			head := queues[k][0]
			if err := openRow(ctx, r.cfg.Sealer, &head); err != nil {
				// It cannot be published: it fails, and holds its key as
				// a refused message does, so the key's later rows wait.
				res.failed = append(res.failed, failure{row: queues[k][0], err: unopenable(err)})
				continue
			}
			m, span := r.traced(ctx, head)
			heads = append(heads, head)
			msgs = append(msgs, m)
			spans = append(spans, span)
			round = append(round, k)
		}
		if len(msgs) == 0 {
			keys = nil
			break
		}
		start := time.Now()
		errs := r.cfg.Publisher.Publish(pctx, msgs)
		r.metrics.publishSeconds.Observe(time.Since(start).Seconds())
		if len(errs) != len(msgs) {
			endSpans(spans, nil)
			return published{}, fmt.Errorf("outbox: publisher returned %d results for %d messages", len(errs), len(msgs))
		}
		endSpans(spans, errs)
		next := keys[:0]
		for i, k := range round {
			switch err := errs[i]; {
			case err == nil:
				res.sent = append(res.sent, heads[i].ID)
				if q := queues[k][1:]; len(q) > 0 {
					queues[k] = q
					next = append(next, k)
				}
			case errors.Is(err, ErrBrokerUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
				// Not the message's fault: no attempt counted, the key
				// stays unheld, and the relay backs off as a whole.
				res.outage = BrokerUnavailable(err)
			default:
				res.failed = append(res.failed, failure{row: heads[i], err: err})
			}
		}
		keys = next
	}
	if len(keys) > 0 && res.outage == nil {
		// The publish timeout ended the batch between rounds.
		res.outage = BrokerUnavailable(pctx.Err())
	}
	failpoint.Hit(FailpointAfterPublish)
	return res, nil
}

type failure struct {
	row driver.OutboxRow
	err error
}

// unopenable is the failure of a sealed row the relay cannot open: dead
// at once when its tenant was forgotten (no retry can read it), an
// attempt like any refusal otherwise (a relay without the key file, a row
// that does not authenticate).
func unopenable(err error) error {
	if errors.Is(err, seal.ErrForgotten) {
		return Undeliverable(err)
	}
	return err
}

// traced returns the message of row with its publish span started: a
// child of the trace context stored with the row, its context in the
// message's trace headers. With tracing off the span is the API's no-op
// carrying the stored context, so a traced row's context is sent
// unchanged. A row stored without a trace context gets no span and no
// trace headers: a publish is part of the trace of the request that
// enqueued it, and a root trace per untraced message would only flood the
// tracing backend with one-span traces.
func (r *Relay) traced(ctx context.Context, row driver.OutboxRow) (Message, trace.Span) {
	m := messageOf(row)
	stored := trace.SpanContextFromContext(tracing.Parse(context.Background(), row.TraceParent, row.TraceState))
	if !stored.IsValid() {
		return m, noSpan
	}
	ctx = trace.ContextWithRemoteSpanContext(ctx, stored)
	name := "publish " + m.Type
	d, named := r.cfg.Publisher.(describer)
	if named {
		name = "publish " + d.Destination(m)
	}
	ctx, span := r.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.message.id", m.ID),
			attribute.String("idem.tenant", m.Tenant),
			attribute.String("idem.type", m.Type),
		}
		if named {
			attrs = append(attrs, attribute.String("messaging.system", d.MessagingSystem()),
				attribute.String("messaging.destination.name", d.Destination(m)))
		}
		span.SetAttributes(attrs...)
	}
	if parent, state := tracing.Format(ctx); parent != "" {
		if m.Headers == nil {
			m.Headers = make(map[string]string, 2)
		}
		m.Headers[HeaderTraceParent] = parent
		if state != "" {
			m.Headers[HeaderTraceState] = state
		} else {
			delete(m.Headers, HeaderTraceState)
		}
	}
	return m, span
}

// noSpan is the span of an untraced row's publish: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// describer is what a Publisher may say of where a message goes, for the
// publish spans' names and attributes (OpenTelemetry's messaging.system
// and messaging.destination.name). natspub, kafka and webhookpub do.
type describer interface {
	MessagingSystem() string
	Destination(Message) string
}

// endSpans ends a round's publish spans, each with its message's outcome
// (errs nil: the round failed as a whole).
func endSpans(spans []trace.Span, errs []error) {
	for i, span := range spans {
		if span.IsRecording() {
			switch {
			case errs == nil:
				span.SetStatus(codes.Error, "publisher returned no result for the message")
			case errs[i] != nil:
				span.SetStatus(codes.Error, errs[i].Error())
			}
		}
		span.End()
	}
}

// record marks published rows sent and failed ones retried later (or dead)
// in one transaction. It runs on a context of its own so that a relay
// stopping mid-cycle still records what it published. When nothing
// failed, the commit does not wait for durability: a mark lost in a
// database crash only makes a republish that the broker drops (see
// docs/outbox.md); failures, rare, stay durable.
func (r *Relay) record(ctx context.Context, sent []string, failed []failure) error {
	if len(sent) == 0 && len(failed) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DBTimeout)
	defer cancel()
	// The mark takes an array of ids: a plan made for each array's length
	// cost PostgreSQL more than the update (0.3–0.4 ms a mark, measured).
	tx, err := r.d.Begin(ctx, driver.BeginOptions{LazyCommit: len(failed) == 0})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	now := r.cfg.Clock()
	if len(sent) > 0 {
		// The mark travels with the next round trip: a failed row's, or
		// the commit's.
		p := &driver.OutboxMarkSentParams{IDs: sent, Now: now}
		if err := r.d.OutboxMarkSent(ctx, driver.Later(tx), p); err != nil {
			return err
		}
	}
	dead := 0
	for _, f := range failed {
		attempts := f.row.Attempts + 1
		p := &driver.OutboxFailParams{
			ID: f.row.ID, Tenant: f.row.Tenant, Key: f.row.Key, Attempts: attempts,
			Error: truncate(f.err.Error(), 1000), Now: now,
			HoldUntil: now.Add(r.backoff(attempts)),
			Dead:      attempts >= r.cfg.MaxAttempts || errors.Is(f.err, ErrUndeliverable),
		}
		if p.Dead {
			dead++
			r.log.Error("outbox relay: dead letter", "id", f.row.ID, "type", f.row.Type, "attempts", attempts, "err", f.err)
		}
		if err := r.d.OutboxFail(ctx, tx, p); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	r.metrics.published.Add(float64(len(sent)))
	r.metrics.failures.Add(float64(len(failed)))
	r.metrics.dead.Add(float64(dead))
	return nil
}

// backoff is exponential in the attempts, capped, with equal jitter so
// that keys that failed together do not retry together.
func (r *Relay) backoff(attempts int) time.Duration {
	d := r.cfg.BackoffMin
	for i := 1; i < attempts && d < r.cfg.BackoffMax; i++ {
		d *= 2
	}
	return jitter(min(d, r.cfg.BackoffMax))
}

func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// manageLeases heartbeats the relay, renews its shards and moves it toward
// its fair share of them: ceil(shards / live relays). It gives shards up
// only here, between cycles, so a shard is never released mid-publish.
func (r *Relay) manageLeases(ctx context.Context, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	tx, err := r.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	until := now.Add(r.cfg.LeaseTTL)
	live, err := r.d.OutboxHeartbeat(ctx, tx, &driver.OutboxHeartbeatParams{Owner: r.cfg.Owner, Now: now, Until: until, TTL: r.cfg.LeaseTTL})
	if err != nil {
		return err
	}
	mine := []int{}
	if len(r.shards) > 0 {
		mine, err = r.d.OutboxShardRenew(ctx, tx, &driver.OutboxShardParams{Owner: r.cfg.Owner, Shards: r.shards, Now: now, Until: until, TTL: r.cfg.LeaseTTL})
		if err != nil {
			return err
		}
	}
	slices.Sort(mine)
	fair := (driver.OutboxShards + max(live, 1) - 1) / max(live, 1)
	switch {
	case len(mine) > fair:
		extra := mine[fair:]
		if err := r.d.OutboxShardRelease(ctx, tx, &driver.OutboxShardParams{Owner: r.cfg.Owner, Shards: extra}); err != nil {
			return err
		}
		mine = mine[:fair]
	case len(mine) < fair:
		got, err := r.d.OutboxShardAcquire(ctx, tx, &driver.OutboxShardParams{Owner: r.cfg.Owner, Now: now, Until: until, TTL: r.cfg.LeaseTTL, Limit: fair - len(mine)})
		if err != nil {
			return err
		}
		mine = append(mine, got...)
		slices.Sort(mine)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if slices.Contains(mine, 0) != slices.Contains(r.shards, 0) {
		r.statsAt = time.Time{} // report, or stop reporting, now
	}
	r.shards = mine
	r.leaseUntil = until
	r.metrics.shards.Set(float64(len(mine)))
	return nil
}

// releaseAll gives up every lease when the relay stops, so another relay
// need not wait for them to expire.
func (r *Relay) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.DBTimeout)
	defer cancel()
	tx, err := r.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return
	}
	defer tx.Rollback(ctx)
	if err := r.d.OutboxShardRelease(ctx, tx, &driver.OutboxShardParams{Owner: r.cfg.Owner}); err != nil {
		return
	}
	if tx.Commit(ctx) == nil {
		r.shards = nil
		r.metrics.stats.drop(r.cfg.Owner)
	}
}

// refreshStats reads the outbox's database-wide figures for the metrics
// when this relay leases shard 0, the one relay that reports them.
func (r *Relay) refreshStats(ctx context.Context) {
	if !slices.Contains(r.shards, 0) {
		r.metrics.stats.drop(r.cfg.Owner)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	s, err := r.d.OutboxStats(ctx, r.d.Reader())
	if err != nil {
		return
	}
	age := 0.0
	if !s.OldestUnsent.IsZero() {
		age = max(r.cfg.Clock().Sub(s.OldestUnsent).Seconds(), 0)
	}
	r.metrics.stats.set(r.cfg.Owner, float64(s.Unsent), age, float64(s.Dead))
}

// runRetention runs a retention pass once a minute (by RelayConfig.Clock)
// until ctx ends, in a goroutine of its own. A pass deletes what a minute of
// publishing marked, which at thousands of messages a second is seconds of
// statements: the publishing must not wait for them, and a pass bounded to
// fewer would let the outbox grow (ten statements of 1,000 rows a minute
// keep up with 167 messages a second, no more).
func (r *Relay) runRetention(ctx context.Context) {
	tick := time.NewTicker(min(r.cfg.PollInterval, time.Second))
	defer tick.Stop()
	var next time.Time
	for {
		if now := r.cfg.Clock(); !now.Before(next) {
			r.retain(ctx, now)
			next = now.Add(time.Minute)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// retain deletes published rows older than Retention, RetentionBatch at a
// time, until a statement deletes fewer.
func (r *Relay) retain(ctx context.Context, now time.Time) {
	for {
		n, err := r.deleteSent(ctx, now)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("outbox relay: retention", "err", err)
			}
			return
		}
		if n < r.cfg.RetentionBatch {
			return
		}
	}
}

func (r *Relay) deleteSent(ctx context.Context, now time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	tx, err := r.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	n, err := r.d.OutboxDeleteSent(ctx, tx, &driver.OutboxDeleteSentParams{
		Before: now.Add(-r.cfg.Retention), HoldsBefore: now.Add(-holdGrace), Limit: r.cfg.RetentionBatch})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}
