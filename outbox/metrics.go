package outbox

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	backlog        prometheus.Gauge
	oldestAge      prometheus.Gauge
	deadGauge      prometheus.Gauge
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
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_outbox_backlog",
			Help: "Outbox messages committed and not yet published (dead letters excluded)."}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_outbox_oldest_unsent_age_seconds",
			Help: "Age of the oldest unpublished outbox message."}),
		deadGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_outbox_dead_letters",
			Help: "Outbox messages given up after their attempts, awaiting redrive."}),
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
	m.backlog = register(reg, m.backlog, &err)
	m.oldestAge = register(reg, m.oldestAge, &err)
	m.deadGauge = register(reg, m.deadGauge, &err)
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
