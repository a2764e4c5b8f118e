package idem

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/seal"
)

// Config configures a Keeper. The zero value is usable.
type Config struct {
	// Retention is how long an outcome is kept and replayed. After it the
	// key is remembered without its outcome (a tombstone of a few dozen
	// bytes: its fingerprint and status) until Memory: a copy then gets
	// ErrKeyExpired. Default 24h; bound 1s..400 days.
	Retention time.Duration
	// Memory is how long after its first arrival a key is remembered,
	// answer or tombstone; after it the key behaves as new. It applies to
	// every key held, whenever it arrived. Default 30 days, or Retention
	// when that is longer; bound Retention..400 days.
	Memory time.Duration
	// Wait bounds how long a copy waits for a twin that is still running,
	// in this process or another, before ErrInFlight. Default 5s; bound
	// 1ms..60s.
	Wait time.Duration
	// MaxWaiters bounds the copies of one key waiting in this process; the
	// rest get ErrInFlight at once, so one key's storm cannot fill the
	// connection pool. Default 1000; bound 1..100000.
	MaxWaiters int
	// IgnoreFields are top-level JSON fields left out of fingerprints (for
	// example a client-side "sent_at"). Default none.
	IgnoreFields []string
	// JanitorInterval is how often RunJanitor deletes expired records.
	// Default 1m; bound 1s..24h.
	JanitorInterval time.Duration
	// JanitorBatch bounds the rows one janitor statement deletes, so it never
	// holds many locks at once. Default 1000; bound 1..100000.
	JanitorBatch int
	// JanitorTimeout bounds each of RunJanitor's batches, its commit
	// included. Default 10s; bound 1ms..10m.
	JanitorTimeout time.Duration
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
	// Logger receives the janitor's errors and the panics of work (with
	// the key and the stack). Default slog.Default().
	Logger *slog.Logger
	// Sealer, when set, encrypts each stored outcome's header and body
	// before they reach the database, bound to the record's table, tenant
	// (Key.Scope) and key, and opens them on replay and Lookup; the status
	// stays readable. Records stored before it was set still replay. A
	// sealed record read without one is ErrNoSealer, and one whose tenant
	// was forgotten is seal.ErrForgotten (ErrForgotten); neither runs the
	// work again. Do and the Batcher call a seal.Preparer's Prepare for
	// the tenant before their transaction begins; DoTx seals in the
	// caller's transaction, so the caller calls Prepare before beginning
	// it (on SQLite a tenant's first data key, written inside it, would
	// wait for the writer that transaction holds). Default nil: outcomes
	// are stored as they are.
	Sealer seal.Sealer
	// TracerProvider receives the keeper's spans: idem.Do around each
	// call, idem.claim around the key's claim, idem.wait while a copy
	// waits for an in-process twin. Default otel.GetTracerProvider(), the
	// API's no-op until the program sets one.
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.Memory == 0 {
		c.Memory = max(30*24*time.Hour, c.Retention)
	}
	if c.Wait == 0 {
		c.Wait = 5 * time.Second
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = 1000
	}
	if c.JanitorInterval == 0 {
		c.JanitorInterval = time.Minute
	}
	if c.JanitorBatch == 0 {
		c.JanitorBatch = 1000
	}
	if c.JanitorTimeout == 0 {
		c.JanitorTimeout = 10 * time.Second
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Retention < time.Second || c.Retention > 400*24*time.Hour:
		return fmt.Errorf("idem: Retention %s is outside 1s..400 days", c.Retention)
	case c.Memory < c.Retention || c.Memory > 400*24*time.Hour:
		return fmt.Errorf("idem: Memory %s is outside Retention (%s)..400 days", c.Memory, c.Retention)
	case c.Wait < time.Millisecond || c.Wait > time.Minute:
		return fmt.Errorf("idem: Wait %s is outside 1ms..60s", c.Wait)
	case c.MaxWaiters < 1 || c.MaxWaiters > 100000:
		return fmt.Errorf("idem: MaxWaiters %d is outside 1..100000", c.MaxWaiters)
	case c.JanitorInterval < time.Second || c.JanitorInterval > 24*time.Hour:
		return fmt.Errorf("idem: JanitorInterval %s is outside 1s..24h", c.JanitorInterval)
	case c.JanitorBatch < 1 || c.JanitorBatch > 100000:
		return fmt.Errorf("idem: JanitorBatch %d is outside 1..100000", c.JanitorBatch)
	case c.JanitorTimeout < time.Millisecond || c.JanitorTimeout > 10*time.Minute:
		return fmt.Errorf("idem: JanitorTimeout %s is outside 1ms..10m", c.JanitorTimeout)
	}
	return nil
}

// BatchConfig configures a Batcher. The zero value is usable.
type BatchConfig struct {
	// MaxBatch bounds the requests one transaction carries: a larger batch
	// spends fewer commits but holds its rows' locks longer and costs more
	// to retry when one request fails. Default 128; bound 1..1000.
	MaxBatch int
	// Concurrency is how many batches of one scope (Key.Scope: a tenant)
	// run at once, each on a connection of its own: more answer sooner
	// when clients are few, fewer make larger batches when they are many.
	// Default 2, and 1 where the driver has one writer (SQLite). Bound
	// 1..64.
	Concurrency int
	// MaxQueued bounds the requests waiting for their scope's next batch;
	// the next one gets ErrBusy at once, nothing stored. Default 1000;
	// bound 1..100000.
	MaxQueued int
	// MaxWait bounds how long a batch waits for a slot of the gate that
	// shares the database among scopes while other scopes' batches hold
	// them all: past it, its requests get ErrBusy, nothing stored, and the
	// client is better told to retry. A request behind a batch of its own
	// scope waits for the database instead, bounded by that batch's
	// deadlines and its own context. Default 1s; bound 1ms..60s.
	MaxWait time.Duration
	// Share bounds the slots one scope's batches hold while another's
	// wait for one: ceil(Share × 2 × Concurrency) of the gate's 2 ×
	// Concurrency, at least one. Default 0.5: a scope never keeps another
	// from running Concurrency batches beside it. Bound 0 < Share ≤ 1.
	//
	// Where the driver gates its tenants' transactions itself (the
	// service's does), its gate is the one the batches take their slots
	// from, and MaxWait and Share are its own.
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
