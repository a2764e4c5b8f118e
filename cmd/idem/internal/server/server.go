// Package server is the idem HTTP service: the ledger API behind the
// Idempotency-Key middleware, tenants from API keys, the webhook intake
// (verified provider deliveries deduplicated by their event id), health,
// readiness and metrics. cmd/idem's serve wires it to a database and a listener.
package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/money"
	"github.com/idemhq/idem/internal/outage"
	"github.com/idemhq/idem/internal/problem"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookout"
)

// retryAfter is the Retry-After of the service's 409 and 503 answers: the
// middleware's, the webhook intake's and its own (idemhttp.ProblemFor).
const retryAfter = time.Second

// Server serves the HTTP API.
type Server struct {
	// unavailable logs the 503s the API answers: a line when they begin,
	// at most one a minute while they last, a line when they end.
	unavailable *outage.Log
	cfg         config.Config
	d           driver.Driver
	// base is the driver beneath the tenants' gate, for work of no
	// tenant's: the hold expiry.
	base   driver.Driver
	keeper *idem.Keeper
	ledger *ledger.Ledger
	outbox *outbox.Outbox
	guard  *idemhttp.Middleware
	// writes is the group commit of the ledger's writes; nil when
	// cfg.GroupCommit is off.
	writes *idem.Batcher[ledgerWrite]
	// relay publishes the outbox when cfg.Relay; closeRelay closes its
	// publisher after it stopped.
	relay      *Relay
	closeRelay func()
	metrics    *metrics
	// endpoints are the tenants' own webhook endpoints
	// (/v1/webhook-endpoints).
	endpoints *webhookout.Endpoints
	// webhooks is the intake of POST /v1/webhooks/{endpoint}.
	webhooks *webhooks
	// limits admits each tenant's requests under its rate and concurrency.
	limits  *tenantLimits
	log     *slog.Logger
	tenants map[[sha256.Size]byte]string
	// currencies are the exponents the console shows amounts with.
	currencies *money.Currencies
	// console is the operator console (nil when it could not be built):
	// Run runs its outbox sampler, and replays are reported to it.
	console *console.Console
	// crossOrigin checks keyless writes (keylessWrite).
	crossOrigin *http.CrossOriginProtection
	handler     http.Handler

	testHooks testHooks
}

// testHooks let tests see inside the server; set only by tests, before
// the server is used, and nil in production.
type testHooks struct {
	// applied is called, inside the transaction, with the keys of the
	// writes applyWrites has just applied, in the order it applied them.
	applied func([]idem.Key)
}

// New builds the service on a migrated database, with the outbox relay and
// its publisher when cfg.Relay. Metrics register on reg.
func New(ctx context.Context, cfg config.Config, d driver.Driver, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := d // the relay's transactions are no tenant's
	gd, err := newGatedDriver(d, cmp.Or(cfg.BatchShare, 0.5), cfg.DBTimeout, reg)
	if err != nil {
		return nil, err
	}
	d = gd
	keeper, err := idem.New(d, idem.Config{Retention: cfg.KeyRetention, Memory: cfg.KeyMemory, Wait: cfg.InFlightWait,
		JanitorTimeout: cfg.DBTimeout, Logger: log, Sealer: cfg.Sealer})
	if err != nil {
		return nil, err
	}
	// A group-commit batch is one Apply call: its ops bound is the batch's.
	l, err := ledger.New(d, ledger.Config{MaxBatch: maxLedgerBatch})
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(d, outbox.Config{Sealer: cfg.Sealer})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, d: d, base: base, keeper: keeper, ledger: l, outbox: ob, log: log,
		unavailable: outage.New("idem: API", log, nil), crossOrigin: http.NewCrossOriginProtection(),
		tenants: make(map[[sha256.Size]byte]string, len(cfg.APIKeys))}
	for _, k := range cfg.APIKeys {
		s.tenants[k.Hash] = k.Tenant
	}
	if s.currencies, err = money.New(cfg.CurrencyExponents); err != nil {
		return nil, err
	}
	if s.metrics, err = newMetrics(reg, d); err != nil {
		return nil, err
	}
	if s.limits, err = newTenantLimits(cfg, reg); err != nil {
		return nil, err
	}
	if s.endpoints, err = webhookout.New(d, webhookout.Config{AllowNetworks: cfg.WebhookAllowNetworks, Sealer: cfg.Sealer}); err != nil {
		return nil, err
	}
	if s.webhooks, err = newWebhooks(d, cfg.Webhooks, cfg.KeyRetention, cfg.InFlightWait, cfg.Sealer, log, s.countWebhook); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	s.guard, err = idemhttp.New(idemhttp.Config{
		Keeper:          keeper,
		MaxBodyBytes:    cfg.MaxBodyBytes,
		RetryAfter:      retryAfter,
		Logger:          log,
		AllowMissingKey: cfg.IdempotencyKey == config.KeyOptional,
		// DELETE is a write too (DELETE /v1/webhook-endpoints/{id}): a
		// retry answers as the first did, not 404.
		Methods: []string{http.MethodPost, http.MethodPatch, http.MethodDelete},
		OnAnswer: func(r *http.Request, kind idemhttp.Kind) {
			s.metrics.byOutcome.get(kind).Inc()
			if kind == idemhttp.KindUnguarded {
				s.metrics.unguarded.WithLabelValues(operationOf(r)).Inc()
			}
			// A first arrival has just committed, maybe with events: wake
			// the relay now rather than at its next poll.
			if kind == idemhttp.KindFirst && s.relay != nil {
				s.relay.Notify()
			}
			// A replay leaves no trace in the database: the console
			// remembers the newest ones for the request's story.
			if kind == idemhttp.KindReplayed && s.console != nil {
				if key, err := idem.ParseKey(r.Header.Get(idemhttp.HeaderKey)); err == nil {
					s.console.NoteReplay(tenantFrom(r.Context()), operationOf(r), key)
				}
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if cfg.GroupCommit {
		s.writes, err = idem.NewBatcher(keeper, s.applyWrites, idem.BatchConfig{
			MaxBatch: cfg.BatchMax, Concurrency: cfg.BatchConcurrency, Share: cfg.BatchShare})
		if err != nil {
			return nil, err
		}
	}
	if cfg.Relay {
		if s.relay, s.closeRelay, err = NewRelay(ctx, cfg, base, log, reg, os.Stdout); err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
	}
	s.handler = s.routes()
	return s, nil
}

// writeCapacity is how many write transactions the tenants share (the
// write gate's slots): SQLite's one writer, or the whole PostgreSQL pool,
// whose slots the reads share.
// Not the pool less group commit's connections: the batches are gated
// too, under their tenant, so a tenant's batches count in its share.
func writeCapacity(d driver.Driver) int {
	if w, ok := driver.Optional[driver.WriterBound](d); ok && w.Writers() > 0 {
		return w.Writers()
	}
	return max(1, d.PoolStats().MaxConns)
}

// Keeper is the service's keeper (its janitor runs beside the server).
func (s *Server) Keeper() *idem.Keeper { return s.keeper }

// Console is the service's operator console, served under /ui/; nil when
// it could not be built (the service log says why).
func (s *Server) Console() *console.Console { return s.console }

// Handler is the service's root handler.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// Writes go through the Idempotency-Key middleware: the handler runs in
	// the transaction that claims the key and stores the answer. A body
	// declared as something other than JSON is refused before.
	// Under --idempotency-key=optional a write without a key runs in a
	// transaction of its own (ownTx; rollout.go).
	write := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.observe(pattern, s.authenticate(jsonBody(s.keylessWrite(s.guard.Wrap(s.ownTx(h)))))))
	}
	read := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.observe(pattern, s.authenticate(h)))
	}
	// The ledger's writes share transactions (group commit) unless it is
	// off: then each runs in its own, as any guarded handler.
	ledgerRoute := func(pattern string, decode func(http.ResponseWriter, *http.Request, []byte) (ledgerWrite, bool)) {
		if s.writes == nil {
			write(pattern, s.writeOne(decode))
			return
		}
		var h http.Handler = idemhttp.Batched(s.guard, s.writes, decode)
		if s.keyOptional() {
			h = keyless(h, s.guard.Wrap(s.ownTx(s.writeOne(decode))))
		}
		mux.Handle(pattern, s.observe(pattern, s.authenticate(jsonBody(s.keylessWrite(h)))))
	}
	ledgerRoute("POST /v1/accounts", s.decodeAccount)
	read("GET /v1/accounts/{id}", s.getAccount)
	read("GET /v1/accounts/{id}/balance", s.getBalance)
	read("GET /v1/accounts/{id}/entries", s.listEntries)
	ledgerRoute("POST /v1/transfers", s.decodeTransfer)
	read("GET /v1/transfers", s.listTransfers)
	write("POST /v1/transfers/batch", s.postTransferBatch)
	read("GET /v1/transfers/{id}", s.getTransfer)
	ledgerRoute("POST /v1/transfers/{id}/reversals", s.decodeReversal)
	ledgerRoute("POST /v1/transfers/{id}/post", s.decodeSettlement(ledger.SettlePost))
	ledgerRoute("POST /v1/transfers/{id}/void", s.decodeSettlement(ledger.SettleVoid))
	read("GET /v1/events", s.listEvents)
	s.webhookEndpointRoutes(write, read)
	// Webhook deliveries carry neither an API key nor an Idempotency-Key:
	// the provider's signature authenticates them, the endpoint's
	// configuration names their tenant, and their stable event id is the key.
	mux.Handle("POST /v1/webhooks/{endpoint}", s.observe("POST /v1/webhooks/{endpoint}", s.webhooks.intake))

	s.mountConsole(mux)
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", readyz(s.d, s.log, s.Relay()))
	mux.HandleFunc("GET /openapi.json", s.openapi)
	// With --metrics-addr, /metrics is served there only (serve.go), so
	// that the public port does not show it. Without it, and with API
	// keys (a port others reach), it needs the admin key: the series name
	// tenants and their traffic.
	if s.cfg.MetricsAddr == "" {
		var metrics http.Handler = promhttp.HandlerFor(s.metrics.gatherer, promhttp.HandlerOpts{})
		if len(s.tenants) > 0 {
			metrics = s.adminOnly(metrics)
		}
		mux.Handle("GET /metrics", metrics)
	}
	mux.Handle("/", s.observe("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, http.StatusNotFound, codeNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	})))
	return s.protect(mux)
}

// adminOnly serves next to a request bearing the admin key
// (Authorization: Bearer), compared by its SHA-256 in constant time.
// Without an admin key it serves nobody: 404, naming the two ways to get
// the metrics.
func (s *Server) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.AdminKeyHash == nil {
			problem.Write(w, http.StatusNotFound, codeNotFound,
				"with API keys, /metrics is served on --metrics-addr, or here to the admin key (--admin-key)")
			return
		}
		token, ok := bearer(r)
		sum := sha256.Sum256([]byte(token))
		if !ok || subtle.ConstantTimeCompare(sum[:], s.cfg.AdminKeyHash[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem metrics"`)
			problem.Write(w, http.StatusUnauthorized, codeUnauthorized, "/metrics needs the admin key as Authorization: Bearer")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate puts the request's tenant in its context: the one whose API
// key it bears, or idem.DefaultTenant when no keys are configured; then it
// admits the request under the tenant's limits (429 when over them).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := idem.DefaultTenant
		if len(s.tenants) > 0 {
			token, ok := bearer(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="idem"`)
				problem.Write(w, http.StatusUnauthorized, codeUnauthorized, "an Authorization: Bearer API key is required")
				return
			}
			// Keys are kept only as SHA-256 hashes and looked up by the
			// presented token's hash: the lookup's timing says nothing about
			// the tokens themselves.
			t, found := s.tenants[sha256.Sum256([]byte(token))]
			if !found {
				w.Header().Set("WWW-Authenticate", `Bearer realm="idem", error="invalid_token"`)
				problem.Write(w, http.StatusUnauthorized, codeUnauthorized, "the API key is not valid")
				return
			}
			tenant = t
		}
		release, ok := s.limits.admit(w, tenant)
		if !ok {
			return
		}
		defer release()
		next.ServeHTTP(w, r.WithContext(withTenant(r.Context(), tenant)))
	})
}

// operationOf is the operation idemhttp stores a request's key under (its
// default Config.Operation): the method and the matched route pattern
// without the pattern's own method.
func operationOf(r *http.Request) string {
	p := r.Pattern
	if i := strings.IndexAny(p, " \t"); i >= 0 && !strings.Contains(p[:i], "/") {
		p = strings.TrimLeft(p[i:], " \t")
	}
	return r.Method + " " + p
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// withTenant puts the request's tenant in ctx. The tenant is also the
// scope idemhttp keys the request under (its default Config.Scope reads
// ScopeFrom): one context value holds both.
func withTenant(ctx context.Context, t string) context.Context {
	return idemhttp.WithScope(ctx, t)
}

func tenantFrom(ctx context.Context) string { return idemhttp.ScopeFrom(ctx) }

// Relay is the relay serve runs (nil with --relay=false), for the
// /readyz of --metrics-addr.
func (s *Server) Relay() *outbox.Relay {
	if s.relay == nil {
		return nil
	}
	return s.relay.Relay
}

// Run serves on ln until ctx is done, then stops accepting, drains the
// requests in flight (bounded by ShutdownTimeout), waits for the background
// work (the janitor's batch in progress commits: the caller closes the
// driver next) and returns.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	// active counts the requests a handler is running, so that shutdown
	// can say how many it waited for.
	var active atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			active.Add(1)
			defer active.Add(-1)
			s.handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	bgCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	// The janitor's batch in progress ends before the driver closes.
	janitorDone := make(chan struct{})
	go func() {
		defer close(janitorDone)
		s.keeper.RunJanitor(bgCtx)
	}()
	expiryDone := make(chan struct{})
	go func() {
		defer close(expiryDone)
		s.runHoldExpiry(bgCtx)
	}()
	// The console's outbox sampler lives as long as the server.
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		if s.console != nil {
			// It returns when bgCtx ends, with nil: any error is a fault.
			if err := s.console.Run(bgCtx); err != nil {
				s.log.Error("idem: console sampler stopped", "err", err)
			}
		}
	}()
	relayDone := make(chan struct{})
	if s.relay != nil {
		go func() {
			defer close(relayDone)
			if err := s.relay.Run(bgCtx); err != nil && bgCtx.Err() == nil {
				s.log.Error("idem: relay stopped", "err", err)
			}
		}()
	} else {
		close(relayDone)
	}
	// The relay stops after the HTTP server has drained, so the events of
	// the last requests are still published promptly; what it leaves
	// unsent, the next relay publishes.
	defer func() {
		stopBackground()
		<-janitorDone
		<-expiryDone
		<-samplerDone
		<-relayDone
		if s.closeRelay != nil {
			s.closeRelay()
		}
		s.log.Info("idem: stopped")
	}()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	draining, began := active.Load(), time.Now()
	s.log.Info("idem: shutting down, draining requests", "requests", draining, "timeout", s.cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		s.log.Warn("idem: drain cut short by --shutdown-timeout", "requests", draining,
			"unfinished", active.Load(), "took", time.Since(began).Round(time.Millisecond))
		return fmt.Errorf("shutdown: %w", err)
	}
	if s.writes != nil {
		if err := s.writes.Close(shutdownCtx); err != nil { // the drained requests' batches have answered
			s.log.Warn("idem: shutting down", "err", err)
		}
	}
	s.log.Info("idem: drained", "requests", draining, "took", time.Since(began).Round(time.Millisecond))
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
