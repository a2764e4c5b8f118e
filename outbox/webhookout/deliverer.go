package webhookout

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
	"github.com/idemhq/idem/outbox/webhookpub"
	"github.com/idemhq/idem/seal"
)

// DefaultSchedule is the wait before each attempt, Svix's: at once, then
// 5s, 5m, 30m, 2h, 5h, 10h and 10h, about 27.6 hours in all.
var DefaultSchedule = []time.Duration{0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// Limits of the deliverer.
const (
	MaxSchedule = 100
	// maxAnswerBytes is how much of an answer is read before the
	// connection is closed; ResponseBytes of it are logged.
	maxAnswerBytes = 64 << 10
	// maxRetryAfter bounds the wait a Retry-After answer asks for.
	maxRetryAfter = 24 * time.Hour
)

// DelivererConfig configures NewDeliverer. The zero value is usable.
type DelivererConfig struct {
	// Schedule is the wait before each attempt (the first is usually 0);
	// after the last one fails the delivery is failed (replay sends it
	// again). Default DefaultSchedule; 1..MaxSchedule entries of 0..7 days.
	Schedule []time.Duration
	// Jitter adds up to this fraction of each wait, so that deliveries
	// that failed together do not retry together. Default 0.1; bound 0..1.
	Jitter float64
	// Timeout bounds one attempt, answer included. Default 15s; bound
	// 100ms..1m.
	Timeout time.Duration
	// Concurrency bounds the attempts in flight. Default 64; bound 1..4096.
	Concurrency int
	// PerEndpoint bounds the attempts in flight to one endpoint, so that a
	// slow or dead endpoint holds that many slots at most. Default 4;
	// bound 1..Concurrency.
	PerEndpoint int
	// LeaseTTL is how long a claimed delivery is the deliverer's alone: a
	// deliverer killed mid-attempt leaves it due again after that. Default
	// 2×Timeout+10s; bound Timeout+5s..1h, so an attempt always ends
	// within its lease.
	LeaseTTL time.Duration
	// PollInterval is how often the deliverer looks for due deliveries
	// when nothing wakes it (Notify). Default 1s; bound 1ms..1m.
	PollInterval time.Duration
	// DisableAfter is how long an endpoint may fail without a success
	// before it is disabled (and a webhook_endpoint.disabled event
	// written). Default 120h (5 days); bound 1m..2160h.
	DisableAfter time.Duration
	// Retention is how long attempts, and finished deliveries, are kept.
	// Default 720h (30 days); bound 1h..8760h.
	Retention time.Duration
	// DBTimeout bounds each database transaction. Default 10s; bound
	// 10ms..1m.
	DBTimeout time.Duration
	// AllowNetworks: see Config.AllowNetworks.
	AllowNetworks []netip.Prefix
	// Resolver resolves the endpoints' host names. Default the system's.
	Resolver *net.Resolver
	// CloudEvents chooses the body's format, as webhookpub's: idem's
	// envelope {"type","timestamp","data"} by default.
	CloudEvents cloudevent.Config
	// Registerer receives the metrics. Default none.
	Registerer prometheus.Registerer
	// Logger logs failures. Default slog.Default().
	Logger *slog.Logger
	// Owner names this deliverer in leases. Default host-pid-random.
	Owner string
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
	// Sealer opens each delivery's sealed payload before it is sent (the
	// fan-out sealed it: FanOutConfig.Sealer), and seals the events the
	// deliverer enqueues itself (an endpoint disabled), as
	// outbox.Config.Sealer does. A delivery it cannot open is not sent;
	// the attempt fails. Default nil.
	Sealer seal.Sealer
}

func (c DelivererConfig) withDefaults() DelivererConfig {
	if c.Schedule == nil {
		c.Schedule = DefaultSchedule
	}
	if c.Jitter == 0 {
		c.Jitter = 0.1
	}
	if c.Timeout == 0 {
		c.Timeout = 15 * time.Second
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.PerEndpoint == 0 {
		c.PerEndpoint = min(4, c.Concurrency)
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 2*c.Timeout + 10*time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.DisableAfter == 0 {
		c.DisableAfter = 120 * time.Hour
	}
	if c.Retention == 0 {
		c.Retention = 720 * time.Hour
	}
	if c.DBTimeout == 0 {
		c.DBTimeout = 10 * time.Second
	}
	c.CloudEvents = c.CloudEvents.WithDefaults()
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
	return c
}

func (c DelivererConfig) validate() error {
	switch {
	case len(c.Schedule) < 1 || len(c.Schedule) > MaxSchedule:
		return fmt.Errorf("webhookout: Schedule has %d entries, want 1..%d", len(c.Schedule), MaxSchedule)
	case c.Jitter < 0 || c.Jitter > 1:
		return fmt.Errorf("webhookout: Jitter %g is outside 0..1", c.Jitter)
	case c.Timeout < 100*time.Millisecond || c.Timeout > time.Minute:
		return fmt.Errorf("webhookout: Timeout %s is outside 100ms..1m", c.Timeout)
	case c.Concurrency < 1 || c.Concurrency > 4096:
		return fmt.Errorf("webhookout: Concurrency %d is outside 1..4096", c.Concurrency)
	case c.PerEndpoint < 1 || c.PerEndpoint > c.Concurrency:
		return fmt.Errorf("webhookout: PerEndpoint %d is outside 1..Concurrency (%d)", c.PerEndpoint, c.Concurrency)
	case c.LeaseTTL < c.Timeout+5*time.Second || c.LeaseTTL > time.Hour:
		return fmt.Errorf("webhookout: LeaseTTL %s is outside Timeout+5s..1h", c.LeaseTTL)
	case c.PollInterval < time.Millisecond || c.PollInterval > time.Minute:
		return fmt.Errorf("webhookout: PollInterval %s is outside 1ms..1m", c.PollInterval)
	case c.DisableAfter < time.Minute || c.DisableAfter > 2160*time.Hour:
		return fmt.Errorf("webhookout: DisableAfter %s is outside 1m..2160h", c.DisableAfter)
	case c.Retention < time.Hour || c.Retention > 8760*time.Hour:
		return fmt.Errorf("webhookout: Retention %s is outside 1h..8760h", c.Retention)
	case c.DBTimeout < 10*time.Millisecond || c.DBTimeout > time.Minute:
		return fmt.Errorf("webhookout: DBTimeout %s is outside 10ms..1m", c.DBTimeout)
	case len(c.AllowNetworks) > 256:
		return errors.New("webhookout: more than 256 allowed networks")
	case len(c.Owner) > 200:
		return errors.New("webhookout: Owner is longer than 200 bytes")
	}
	for _, d := range c.Schedule {
		if d < 0 || d > 7*24*time.Hour {
			return fmt.Errorf("webhookout: Schedule entry %s is outside 0..168h", d)
		}
	}
	return c.CloudEvents.Validate()
}

// ParseSchedule reads a comma-separated list of durations ("0,5s,5m").
func ParseSchedule(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return nil, fmt.Errorf("webhookout: schedule entry %q is not a duration", part)
		}
		out = append(out, d)
	}
	return out, nil
}

// Deliverer sends due deliveries. Several deliverers, in one process or
// many, share the work: each claims deliveries under a lease.
type Deliverer struct {
	d       driver.Driver
	cfg     DelivererConfig
	clients clients
	ob      *outbox.Outbox
	log     *slog.Logger
	metrics *delivererMetrics
	wake    chan struct{}
	// results carries the attempts' outcomes to Run, which records them.
	results chan finished

	claimMu sync.Mutex // held by the turn that claims

	mu       sync.Mutex
	queue    []claimed            // claimed, waiting for a slot, the oldest claims first
	queued   map[string]int       // queue per endpoint
	inFlight map[string]int       // attempts in flight per endpoint
	total    int                  // attempts in flight
	nextSend map[string]time.Time // rate-limited endpoints' next start
}

// NewDeliverer returns a deliverer of d's deliveries. Call Run to start it.
func NewDeliverer(d driver.Driver, cfg DelivererConfig) (*Deliverer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ob, err := outbox.New(d, outbox.Config{Clock: cfg.Clock, Sealer: cfg.Sealer})
	if err != nil {
		return nil, err
	}
	m, err := newDelivererMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Deliverer{d: d, cfg: cfg, ob: ob, metrics: m,
		clients: newClients(guard{allow: cfg.AllowNetworks}, cfg.Timeout, cfg.Resolver),
		log:     cfg.Logger.With("deliverer", cfg.Owner), wake: make(chan struct{}, 1),
		results:  make(chan finished, cfg.Concurrency+maxRecordBatch),
		inFlight: map[string]int{}, queued: map[string]int{}, nextSend: map[string]time.Time{}}, nil
}

// Notify wakes the deliverer: new deliveries are due. It never blocks.
func (w *Deliverer) Notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends, then waits for the attempts in flight to
// end (each within Timeout) and be recorded, and returns nil. A
// Deliverer runs once.
//
// The deliverer's database work but retention is done in turns (step):
// each records the attempts that ended since the last and claims due
// deliveries for the free slots, in one transaction (and, on PostgreSQL,
// one round trip before the commit). So the turns' size follows the load:
// the attempts that end while a turn runs are a next turn's batch, and a
// claim costs no transaction of its own. turnWorkers goroutines take
// turns, so that one turn's round trips overlap another's; one claim at a
// time (claimMu), since a claim bounds each endpoint by the attempts of
// the claims returned before it. Claims run ahead: besides the attempts
// in flight the deliverer holds as many leased deliveries queued
// (startReady), which start as attempts end, so that a freed slot does not
// wait for a turn. Attempts run in goroutines of their own and never wait
// on the database, nor on each other.
func (w *Deliverer) Run(ctx context.Context) error {
	var attempts sync.WaitGroup // the attempts and the retention
	defer w.clients.close()
	attempts.Add(1)
	go func() {
		defer attempts.Done()
		w.runRetention(ctx)
	}()
	tick := time.NewTicker(w.cfg.PollInterval)
	defer tick.Stop()
	var workers sync.WaitGroup
	for i := range turnWorkers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			w.work(ctx, &attempts, tick.C, i == 0)
		}()
	}
	workers.Wait()
	// Stopping: give back the leases of the deliveries claimed but not
	// started, so that they are due at once, not when their leases end.
	w.mu.Lock()
	var release []driver.WebhookDeliveryKey
	for _, c := range w.queue {
		release = append(release, c.row.WebhookDeliveryKey)
	}
	w.queue, w.queued = nil, map[string]int{}
	w.mu.Unlock()
	if len(release) > 0 {
		if _, err := w.step(ctx, nil, nil, release); err != nil {
			w.log.Warn("webhookout: give back leases", "err", err)
		}
	}
	// Record what the attempts in flight end with.
	go func() {
		attempts.Wait()
		close(w.results)
	}()
	batch := make([]finished, 0, maxRecordBatch)
	for f := range w.results {
		batch = w.drain(append(batch[:0], f))
		if _, err := w.turn(ctx, batch, nil); err != nil {
			w.log.Warn("webhookout: record attempts", "err", err)
		}
	}
	return nil
}

// turnWorkers is how many turns may run at once.
const turnWorkers = 2

// work takes turns until ctx ends, each started by outcomes to record, a
// wake (Notify), a tick of the poll, or a claim that took all it asked
// for; stats: it also refreshes the metrics' counts.
func (w *Deliverer) work(ctx context.Context, attempts *sync.WaitGroup, tick <-chan time.Time, stats bool) {
	var (
		batch   = make([]finished, 0, maxRecordBatch)
		claim   = true // at the first turn, and whenever more may be due
		retryAt time.Time
		statsAt time.Time
	)
	for ctx.Err() == nil {
		batch = w.drain(batch[:0])
		if len(batch) == 0 && !claim {
			select {
			case <-ctx.Done():
				continue
			case f := <-w.results:
				batch = w.drain(append(batch, f))
			case <-w.wake:
				claim = true
			case <-tick:
				claim = true
			}
		}
		now := w.cfg.Clock()
		if stats && !now.Before(statsAt) {
			w.refreshStats(ctx)
			statsAt = now.Add(5 * time.Second)
		}
		// An ended attempt freed a slot: worth a claim. After a failed
		// turn claims wait a while, recording does not. With outcomes to
		// record a turn does not wait for the claim of another.
		var c *driver.WebhookDeliveryClaim
		wanted, locked := (claim || len(batch) > 0) && !now.Before(retryAt), false
		if wanted {
			if len(batch) == 0 {
				w.claimMu.Lock()
				locked = true
			} else {
				locked = w.claimMu.TryLock()
			}
			if locked {
				c = w.claimParams(now)
			}
		}
		claimed, err := w.turn(ctx, batch, c)
		if locked {
			w.claimMu.Unlock()
		}
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("webhookout: turn", "err", err)
			}
			retryAt, claim = now.Add(max(w.cfg.PollInterval, time.Second)), false
			continue
		}
		// A claim that took all it asked for may have left more due; one
		// put off for another's is still wanted.
		claim = (c != nil && len(claimed) == c.Limit) || (wanted && !locked)
		w.startReady(ctx, attempts)
	}
}

// startReady starts the queued deliveries that have a slot, the oldest
// claims first, skipping those of endpoints at their bound, so that a
// slow endpoint's queue holds up no other's. A delivery whose lease would
// end before an attempt started now could (Timeout, and a second's
// margin) is dropped instead: its lease lapses and it is due again, and
// no attempt of it can outlive the lease.
func (w *Deliverer) startReady(ctx context.Context, attempts *sync.WaitGroup) {
	if ctx.Err() != nil {
		return // stopping: Run gives the queue's leases back
	}
	now := w.cfg.Clock()
	var start []claimed
	w.mu.Lock()
	kept := w.queue[:0]
	for _, c := range w.queue {
		ep := c.row.EndpointID
		switch {
		case !now.Add(w.cfg.Timeout + time.Second).Before(c.row.NextAt):
			w.unqueue(ep)
		case w.total < w.cfg.Concurrency && w.inFlight[ep] < w.cfg.PerEndpoint:
			w.unqueue(ep)
			w.inFlight[ep]++
			w.total++
			start = append(start, c)
		default:
			kept = append(kept, c)
		}
	}
	clear(w.queue[len(kept):])
	w.queue = kept
	w.mu.Unlock()
	for _, c := range start {
		attempts.Add(1)
		go func() {
			defer attempts.Done()
			w.deliver(ctx, c)
			w.startReady(ctx, attempts)
		}()
	}
}

// unqueue counts one queued delivery of endpoint ep less; w.mu is held.
func (w *Deliverer) unqueue(ep string) {
	if w.queued[ep]--; w.queued[ep] <= 0 {
		delete(w.queued, ep)
	}
}

// drain appends the outcomes waiting, at most maxRecordBatch in all.
func (w *Deliverer) drain(batch []finished) []finished {
	for len(batch) < maxRecordBatch {
		select {
		case f, ok := <-w.results:
			if !ok {
				return batch
			}
			batch = append(batch, f)
		default:
			return batch
		}
	}
	return batch
}

// release frees an attempt's slot. It is freed when the attempt ends,
// before its outcome is recorded: the delivery stays leased until then
// (no claim takes it), and the turn that records the outcome claims for
// the slot at once.
func (w *Deliverer) release(endpointID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[endpointID]--; w.inFlight[endpointID] <= 0 {
		delete(w.inFlight, endpointID)
	}
	w.total--
}

// claimParams asks for as many deliveries as there are free slots and
// room in the queue: Concurrency of each, and of each endpoint
// PerEndpoint in flight and as many queued, which start as soon as
// attempts end, without waiting for a turn. Nil when there is no room.
// Its caller holds claimMu, and the queue and the slots only empty
// meanwhile, so the room there is now is still there when the claim
// returns.
func (w *Deliverer) claimParams(now time.Time) *driver.WebhookDeliveryClaim {
	w.mu.Lock()
	defer w.mu.Unlock()
	room := 2*w.cfg.Concurrency - w.total - len(w.queue)
	if room <= 0 {
		return nil
	}
	held := make(map[string]int, len(w.inFlight)+len(w.queued))
	for id, n := range w.inFlight {
		held[id] += n
	}
	for id, n := range w.queued {
		held[id] += n
	}
	return &driver.WebhookDeliveryClaim{Until: now.Add(w.cfg.LeaseTTL), Limit: room, Scan: min(2*room, 1000),
		PerEndpoint: 2 * w.cfg.PerEndpoint, InFlight: held}
}

// claimed is a delivery this deliverer leased, with its endpoint as read
// at the claim.
type claimed struct {
	row      driver.WebhookDeliveryRow
	endpoint driver.WebhookEndpointRow
}

// turn records batch and claims by c in one transaction (step). When that
// fails with outcomes to record, it records them without the claim, each
// in a transaction of its own if need be, so that one attempt's fault
// loses no other's record; then the claim waits for a later turn.
func (w *Deliverer) turn(ctx context.Context, batch []finished, c *driver.WebhookDeliveryClaim) ([]claimed, error) {
	if len(batch) == 0 && c == nil {
		return nil, nil
	}
	out, err := w.step(ctx, batch, c, nil)
	if err == nil || len(batch) == 0 {
		return out, err
	}
	if c != nil || len(batch) > 1 {
		if err = w.recordEach(ctx, batch, c != nil); err == nil {
			return nil, nil
		}
	}
	return nil, err
}

func (w *Deliverer) recordEach(ctx context.Context, batch []finished, together bool) error {
	if together {
		if _, err := w.step(ctx, batch, nil, nil); err == nil {
			return nil
		}
	}
	for _, f := range batch {
		if _, err := w.step(ctx, []finished{f}, nil, nil); err != nil {
			w.log.Warn("webhookout: record attempt", "endpoint", f.c.row.EndpointID, "event", f.c.row.EventID, "err", err)
		}
	}
	return nil
}

// outcome is one attempt's result.
type outcome struct {
	status     int
	response   string
	err        string
	latency    time.Duration
	retryAfter time.Duration
}

func (o outcome) ok() bool { return o.err == "" && o.status >= 200 && o.status < 300 }

func (w *Deliverer) deliver(ctx context.Context, c claimed) {
	if !w.paced(ctx, c.endpoint) {
		w.release(c.row.EndpointID)
		return // stopping: the lease lapses and the delivery is due again
	}
	if !w.cfg.Clock().Add(w.cfg.Timeout).Before(c.row.NextAt) {
		// Paced past the point where the attempt could outlive its
		// lease: the lease lapses and the delivery is due again.
		w.release(c.row.EndpointID)
		return
	}
	o := w.attempt(ctx, c)
	w.release(c.row.EndpointID)
	if ctx.Err() != nil && !o.ok() {
		return // cut short by the stop, not the endpoint's fault
	}
	w.results <- finished{c: c, o: o}
}

// paced waits for a rate-limited endpoint's next start; false when ctx
// ended first.
func (w *Deliverer) paced(ctx context.Context, e driver.WebhookEndpointRow) bool {
	if e.RateLimit <= 0 {
		return true
	}
	gap := time.Second / time.Duration(e.RateLimit)
	w.mu.Lock()
	now := time.Now()
	start := now
	if t := w.nextSend[e.ID]; t.After(now) {
		start = t
	}
	w.nextSend[e.ID] = start.Add(gap)
	if len(w.nextSend) > 10000 {
		for id, t := range w.nextSend {
			if t.Before(now) {
				delete(w.nextSend, id)
			}
		}
	}
	w.mu.Unlock()
	if d := start.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

type envelope struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// body is the event's request body in the configured format, as
// webhookpub sends it.
func (w *Deliverer) body(m outbox.Message) (body []byte, contentType string, ce []cloudevent.Attr, err error) {
	f := w.cfg.CloudEvents.Format
	source := cloudevent.Source(w.cfg.CloudEvents.Source, m.Tenant)
	switch {
	case f.BinaryMode():
		return m.Payload, cloudevent.ContentTypeData, cloudevent.Attributes(m, source), nil
	case f.StructuredMode():
		body, err = cloudevent.JSON(m, source)
		return body, cloudevent.ContentTypeStructured, nil, err
	}
	body, err = json.Marshal(envelope{Type: m.Type, Timestamp: m.CreatedAt.UTC(), Data: m.Payload})
	return body, "application/json", nil, err
}

// Signature is the webhook-signature value of a delivery signed with each
// key: Standard Webhooks' space-separated list, which a receiver accepts
// when any one verifies (a rotation's overlap signs with both secrets).
func Signature(keys [][]byte, id string, timestamp int64, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = webhookpub.Sign(k, id, timestamp, body)
	}
	return strings.Join(sigs, " ")
}

// attempt sends one delivery and reads at most maxAnswerBytes of the
// answer.
func (w *Deliverer) attempt(ctx context.Context, c claimed) outcome {
	r := c.row
	if err := openDelivery(ctx, w.cfg.Sealer, &r); err != nil {
		// Nothing is sent: the attempt fails as a refused one does.
		return outcome{err: err.Error()}
	}
	m := outbox.Message{ID: r.EventID, Tenant: r.Tenant, Type: r.Type, Key: r.EventID, Payload: r.Payload, CreatedAt: r.EventCreatedAt}
	body, contentType, ce, err := w.body(m)
	if err != nil {
		return outcome{err: "encode: " + err.Error()}
	}
	now := w.cfg.Clock()
	keys, err := activeKeys(c.endpoint.Secrets, now)
	if err != nil || len(keys) == 0 {
		return outcome{err: "no signing secret"}
	}
	u, err := url.Parse(c.endpoint.URL)
	if err != nil {
		return outcome{err: "bad url"}
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint.URL, bytes.NewReader(body))
	if err != nil {
		return outcome{err: "request: " + err.Error()}
	}
	ts := now.Unix()
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "idem-webhooks")
	for _, a := range ce {
		req.Header.Set(webhookpub.HeaderPrefixCloudEvents+a.Name, a.Value)
	}
	req.Header.Set("webhook-id", r.EventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Signature(keys, r.EventID, ts, body))
	start := time.Now()
	resp, err := w.clients.For(u).Do(req)
	if err != nil {
		// The client's error quotes the whole URL, whose path or query may
		// hold the receiver's token: only the cause is kept.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		msg := err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			msg = fmt.Sprintf("timeout: no answer within %s", w.cfg.Timeout)
		}
		return outcome{err: truncate(msg, 500), latency: time.Since(start)}
	}
	defer resp.Body.Close()
	head, readErr := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	o := outcome{status: resp.StatusCode, latency: time.Since(start), response: printable(head, ResponseBytes)}
	if readErr != nil && o.status >= 200 && o.status < 300 {
		// A 2xx whose body broke off: the receiver said yes before the
		// connection dropped; it counts as delivered.
		readErr = nil
	}
	if readErr != nil {
		o.err = truncate("reading the answer: "+readErr.Error(), 500)
	}
	if o.status < 200 || o.status >= 300 {
		o.retryAfter = retryAfter(resp.Header.Get("Retry-After"), now)
		if o.err == "" {
			o.err = fmt.Sprintf("answered %d", o.status)
		}
	}
	return o
}

// retryAfter reads a Retry-After header: seconds or an HTTP date, bounded
// by maxRetryAfter; 0 when absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		if s <= 0 {
			return 0
		}
		return min(time.Duration(s)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return 0
}

func printable(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// nextWait is the wait before attempt number attempts+1 (attempts made so
// far), with jitter, or false when the schedule is spent.
func (w *Deliverer) nextWait(attempts int) (time.Duration, bool) {
	if attempts >= len(w.cfg.Schedule) {
		return 0, false
	}
	d := w.cfg.Schedule[attempts]
	if d > 0 && w.cfg.Jitter > 0 {
		d += time.Duration(rand.Float64() * w.cfg.Jitter * float64(d))
	}
	return d, true
}

// finished is an attempt's outcome waiting to be recorded.
type finished struct {
	c claimed
	o outcome
}

// maxRecordBatch bounds the attempts one transaction records.
const maxRecordBatch = 256

// step records batch and claims by c in one transaction, in a fixed
// number of statements whatever their number (one round trip on
// PostgreSQL): the deliveries' new states with the attempts' log lines,
// then per endpoint its health, then the claim; then, for an endpoint to
// be disabled (a 410, or failing for DisableAfter), its disabling with the
// webhook_endpoint.disabled event in its tenant's outbox. A delivery whose
// lease was lost meanwhile is left alone: the worker that holds it now
// records its own attempt. Unrecorded (the transaction failed), a
// delivery stays leased until its lease ends, then is attempted again.
//
// An endpoint's health is its last outcome in the batch, recorded or not:
// an attempt whose lease passed on still tells how the endpoint answers.
func (w *Deliverer) step(ctx context.Context, batch []finished, c *driver.WebhookDeliveryClaim, release []driver.WebhookDeliveryKey) ([]claimed, error) {
	// Outcomes are recorded, and leases given back, even as the
	// deliverer stops; a claim alone stops with it.
	base := context.WithoutCancel(ctx)
	if len(batch) == 0 && len(release) == 0 {
		base = ctx
	}
	dbCtx, cancel := context.WithTimeout(base, w.cfg.DBTimeout)
	defer cancel()
	tx, err := w.d.Begin(dbCtx, driver.BeginOptions{})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(dbCtx)
	now := w.cfg.Clock().UTC()
	p := &driver.WebhookDeliveryStepParams{Owner: w.cfg.Owner, Now: now, Claim: c, Release: release,
		Finish: make([]driver.WebhookDeliveryFinishRow, len(batch))}
	gone := make([]bool, len(batch))
	type health struct {
		tenant        string
		failingBefore bool // as read at the claim
		failed, ok    bool // any failure in the batch; the last outcome
		disable       string
	}
	eps := map[string]*health{}
	var order []string
	for i, f := range batch {
		p.Finish[i], gone[i] = w.nextState(f, now)
		r := f.c.row
		h := eps[r.EndpointID]
		if h == nil {
			h = &health{tenant: r.Tenant, failingBefore: !f.c.endpoint.FailingSince.IsZero()}
			eps[r.EndpointID] = h
			order = append(order, r.EndpointID)
		}
		h.ok = f.o.ok()
		h.failed = h.failed || !h.ok
	}
	for _, id := range order {
		// A healthy endpoint that answered well needs no write.
		if h := eps[id]; !h.ok || h.failingBefore || h.failed {
			p.Health = append(p.Health, driver.WebhookEndpointHealthRow{ID: id, OK: h.ok})
		}
	}
	// Only a failure can disable an endpoint: a batch without one commits
	// with its statements (one round trip on PostgreSQL).
	failed := false
	for _, id := range order {
		failed = failed || eps[id].failed
	}
	var res *driver.WebhookDeliveryStepResult
	if failed {
		res, err = w.d.WebhookDeliveryStep(dbCtx, tx, p)
	} else {
		res, err = w.d.WebhookDeliveryStepCommit(dbCtx, tx, p)
	}
	if err != nil {
		return nil, err
	}
	recorded := make(map[driver.WebhookDeliveryKey]bool, len(res.Recorded))
	for _, k := range res.Recorded {
		recorded[k] = true
	}
	for i, f := range batch {
		if gone[i] && recorded[f.c.row.WebhookDeliveryKey] {
			eps[f.c.row.EndpointID].disable = "the endpoint answered 410 Gone"
		}
	}
	var disabled []string
	for _, id := range order {
		h := eps[id]
		since, ok := res.FailingSince[id]
		if h.disable == "" && !h.ok && ok && now.Sub(since) >= w.cfg.DisableAfter {
			h.disable = fmt.Sprintf("failing since %s (%s without a success)", since.Format(time.RFC3339), w.cfg.DisableAfter)
		}
		if h.disable != "" {
			done, err := w.disable(dbCtx, tx, h.tenant, id, h.disable, now)
			if err != nil {
				return nil, err
			}
			if done {
				disabled = append(disabled, id)
			}
		}
	}
	if failed {
		if err := tx.Commit(dbCtx); err != nil {
			return nil, err
		}
	}
	for i, f := range batch {
		if recorded[f.c.row.WebhookDeliveryKey] {
			state := "healthy"
			if !f.c.endpoint.FailingSince.IsZero() {
				state = "failing"
			}
			w.metrics.observe(state, p.Finish[i].State, f.o)
		}
	}
	for _, id := range disabled {
		w.metrics.disabled.Inc()
		w.log.Warn("webhookout: endpoint disabled", "tenant", eps[id].tenant, "endpoint", id, "reason", eps[id].disable)
	}
	out := make([]claimed, len(res.Claimed))
	w.mu.Lock()
	for i, r := range res.Claimed {
		out[i] = claimed{row: r.Delivery, endpoint: r.Endpoint}
		w.queued[r.Delivery.EndpointID]++
		w.queue = append(w.queue, out[i])
	}
	w.mu.Unlock()
	return out, nil
}

// nextState is a delivery's state after an attempt: delivered, due again
// after the schedule's next wait (or Retry-After's, when longer), or
// failed once the schedule is spent or the endpoint answered 410 Gone
// (gone).
func (w *Deliverer) nextState(f finished, now time.Time) (row driver.WebhookDeliveryFinishRow, gone bool) {
	r, o := f.c.row, f.o
	row = driver.WebhookDeliveryFinishRow{Key: r.WebhookDeliveryKey, Tenant: r.Tenant, Attempts: r.Attempts + 1,
		LastStatus: o.status, LastError: o.err, NextAt: now, LatencyMS: o.latency.Milliseconds(), Response: o.response}
	if o.ok() {
		row.State = driver.WebhookDelivered
		return row, false
	}
	wait, more := w.nextWait(row.Attempts)
	if o.retryAfter > wait {
		wait = o.retryAfter
	}
	row.State, row.NextAt = driver.WebhookPending, now.Add(wait)
	if !more {
		row.State = driver.WebhookFailed
	}
	if o.status == http.StatusGone {
		row.State, gone = driver.WebhookFailed, true
	}
	return row, gone
}

// disable turns an endpoint off, once: the event is written only by the
// transaction that finds it still enabled (the row is locked on Postgres;
// SQLite's writer is alone). It reports whether it disabled it.
func (w *Deliverer) disable(ctx context.Context, tx driver.Tx, tenant, id, reason string, now time.Time) (bool, error) {
	e, err := w.d.WebhookEndpointGet(ctx, tx, &driver.WebhookEndpointGetParams{Tenant: tenant, ID: id, Lock: true})
	if err != nil || !e.Enabled {
		return false, err
	}
	e.Enabled, e.DisabledAt, e.DisabledReason, e.UpdatedAt = false, now, reason, now
	if err := w.d.WebhookEndpointUpdate(ctx, tx, &driver.WebhookEndpointUpdateParams{Row: *e}); err != nil {
		return false, err
	}
	payload, _ := json.Marshal(struct {
		EndpointID   string    `json:"endpoint_id"`
		URL          string    `json:"url"`
		Reason       string    `json:"reason"`
		DisabledAt   time.Time `json:"disabled_at"`
		FailingSince time.Time `json:"failing_since,omitzero"`
	}{id, e.URL, reason, now, e.FailingSince})
	return true, w.ob.Enqueue(ctx, tx, outbox.Message{Tenant: tenant, Type: EventEndpointDisabled, Key: id, Payload: payload})
}

// runRetention deletes old attempts and finished deliveries once a
// minute, 1000 rows a statement, until a statement deletes fewer.
func (w *Deliverer) runRetention(ctx context.Context) {
	tick := time.NewTicker(min(w.cfg.PollInterval*10, time.Minute))
	defer tick.Stop()
	var next time.Time
	for {
		if now := w.cfg.Clock(); !now.Before(next) {
			next = now.Add(time.Minute)
			for {
				n, err := w.deleteOld(ctx, now.Add(-w.cfg.Retention))
				if err != nil {
					if ctx.Err() == nil {
						w.log.Warn("webhookout: retention", "err", err)
					}
					break
				}
				if n < 1000 {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *Deliverer) deleteOld(ctx context.Context, before time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.DBTimeout)
	defer cancel()
	tx, err := w.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	n, err := w.d.WebhookDeleteOld(ctx, tx, &driver.WebhookDeleteOldParams{Before: before, Limit: 1000})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

func (w *Deliverer) refreshStats(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.DBTimeout)
	defer cancel()
	tx, err := w.d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		return
	}
	defer tx.Rollback(ctx)
	s, err := w.d.WebhookStats(ctx, tx)
	if err != nil {
		return
	}
	age := 0.0
	if !s.OldestPending.IsZero() {
		age = max(w.cfg.Clock().Sub(s.OldestPending).Seconds(), 0)
	}
	w.metrics.pending.Set(float64(s.Pending))
	w.metrics.oldest.Set(age)
	w.metrics.endpoints.WithLabelValues("failing").Set(float64(s.Failing))
	w.metrics.endpoints.WithLabelValues("disabled").Set(float64(s.Disabled))
}
