package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/gate"
)

// gatedDriver is a driver whose transactions on a tenant's behalf take a
// slot of a gate first: those begun under a request's context (its
// tenant). A group-commit batch takes its slot of the write gate before
// it begins (the Batcher finds the gate through WriteGate), and passes.
// Where reads and writes share one pool (PostgreSQL) one gate of the
// pool's size serves both;
// where the writers are a pool of their own (SQLite's one writer beside
// its readers) each pool has its gate. Those of no tenant (the relay, the
// janitor, migrations) pass ungated, as do the keeper's one-statement
// reads of a stored answer, which take no transaction.
type gatedDriver struct {
	driver.Driver
	writes, reads           *gate.Gate // the same gate for one shared pool
	writeWaits, readWaits   *prometheus.CounterVec
	writeWaited, readWaited func(tenant, outcome string)
}

func newGatedDriver(d driver.Driver, share float64, maxWait time.Duration, reg prometheus.Registerer) (*gatedDriver, error) {
	g := &gatedDriver{Driver: d, writeWaits: waitCounter("write", "Write"), readWaits: waitCounter("read", "Read-only")}
	for _, c := range []prometheus.Collector{g.writeWaits, g.readWaits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	g.writeWaited, g.readWaited = counting(g.writeWaits), counting(g.readWaits)
	var err error
	if g.writes, err = gate.New(writeCapacity(d), share, maxWait, driver.ErrUnavailable); err != nil {
		return nil, err
	}
	g.reads = g.writes
	if w, ok := driver.Optional[driver.WriterBound](d); ok && w.Writers() > 0 {
		if g.reads, err = gate.New(max(1, d.PoolStats().MaxConns-w.Writers()), share, maxWait, driver.ErrUnavailable); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func counting(waits *prometheus.CounterVec) func(tenant, outcome string) {
	return func(tenant, outcome string) { waits.WithLabelValues(tenant, outcome).Inc() }
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

// WriteGate is the gate of the write transactions, and their wait
// counter: the Batcher takes its batches' slots from it (gate.Holder), so
// that one gate decides which tenant's transaction goes next.
func (d *gatedDriver) WriteGate() (*gate.Gate, func(tenant, outcome string)) {
	return d.writes, d.writeWaited
}

func (d *gatedDriver) Begin(ctx context.Context, opts driver.BeginOptions) (driver.TxCloser, error) {
	tenant := tenantFrom(ctx)
	if tenant == "" || gate.Holds(ctx, d.writes) {
		return d.Driver.Begin(ctx, opts)
	}
	g, waited := d.writes, d.writeWaited
	if opts.ReadOnly {
		g, waited = d.reads, d.readWaited
	}
	release, err := g.Acquire(ctx, tenant, waited)
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
