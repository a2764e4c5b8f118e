package outbox

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	stats          *statsCollector
	shards         prometheus.Gauge
	published      prometheus.Counter
	failures       prometheus.Counter
	dead           prometheus.Counter
	publishSeconds prometheus.Histogram
}

// newMetrics builds the relay's metrics and registers them on reg (none
// when reg is nil). Several relays on one registry share the collectors.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		stats: newStatsCollector(),
		shards: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_outbox_relay_shards",
			Help: "Outbox shards this process's relay leases."}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_outbox_published_total",
			Help: "Outbox messages the broker acknowledged."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_outbox_publish_failures_total",
			Help: "Publish attempts the broker refused (outages excluded)."}),
		dead: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_outbox_dead_lettered_total",
			Help: "Outbox messages that became dead letters."}),
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idem_outbox_publish_seconds",
			Help: "Duration of one publish round (one message per key).", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.stats = register(reg, m.stats, &err)
	m.shards = register(reg, m.shards, &err)
	m.published = register(reg, m.published, &err)
	m.failures = register(reg, m.failures, &err)
	m.dead = register(reg, m.dead, &err)
	m.publishSeconds = register(reg, m.publishSeconds, &err)
	return m, err
}

// register registers c, or returns the collector already registered under
// its name.
func register[T prometheus.Collector](reg prometheus.Registerer, c T, errp *error) T {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		*errp = errors.Join(*errp, err)
	}
	return c
}

// statsCollector exports the outbox's database-wide figures (backlog, dead
// letters, oldest unsent age). Every relay process can read them, but only
// the relay that leases shard 0 reports them: there is one such relay at a
// time, so a sum over every process's scrape counts the backlog once, and a
// relay that loses shard 0 stops exporting the figures instead of leaving a
// stale copy behind. Until a relay holds shard 0 the series are absent.
type statsCollector struct {
	backlogDesc, ageDesc, deadDesc *prometheus.Desc

	mu       sync.Mutex
	reporter string // the Owner of the relay whose figures these are, or ""
	backlog  float64
	age      float64
	dead     float64
}

func newStatsCollector() *statsCollector {
	return &statsCollector{
		backlogDesc: prometheus.NewDesc("idem_outbox_backlog",
			"Outbox messages committed and not yet published (dead letters excluded); reported by the relay leasing shard 0.", nil, nil),
		ageDesc: prometheus.NewDesc("idem_outbox_oldest_unsent_age_seconds",
			"Age of the oldest unpublished outbox message; reported by the relay leasing shard 0.", nil, nil),
		deadDesc: prometheus.NewDesc("idem_outbox_dead_letters",
			"Outbox messages given up after their attempts, awaiting redrive; reported by the relay leasing shard 0.", nil, nil),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlogDesc
	ch <- c.ageDesc
	ch <- c.deadDesc
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reporter == "" {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.backlogDesc, prometheus.GaugeValue, c.backlog)
	ch <- prometheus.MustNewConstMetric(c.ageDesc, prometheus.GaugeValue, c.age)
	ch <- prometheus.MustNewConstMetric(c.deadDesc, prometheus.GaugeValue, c.dead)
}

// set records the figures owner read while it leases shard 0.
func (c *statsCollector) set(owner string, backlog, age, dead float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reporter, c.backlog, c.age, c.dead = owner, backlog, age, dead
}

// drop stops exporting owner's figures, if they are the ones exported.
func (c *statsCollector) drop(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reporter == owner {
		c.reporter = ""
	}
}
