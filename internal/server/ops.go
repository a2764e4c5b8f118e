package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemhq/idem/driver"
)

// readyTimeout bounds the readiness check: a database that takes longer to
// say which migration it is at is not ready.
const readyTimeout = 2 * time.Second

// readiness is the /readyz check: the database answers and is at the
// binary's latest migration. It returns the status to answer and its body.
func readiness(ctx context.Context, d driver.Driver) (int, map[string]any) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	applied, latest, err := d.MigrationStatus(ctx)
	switch {
	case err != nil:
		return http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "reason": "database unreachable"}
	case applied != latest:
		return http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "reason": "migrations pending", "migration": applied, "latest": latest}
	default:
		return http.StatusOK, map[string]any{"status": "ok", "migration": applied}
	}
}

// writeHealth answers /healthz: liveness, whatever the database does.
func writeHealth(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// writeReadiness answers /readyz with the readiness check.
func writeReadiness(w http.ResponseWriter, r *http.Request, d driver.Driver) {
	status, body := readiness(r.Context(), d)
	if body["reason"] == "database unreachable" {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// newReadyGauge is idem_ready: the readiness check, run at each scrape, so
// that an alert sees a database outage even when no request arrives and
// nobody polls /readyz.
func newReadyGauge(d driver.Driver) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_ready",
		Help: "1 when the database answers and is at this binary's latest migration (the /readyz check, run at each scrape), else 0.",
	}, func() float64 {
		if status, _ := readiness(context.Background(), d); status != http.StatusOK {
			return 0
		}
		return 1
	})
}

// OpsHandler answers /healthz, /readyz and /metrics for a process that
// serves no API: `idem relay --metrics-addr`. It registers the Go and
// process collectors and idem_ready on reg, beside what is already there
// (the relay's metrics).
func OpsHandler(d driver.Driver, reg *prometheus.Registry) (http.Handler, error) {
	for _, c := range []prometheus.Collector{newReadyGauge(d),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { writeHealth(w) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { writeReadiness(w, r, d) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, nil
}
