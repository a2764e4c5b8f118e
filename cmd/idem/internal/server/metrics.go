package server

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
)

type metrics struct {
	gatherer    prometheus.Gatherer
	requests    *prometheus.HistogramVec
	idempotency *prometheus.CounterVec
	// The children a request touches, bound once per label set.
	byRoute   bound[routeCode, prometheus.Observer]
	byOutcome bound[idemhttp.Kind, prometheus.Counter]
	// unguarded counts, per route, the writes run without a key under
	// --idempotency-key=optional; the routes are a fixed set.
	unguarded *prometheus.CounterVec
	webhooks  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, d driver.Driver) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "code"}),
		idempotency: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_http_idempotency_outcomes_total",
			Help: "Guarded requests by how they were answered: first, replayed, reused, in_flight, missing_key, invalid_key, unavailable, …",
		}, []string{"outcome"}),
		unguarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_http_unguarded_requests_total",
			Help: "Writes run without an Idempotency-Key under --idempotency-key=optional (rollout mode), by operation: once it stops growing, every client sends keys.",
		}, []string{"operation"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_webhook_deliveries_total",
			Help: "Webhook deliveries to configured endpoints by outcome: first, replayed, in_flight, challenge, handler_failed, panicked, unavailable, error, rejected_<code>.",
		}, []string{"endpoint", "outcome"}),
	}
	m.byRoute.make = func(k routeCode) prometheus.Observer {
		return m.requests.WithLabelValues(k.route, strconv.Itoa(k.code))
	}
	m.byOutcome.make = func(k idemhttp.Kind) prometheus.Counter { return m.idempotency.WithLabelValues(string(k)) }
	for _, c := range []prometheus.Collector{m.requests, m.idempotency, m.unguarded, m.webhooks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	if err := RegisterProcessMetrics(reg, d); err != nil {
		return nil, err
	}
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.gatherer = g
	} else {
		m.gatherer = prometheus.DefaultGatherer
	}
	return m, nil
}

// routeCode is the labels of a request's latency.
type routeCode struct {
	route string
	code  int
}

// bound holds a metric vector's children by their labels: a request pays
// a read of a map, not the vector's hashing of its label values, and takes
// no lock: the map is replaced, never written, when a label set is new.
// The label sets are bounded (route patterns, status codes, outcome
// kinds), and so is the map.
type bound[K comparable, V any] struct {
	make func(K) V
	m    atomic.Pointer[map[K]V]
	mu   sync.Mutex // serializes the map's replacements
}

func (b *bound[K, V]) get(k K) V {
	if m := b.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	m := make(map[K]V, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	v := b.make(k)
	m[k] = v
	b.m.Store(&m)
	return v
}

// routeLatency is one route's latency children, bound per status code on
// the code's first request: a request of the route reads its child from
// an array, with no label string made and no map read.
type routeLatency struct {
	route string
	vec   *prometheus.HistogramVec
	codes [500]atomic.Pointer[prometheus.Observer] // status 100..599
}

func (l *routeLatency) get(code int) prometheus.Observer {
	if code < 100 || code > 599 {
		return l.vec.WithLabelValues(l.route, strconv.Itoa(code))
	}
	slot := &l.codes[code-100]
	if o := slot.Load(); o != nil {
		return *o
	}
	// Two first requests bind the same child: the vector keeps one per
	// label set.
	o := l.vec.WithLabelValues(l.route, strconv.Itoa(code))
	slot.Store(&o)
	return o
}

// errUnavailable is what a 503 says: the database, or the service's own
// queue for it, cannot take the request now, or a commit's outcome is not
// confirmed (idemhttp.ProblemFor); its problem's detail says which.
var errUnavailable = errors.New("answered 503: the database is unavailable, the service too busy, or a commit unconfirmed")

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// observe records the request's latency by route and logs it. The log line
// carries no secrets: not the Authorization header, not the idempotency key.
// pattern is the one next is routed under: its latency children are bound
// to it, and a request seen under another pattern (none) is counted by
// that one's.
func (s *Server) observe(pattern string, next http.Handler) http.Handler {
	own := &routeLatency{route: routeLabel(pattern), vec: s.metrics.requests}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		// Every database call of the request ends by this deadline, so a
		// database that stops answering costs the client a 503 with
		// Retry-After (idemhttp.ProblemFor), not a hang.
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DBTimeout)
		defer cancel()
		r, span := startSpan(r.WithContext(ctx))
		next.ServeHTTP(sw, r)
		endSpan(span, cmp.Or(sw.status, http.StatusOK))
		route := routeLabel(r.Pattern)
		switch {
		case sw.status == http.StatusServiceUnavailable:
			s.unavailable.Fail(r.Method+" "+route, errUnavailable)
		case sw.status < 500:
			s.unavailable.OK()
		}
		elapsed := time.Since(start)
		if route == own.route {
			own.get(sw.status).Observe(elapsed.Seconds())
		} else {
			s.metrics.byRoute.get(routeCode{route, sw.status}).Observe(elapsed.Seconds())
		}
		if s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.Debug("http", "method", r.Method, "route", route, "status", sw.status,
				"duration_ms", elapsed.Milliseconds(), "replayed", sw.Header().Get("Idempotent-Replayed") == "true")
		}
	})
}

// routeLabel is a request's route label: its pattern, or "unmatched".
func routeLabel(pattern string) string {
	if pattern == "" || pattern == "/" {
		return "unmatched"
	}
	return pattern
}
