// Package console is idem's operator web console, served at /ui/: look up an
// idempotency key and tell its request's story, watch the outbox's flow and
// redrive dead letters, browse the events, and travel back in an account's
// history to see what the ledger believed at any moment. Pages are server-rendered html/template and work without
// JavaScript; a little script (embedded, no build step) only makes the time
// slider update in place.
//
// Access: with an admin key configured, a request must carry it as
// Authorization: Bearer, or a session cookie the login form sets (an
// HMAC-signed token, never the key itself, live until it expires or its
// operator logs out). Failed logins are limited per client address.
// Without an admin key, the console answers only loopback clients that
// name this machine in their Host header. State-changing forms carry a
// CSRF token and must come from the console's own pages (Sec-Fetch-Site,
// else Origin, else Referer).
package console

import (
	"crypto/rand"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/internal/money"
	"github.com/idemhq/idem/internal/problem"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox/webhookout"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// OutboxView is what the console needs from the outbox; see
// inspect.OutboxView. The outbox package implements it.
type OutboxView = inspect.OutboxView

// Config configures New. Comments give defaults and bounds.
type Config struct {
	// Driver is the database. Required.
	Driver driver.Driver
	// Ledger reads accounts and transfers. Required.
	Ledger *ledger.Ledger
	// AdminKeyHash is the SHA-256 of the admin key. Default nil: no key, and
	// only loopback clients (by the connection's remote address) may use the
	// console.
	AdminKeyHash *[32]byte
	// Outbox backs the outbox page. Default nil: the page says the outbox is
	// not available.
	Outbox OutboxView
	// Logger receives faults. Default slog.Default().
	Logger *slog.Logger
	// Clock is the time source for sessions and ages. Default time.Now.
	Clock func() time.Time
	// SessionTTL is how long a login lasts. Default 12h; bound 1m..7 days.
	SessionTTL time.Duration
	// Currencies gives the minor-unit exponents amounts are shown with.
	// Default nil: ISO 4217's, and codes it does not list are shown in
	// minor units.
	Currencies *money.Currencies
	// Endpoints backs the webhooks page (the tenants' own endpoints).
	// Default nil: the page says they are not available.
	Endpoints *webhookout.Endpoints
	// SampleInterval is how often Run samples the outbox for the outbox
	// page's charts. Default 10s; bound 1s..1m.
	SampleInterval time.Duration
	// KeyRetention is how long the service keeps idempotency records (its
	// --key-retention): the story page finds the request that wrote a
	// transfer among the records expiring that long after it. Default
	// 24h; bound 1m..400 days (the service's own bound).
	KeyRetention time.Duration
}

const (
	defaultSessionTTL = 12 * time.Hour
	maxSessionTTL     = 7 * 24 * time.Hour
)

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = defaultSessionTTL
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = defaultSampleInterval
	}
	if c.KeyRetention == 0 {
		c.KeyRetention = 24 * time.Hour
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Driver == nil:
		return errors.New("console: Driver is required")
	case c.Ledger == nil:
		return errors.New("console: Ledger is required")
	case c.SessionTTL < time.Minute || c.SessionTTL > maxSessionTTL:
		return errors.New("console: SessionTTL is outside 1m..7 days")
	case c.SampleInterval < minSampleInterval || c.SampleInterval > maxSampleInterval:
		return errors.New("console: SampleInterval is outside 1s..1m")
	case c.KeyRetention < time.Minute || c.KeyRetention > 400*24*time.Hour:
		return errors.New("console: KeyRetention is outside 1m..400 days")
	}
	return nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves the operator pages.
type Console struct {
	cfg Config
	// secret signs session and CSRF tokens. It is drawn at start, so a
	// restart logs every operator out; nothing secret is ever derived from
	// (or stored beside) the admin key.
	secret [32]byte
	// sessions are the live logins; limiter counts failed ones.
	sessions *sessionStore
	limiter  *loginLimiter
	// crossOrigin refuses form posts from other sites' pages.
	crossOrigin *http.CrossOriginProtection
	pages       map[string]*template.Template
	handler     http.Handler
	// flow keeps the outbox samples Run takes; replays the replays
	// NoteReplay records.
	flow    *flowSampler
	replays *replayLog
}

// New returns the console.
func New(cfg Config) (*Console, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, pages: map[string]*template.Template{}, sessions: newSessionStore(),
		limiter: newLoginLimiter(loginBurst, loginInterval, maxLoginClients), crossOrigin: http.NewCrossOriginProtection(),
		flow: newFlowSampler(cfg.SampleInterval, cfg.Clock()), replays: newReplayLog(cfg.Clock().UTC())}
	if _, err := rand.Read(c.secret[:]); err != nil {
		return nil, err
	}
	amounts := template.FuncMap{"money": cfg.Currencies.Format}
	for _, page := range []string{"home", "keys", "account", "transfer", "outbox", "login", "message", "story", "events", "redrive", "webhooks"} {
		t, err := template.New("layout.html").Funcs(funcs).Funcs(presentFuncs).Funcs(amounts).Funcs(storyFuncs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, err
		}
		c.pages[page] = t
	}
	c.handler = c.routes()
	return c, nil
}

// Handler serves every path under Prefix; mount it there.
func (c *Console) Handler() http.Handler { return c.handler }

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static") // the directory is embedded above
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", c.files(static)))
	mux.HandleFunc("GET /ui/login", c.loginForm)
	mux.HandleFunc("POST /ui/login", c.login)
	mux.Handle("POST /ui/logout", c.authed(c.csrf(c.logout)))
	mux.Handle("GET /ui/{$}", c.authed(c.home))
	mux.Handle("GET /ui/keys", c.authed(c.keys))
	mux.Handle("GET /ui/accounts", c.authed(c.account))
	mux.Handle("GET /ui/transfers/{id}", c.authed(c.transfer))
	mux.Handle("GET /ui/outbox", c.authed(c.outbox))
	mux.Handle("POST /ui/outbox/redrive", c.authed(c.csrf(c.redrive)))
	mux.Handle("GET /ui/story", c.authed(c.story))
	mux.Handle("GET /ui/events", c.authed(c.events))
	mux.Handle("GET /ui/webhooks", c.authed(c.webhooks))
	mux.Handle("POST /ui/webhooks/replay", c.authed(c.csrf(c.replayWebhook)))
	mux.Handle("/ui/", c.authed(func(w http.ResponseWriter, r *http.Request) {
		c.message(w, r, http.StatusNotFound, "Not found", "There is no console page at "+r.URL.Path+".")
	}))
	return c.guard(mux)
}

// files serves the embedded static files, and 404 for a directory: the
// console lists nothing it does not link to.
func (c *Console) files(fsys fs.FS) http.Handler {
	fileServer := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimSuffix(r.URL.Path, "/")
		if st, err := fs.Stat(fsys, name); name == "" || err != nil || st.IsDir() {
			c.message(w, r, http.StatusNotFound, "Not found", "There is no console file at /ui/static/"+r.URL.Path+".")
			return
		}
		fileServer.ServeHTTP(w, r)
	})
}

// guard gates everything — static files included — and sets the headers
// every console answer carries. Without an admin key only loopback clients
// may come in, and only under a name of this machine: a page of another
// site that had its name resolve to 127.0.0.1 (DNS rebinding) reaches the
// console from loopback, but under its own name, and is answered 421. A
// form post must come from the console's own pages.
func (c *Console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Scripts and styles come only from the console itself, so an
		// injected string can never run; the console is never framed.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// No console URL (they hold tenants, keys and accounts) is sent
		// to another site; the console's own form posts keep their
		// Origin, which a no-referrer policy would turn into "null".
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if c.cfg.AdminKeyHash == nil && !isLoopback(r) {
			c.message(w, r, http.StatusForbidden, "Forbidden",
				"No admin key is configured, so the console answers only this machine. Set IDEM_ADMIN_KEY to use it from elsewhere.")
			return
		}
		if c.cfg.AdminKeyHash == nil && !config.IsLoopbackHost(r.Host) {
			c.cfg.Logger.Warn("console: refused a request for a host name that is not this machine's (no admin key: loopback names only)",
				"host", clip(r.Host), "path", clip(r.URL.Path))
			problem.Write(w, http.StatusMisdirectedRequest, "misdirected_request",
				"without an admin key the console answers only requests for localhost, 127.0.0.1 or [::1]")
			return
		}
		// Sec-Fetch-Site, else Origin, else Referer against Host: a
		// browser says where a post comes from, and another site's page is
		// refused even with a valid CSRF token. Clients that are not
		// browsers send none of them.
		if err := c.crossOrigin.Check(r); err != nil || foreignReferer(r) {
			c.cfg.Logger.Warn("console: refused a form post from another site", "path", clip(r.URL.Path),
				"origin", clip(r.Header.Get("Origin")), "sec_fetch_site", clip(r.Header.Get("Sec-Fetch-Site")), "addr", clientAddr(r))
			c.message(w, r, http.StatusForbidden, "Forbidden",
				"This form was posted from another site. Use the console's own pages.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// foreignReferer reports whether a post from a browser too old to send
// Sec-Fetch-Site or Origin names another site's page as its Referer.
func foreignReferer(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	ref := r.Header.Get("Referer")
	if ref == "" || r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != "" {
		return false
	}
	u, err := url.Parse(ref)
	return err != nil || u.Host != r.Host
}

// clip bounds a client's string before it is logged or shown.
func clip(s string) string {
	if len(s) > 255 {
		return s[:255] + "…"
	}
	return s
}
