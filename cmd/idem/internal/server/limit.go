package server

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/problem"
)

// codeRateLimited is the problem code of a request refused by its
// tenant's limits.
const codeRateLimited = "rate_limited"

// tenantLimits admits each tenant's requests under the operator's bounds
// (config.TenantRate, TenantBurst, TenantConcurrency), so that one
// tenant's flood is refused with 429 before it takes a connection, a batch
// slot or a CPU second from the others. A refusal is 429 with
// Retry-After, never 503: the service is up, the tenant is over its share.
//
// Its tenants are those of the configured API keys (or "default"): the
// map and the metrics' tenant label are bounded by the configuration.
type tenantLimits struct {
	rate        rate.Limit
	burst       int
	concurrency int

	mu      sync.Mutex
	tenants map[string]*tenantState

	limited  *prometheus.CounterVec
	inFlight *prometheus.GaugeVec
}

type tenantState struct {
	limiter  *rate.Limiter // nil: no rate bound
	inFlight int
	// gauge is the tenant's idem_tenant_requests_in_flight and release
	// ends one of its requests: both made with the state, so that a
	// request makes neither.
	gauge   prometheus.Gauge
	release func()
}

// concurrencyRetryAfter is the Retry-After of a request refused because
// its tenant has as many in progress as it may: one typical request's
// time is far less, but Retry-After counts whole seconds.
const concurrencyRetryAfter = time.Second

func newTenantLimits(cfg config.Config, reg prometheus.Registerer) (*tenantLimits, error) {
	l := &tenantLimits{
		rate:        rate.Limit(cfg.TenantRate),
		burst:       cfg.TenantBurst,
		concurrency: cfg.TenantConcurrency,
		tenants:     map[string]*tenantState{},
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_tenant_requests_limited_total",
			Help: "Requests answered 429 by their tenant's limits, by tenant and by the limit hit (rate, concurrency).",
		}, []string{"tenant", "limit"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idem_tenant_requests_in_flight",
			Help: "Authenticated requests in progress, by tenant.",
		}, []string{"tenant"}),
	}
	if l.burst == 0 && cfg.TenantRate > 0 {
		l.burst = max(1, int(math.Ceil(cfg.TenantRate)))
	}
	for _, c := range []prometheus.Collector{l.limited, l.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// admit takes one of tenant's places, or answers w 429 and returns false.
// A true answer's release must be called when the request ends.
func (l *tenantLimits) admit(w http.ResponseWriter, tenant string) (release func(), ok bool) {
	now := time.Now()
	l.mu.Lock()
	st := l.tenants[tenant]
	if st == nil {
		st = &tenantState{}
		if l.rate > 0 {
			st.limiter = rate.NewLimiter(l.rate, l.burst)
		}
		st.gauge = l.inFlight.WithLabelValues(tenant)
		st.release = func() {
			l.mu.Lock()
			st.inFlight--
			l.mu.Unlock()
			st.gauge.Dec()
		}
		l.tenants[tenant] = st
	}
	if l.concurrency > 0 && st.inFlight >= l.concurrency {
		l.mu.Unlock()
		l.refuse(w, tenant, "concurrency", concurrencyRetryAfter,
			"this tenant has "+strconv.Itoa(l.concurrency)+" requests in progress, as many as it may (--tenant-concurrency); retry after one ends")
		return nil, false
	}
	if st.limiter != nil {
		r := st.limiter.ReserveN(now, 1)
		if delay := r.DelayFrom(now); delay > 0 {
			r.CancelAt(now)
			l.mu.Unlock()
			l.refuse(w, tenant, "rate", delay,
				"this tenant is over its request rate ("+strconv.FormatFloat(float64(l.rate), 'g', -1, 64)+"/s, --tenant-rate); retry after Retry-After")
			return nil, false
		}
	}
	st.inFlight++
	release = st.release
	l.mu.Unlock()
	st.gauge.Inc()
	return release, true
}

func (l *tenantLimits) refuse(w http.ResponseWriter, tenant, limit string, after time.Duration, detail string) {
	l.limited.WithLabelValues(tenant, limit).Inc()
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(after.Seconds())))))
	problem.Write(w, http.StatusTooManyRequests, codeRateLimited, detail)
}
