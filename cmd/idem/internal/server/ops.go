package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
)

// OpsHandler serves what an orchestrator and Prometheus ask of a process
// that has no API of its own (idem relay): GET /metrics from g, /healthz and
// /readyz as serve answers them. relay, when not nil, is the process's
// relay, whose unreplicated commits /readyz reports.
func OpsHandler(d driver.Driver, g prometheus.Gatherer, log *slog.Logger, relay *outbox.Relay) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", readyz(d, log, relay))
	return mux
}

// readyTimeout bounds the readiness check: a database that takes longer to
// say which migration it is at is not ready.
const readyTimeout = 2 * time.Second

// healthz answers 200 while the process serves HTTP at all.
func healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the database answers and the binary can run on
// its schema: fully migrated, or newer but compatible. A database that
// cannot be used is logged once when the reason changes, not at each poll.
func readyz(d driver.Driver, log *slog.Logger, relay *outbox.Relay) http.HandlerFunc {
	var last notReady
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		st, err := d.MigrationStatus(ctx)
		last.note(log, err)
		var unreplicatedSince time.Time
		unreplicated := false
		if relay != nil {
			unreplicatedSince, unreplicated = relay.Unreplicated()
		}
		switch {
		case err != nil:
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "reason": unreachable(err)})
		case st.Pending():
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "reason": "migrations pending", "migration": st.Applied, "latest": st.Latest})
		case st.TooNew():
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "reason": "schema too new for this binary",
				"migration": st.Applied, "latest": st.Latest, "required": st.Required})
		case unreplicated:
			// The database reads, but a commit is not acknowledged: the
			// relay's log says so once, this says so while it lasts.
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable",
				"reason": "database commits not confirmed replicated: the primary waits for a synchronous standby it lacks",
				"since":  unreplicatedSince.UTC().Format(time.RFC3339)})
		default:
			// A schema newer than the binary but compatible with it (an
			// expand step of a rolling upgrade) is ready too.
			writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "migration": st.Applied})
		}
	}
}

// unreachable is /readyz's reason for a database it could not use.
func unreachable(err error) string {
	switch {
	case errors.Is(err, driver.ErrReadOnlyServer):
		return "database read-only"
	case errors.Is(err, driver.ErrTooManyConnections):
		return "database refuses connections: too many"
	case errors.Is(err, driver.ErrPoolerExhausted):
		return "database pooler has no server connection free for idem"
	}
	return "database unreachable"
}

// notReady remembers the last reason /readyz could not use the database,
// so that each change is logged once.
type notReady struct {
	mu     sync.Mutex
	reason string
}

func (n *notReady) note(log *slog.Logger, err error) {
	reason := ""
	if err != nil {
		reason = unreachable(err)
	}
	n.mu.Lock()
	changed := reason != n.reason
	n.reason = reason
	n.mu.Unlock()
	switch {
	case !changed:
	case err != nil:
		log.Error("idem: not ready: "+reason, "err", err)
	default:
		log.Info("idem: the database answers again")
	}
}

// RegisterProcessMetrics registers what every idem process exports besides
// its own work: readiness (idem_ready), the database pool (idem_db_pool_*),
// the Go runtime and the process.
func RegisterProcessMetrics(reg prometheus.Registerer, d driver.Driver) error {
	for _, c := range []prometheus.Collector{newPoolCollector(d), newReadyGauge(d),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// poolCollector reads the database pool's state at each scrape.
type poolCollector struct {
	d                                                 driver.Driver
	maxConns, conns, waits, waitSeconds, unreplicated *prometheus.Desc
}

func newPoolCollector(d driver.Driver) *poolCollector {
	return &poolCollector{
		d: d,
		maxConns: prometheus.NewDesc("idem_db_pool_max_connections",
			"Connections the database pool may open.", nil, nil),
		conns: prometheus.NewDesc("idem_db_pool_connections",
			"Open database connections by state: in_use (acquired) or idle.", []string{"state"}, nil),
		waits: prometheus.NewDesc("idem_db_pool_waits_total",
			"Connection acquires that found no idle connection and waited.", nil, nil),
		waitSeconds: prometheus.NewDesc("idem_db_pool_wait_seconds_total",
			"Time spent waiting for a database connection.", nil, nil),
		unreplicated: prometheus.NewDesc("idem_db_unreplicated_commits_total",
			"Commits PostgreSQL made on the primary but could not confirm reached its synchronous standbys: not acknowledged (503).", nil, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.maxConns
	ch <- c.conns
	ch <- c.waits
	ch <- c.waitSeconds
	ch <- c.unreplicated
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.d.PoolStats()
	ch <- prometheus.MustNewConstMetric(c.maxConns, prometheus.GaugeValue, float64(s.MaxConns))
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.InUse), "in_use")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.Idle), "idle")
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(s.Waits))
	ch <- prometheus.MustNewConstMetric(c.waitSeconds, prometheus.CounterValue, s.WaitTime.Seconds())
	ch <- prometheus.MustNewConstMetric(c.unreplicated, prometheus.CounterValue, float64(s.Unreplicated))
}

// newReadyGauge is idem_ready: the /readyz check, run at each scrape, so
// that an alert sees a database outage even when no request arrives and
// nobody polls /readyz.
func newReadyGauge(d driver.Driver) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_ready",
		Help: "1 when the database answers and this binary can run on its schema (the /readyz check, run at each scrape), else 0.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		if st, err := d.MigrationStatus(ctx); err != nil || !st.Runnable() {
			return 0
		}
		return 1
	})
}
