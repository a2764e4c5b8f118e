package webhookout

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// delivererMetrics are labelled by the endpoint's health state and the
// outcome, never by URL or tenant: a label per endpoint would grow with
// the tenants' registrations.
type delivererMetrics struct {
	attempts  *prometheus.CounterVec // health, result
	latency   prometheus.Histogram
	disabled  prometheus.Counter
	pending   prometheus.Gauge
	oldest    prometheus.Gauge
	endpoints *prometheus.GaugeVec // state
}

func newDelivererMetrics(reg prometheus.Registerer) (*delivererMetrics, error) {
	m := &delivererMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_webhook_out_attempts_total",
			Help: "Attempts to deliver to tenants' webhook endpoints, by the endpoint's health before the attempt (healthy, failing) and result (delivered, retry, failed)."},
			[]string{"health", "result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idem_webhook_out_attempt_seconds",
			Help: "Duration of delivery attempts to tenants' webhook endpoints.", Buckets: prometheus.ExponentialBuckets(0.005, 3, 9)}),
		disabled: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_webhook_out_endpoints_disabled_total",
			Help: "Endpoints this process disabled for failing (410 Gone, or failing for the disable period)."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_webhook_out_pending",
			Help: "Pending deliveries to enabled endpoints, database-wide."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_webhook_out_oldest_pending_seconds",
			Help: "Age of the event of the oldest pending delivery to an enabled endpoint."}),
		endpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idem_webhook_out_endpoints",
			Help: "Endpoints failing now (enabled, no success since a failure) and disabled by failures, database-wide."},
			[]string{"state"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.attempts, err = register(reg, m.attempts, err)
	m.latency, err = register(reg, m.latency, err)
	m.disabled, err = register(reg, m.disabled, err)
	m.pending, err = register(reg, m.pending, err)
	m.oldest, err = register(reg, m.oldest, err)
	m.endpoints, err = register(reg, m.endpoints, err)
	return m, err
}

// register registers c, or returns the collector of another deliverer of
// the process registered already, so that both count in one.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, prev error) (C, error) {
	if prev != nil {
		return c, prev
	}
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *delivererMetrics) observe(health, state string, o outcome) {
	result := "retry"
	switch state {
	case "delivered":
		result = "delivered"
	case "failed":
		result = "failed"
	}
	m.attempts.WithLabelValues(health, result).Inc()
	m.latency.Observe(o.latency.Seconds())
}
