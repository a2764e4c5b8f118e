// Package run holds what a load run and its verification share: the
// configuration (Config), the client that sends operations to the service
// with bounded retries (Client, Pool), the journal of operations (Journal,
// Op, Kind), the counters and violations (Stats) and the report. The
// generator (package load) and the verifier (package verify) both stand on
// it, so the verifier needs nothing of the generator, and a journal written
// by one run can be verified again later.
package run

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"
)

// Config configures Run. Each field's comment states its default and bound.
type Config struct {
	// Targets are the base URLs of the service (http://host:port); requests
	// are spread over them. Required unless Chaos supervises its own.
	// At most 64.
	Targets []string
	// APIKey is sent as "Authorization: Bearer APIKey" when set.
	APIKey string
	// Accounts is how many accounts the run creates. Default 16; bound 2..10000.
	Accounts int
	// Operations is how many unique transfers, reversals, webhook
	// deliveries, holds, posts and voids the main phase sends. Default 1000; bound 1..10,000,000.
	Operations int
	// Duration stops the main phase early when it has run this long.
	// Default 30s; bound 1s..24h.
	Duration time.Duration
	// Duplicates is the share of requests that are extra copies of an
	// operation already sent (retries are not counted). Default 0.2;
	// bound 0..0.9.
	Duplicates float64
	// Burst is the most copies of one operation sent at the same instant.
	// Default 4; bound 1..64.
	Burst int
	// Concurrency is how many clients send at once (a burst counts as one).
	// Default 16; bound 1..1024.
	Concurrency int
	// Rate caps requests per second; 0 means as fast as the clients go.
	// Default 0; bound 0..100000.
	Rate float64
	// Retries bounds the retries of one copy: idemclient's rules
	// (docs/clients.md), after a transport error, 409, 425, 429, 502, 503
	// or 504. Default 8; bound 0..100 (0, with Explicit: none).
	Retries int
	// Timeout bounds one HTTP exchange. Default 10s; bound 10ms..5m.
	Timeout time.Duration
	// BackoffMax caps the wait between retries and the Retry-After honoured.
	// Default 2s; bound 1ms..1m. Backoff starts at BackoffMax/40.
	BackoffMax time.Duration
	// Settle bounds the settle phase. Default 30s; bound 0..10m (0, with
	// Explicit: no settle phase).
	Settle time.Duration
	// RefusedShare is the share of transfers built to be refused (a currency
	// mismatch): their 422 must be stored, replayed and never applied.
	// Default 0.02; bound 0..0.5 (0, with Explicit: none).
	RefusedShare float64
	// Seed seeds the run's choices; 0 draws one from the clock.
	Seed int64
	// Probes bounds the acknowledged operations Verify re-sends with their
	// key to check the stored answer is still byte-identical. Default 200;
	// negative (or 0, with Explicit): none; bound 1,000,000.
	Probes int
	// CheckEvents checks GET /v1/events: one event per applied resource.
	// Default false (the route is not served yet).
	CheckEvents bool
	// NATS, when set, checks that stream IDEM at this URL holds exactly one
	// message per event id (implies CheckEvents).
	NATS string
	// EventsWait bounds the wait for events to be published. Default 30s;
	// bound 0..10m (0, with Explicit: one look, no wait).
	EventsWait time.Duration
	// WebhookEndpoint, with WebhookSecret, adds webhook deliveries to the
	// main phase: Standard Webhooks deliveries to POST
	// /v1/webhooks/WebhookEndpoint, verified through GET /v1/events (so
	// CheckEvents must be on, and with API keys APIKey must be the
	// endpoint's tenant's). Default none; the service's endpoint name rules
	// (1 to 64 of A-Z a-z 0-9 . _ -).
	WebhookEndpoint string
	// WebhookSecret is the endpoint's Standard Webhooks secret, whsec_ and
	// base64 decoding to 24..64 bytes; the tool signs every delivery with
	// it. Required with WebhookEndpoint, and to verify a journal holding
	// deliveries (the probes re-sign them).
	WebhookSecret string
	// WebhookShare is the share of the main phase's operations that are
	// webhook deliveries when an endpoint is set. Default 0.2; bound 0..1
	// (0, with Explicit: none).
	WebhookShare float64
	// HoldShare is the share of the main phase's operations that are holds
	// and their settlements: a hold reserved with HoldTimeout, then
	// posted (all or part), voided, posted and voided at the same
	// instant through two servers, or left to expire. Default 0 (none);
	// bound 0..1.
	HoldShare float64
	// HoldTimeout is every hold's timeout. Default 3s; bound 1s..1h, whole
	// seconds (checked, like HoldExpiryPeriod, when HoldShare is set).
	HoldTimeout time.Duration
	// HoldExpiryPeriod is the period of the service's expiry worker (serve
	// --hold-expiry-period), which a chaos run passes to its servers: a
	// hold must be released within its timeout plus this period (plus
	// HoldGrace). Default 1s; bound 10ms..1m.
	HoldExpiryPeriod time.Duration
	// HoldGrace is added to HoldExpiryPeriod for the worker's own
	// transaction and a loaded machine's scheduling. Default 2s; bound
	// 0..10m.
	HoldGrace time.Duration
	// Progress receives progress output (nil: none). It is written from
	// a goroutine of its own: share it only behind a lock.
	Progress io.Writer
	// ProgressBar draws a bar redrawn in place (a terminal); otherwise
	// Progress gets a plain line every few seconds.
	ProgressBar bool
	// BeforeVerify, when set, runs after the load and before the checks
	// (the chaos supervisor stops killing there).
	BeforeVerify func()
	// Pool, when set, supplies the live targets instead of Targets (the
	// chaos supervisor's pool, which tracks restarts).
	Pool *Pool
	// Enough, when set, ends the main phase early once it reports true
	// (checked before each operation): a chaos run that has had the
	// failovers it asked for. Duration still bounds the phase.
	Enough func() bool
	// Faults, when set, is called after BeforeVerify for the database
	// faults the run went through (the chaos supervisor's failovers and
	// restarts), which the report then measures (Report.Faults).
	Faults func() []FaultWindow
	// ExpectLoss takes an acknowledged operation the service lost (a
	// failover of asynchronous replication: the promoted standby never
	// received the commit) as a figure, Report.Lost, rather than a
	// violation, and checks the rest as if it had not been answered: if a
	// later copy did it again, it must be there once. For accounts,
	// transfers and reversals; a lost webhook delivery stays a violation.
	// Default false.
	ExpectLoss bool
	// Explicit takes every field as given: a zero is meant (no duplicates,
	// no retries, no settle phase, no refused transfers) and no default
	// replaces it, and a zero outside a field's bound (Accounts) is
	// refused. The command line sets it: its flags carry the defaults, so
	// `--settle 0` means no settle phase. Default false: a zero field
	// takes its default.
	Explicit bool
}

// MaxOperations bounds Config.Operations; a run given a --duration and no
// --operations sends until the duration ends, bounded by it.
const MaxOperations = 10_000_000

// Defaults and bounds.
const (
	defaultAccounts     = 16
	defaultOperations   = 1000
	defaultDuration     = 30 * time.Second
	defaultDuplicates   = 0.2
	defaultBurst        = 4
	defaultConcurrency  = 16
	defaultRetries      = 8
	defaultTimeout      = 10 * time.Second
	defaultBackoffMax   = 2 * time.Second
	defaultSettle       = 30 * time.Second
	defaultRefusedShare = 0.02
	defaultProbes       = 200
	defaultEventsWait   = 30 * time.Second
	defaultWebhookShare = 0.2
	defaultHoldTimeout  = 3 * time.Second
	defaultHoldPeriod   = time.Second
	defaultHoldGrace    = 2 * time.Second
	maxTargets          = 64
	// maxLatencySamples bounds the latencies kept per outcome; beyond it a
	// reservoir sample keeps the percentiles honest.
	maxLatencySamples = 200_000
	// maxDetails bounds the violations reported in detail.
	maxDetails = 1000
	// maxBodyBytes bounds a response body read from the service.
	maxBodyBytes = 4 << 20
)

// Defaults is a run's configuration with every default filled in, no
// target and Explicit set: where a command line starts, its flags carrying
// these values as their defaults.
func Defaults() Config {
	c := Config{}.WithDefaults()
	c.Explicit = true
	return c
}

// WithDefaults fills in the zero fields' defaults (none when Explicit is
// set).
func (c Config) WithDefaults() Config {
	if c.NATS != "" {
		c.CheckEvents = true
	}
	if c.Explicit {
		return c
	}
	if c.Accounts == 0 {
		c.Accounts = defaultAccounts
	}
	if c.Operations == 0 {
		c.Operations = defaultOperations
	}
	if c.Duration == 0 {
		c.Duration = defaultDuration
	}
	if c.Duplicates == 0 {
		c.Duplicates = defaultDuplicates
	}
	if c.Burst == 0 {
		c.Burst = defaultBurst
	}
	if c.Concurrency == 0 {
		c.Concurrency = defaultConcurrency
	}
	if c.Retries == 0 {
		c.Retries = defaultRetries
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = defaultBackoffMax
	}
	if c.Settle == 0 {
		c.Settle = defaultSettle
	}
	if c.RefusedShare == 0 {
		c.RefusedShare = defaultRefusedShare
	}
	if c.Probes == 0 {
		c.Probes = defaultProbes
	}
	if c.EventsWait == 0 {
		c.EventsWait = defaultEventsWait
	}
	if c.WebhookShare == 0 {
		c.WebhookShare = defaultWebhookShare
	}
	if c.HoldTimeout == 0 {
		c.HoldTimeout = defaultHoldTimeout
	}
	if c.HoldExpiryPeriod == 0 {
		c.HoldExpiryPeriod = defaultHoldPeriod
	}
	if c.HoldGrace == 0 {
		c.HoldGrace = defaultHoldGrace
	}
	return c
}

// Validate checks every field against its bound.
func (c Config) Validate() error {
	if len(c.Targets) == 0 && c.Pool == nil {
		return errors.New("load: no target: pass --target URL (or --chaos to run servers)")
	}
	if len(c.Targets) > maxTargets {
		return fmt.Errorf("load: %d targets; at most %d", len(c.Targets), maxTargets)
	}
	for _, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("load: target %q: want http(s)://host:port", t)
		}
	}
	switch {
	case c.Accounts < 2 || c.Accounts > 10000:
		return fmt.Errorf("load: accounts %d is outside 2..10000", c.Accounts)
	case c.Operations < 1 || c.Operations > MaxOperations:
		return fmt.Errorf("load: operations %d is outside 1..%d", c.Operations, MaxOperations)
	case c.Duration < time.Second || c.Duration > 24*time.Hour:
		return fmt.Errorf("load: duration %s is outside 1s..24h", c.Duration)
	case c.Duplicates < 0 || c.Duplicates > 0.9:
		return fmt.Errorf("load: duplicates %g is outside 0..0.9", c.Duplicates)
	case c.Burst < 1 || c.Burst > 64:
		return fmt.Errorf("load: burst %d is outside 1..64", c.Burst)
	case c.Concurrency < 1 || c.Concurrency > 1024:
		return fmt.Errorf("load: concurrency %d is outside 1..1024", c.Concurrency)
	case c.Rate < 0 || c.Rate > 100000:
		return fmt.Errorf("load: rate %g is outside 0..100000 requests per second", c.Rate)
	case c.Retries < 0 || c.Retries > 100:
		return fmt.Errorf("load: retries %d is outside 0..100", c.Retries)
	case c.Timeout < 10*time.Millisecond || c.Timeout > 5*time.Minute:
		return fmt.Errorf("load: timeout %s is outside 10ms..5m", c.Timeout)
	case c.BackoffMax < time.Millisecond || c.BackoffMax > time.Minute:
		return fmt.Errorf("load: backoff max %s is outside 1ms..1m", c.BackoffMax)
	case c.Settle < 0 || c.Settle > 10*time.Minute:
		return fmt.Errorf("load: settle %s is outside 0..10m", c.Settle)
	case c.RefusedShare < 0 || c.RefusedShare > 0.5:
		return fmt.Errorf("load: refused share %g is outside 0..0.5", c.RefusedShare)
	case c.Probes > 1_000_000:
		return fmt.Errorf("load: probes %d is more than 1000000", c.Probes)
	case c.EventsWait < 0 || c.EventsWait > 10*time.Minute:
		return fmt.Errorf("load: events wait %s is outside 0..10m", c.EventsWait)
	case c.WebhookShare < 0 || c.WebhookShare > 1:
		return fmt.Errorf("load: webhook share %g is outside 0..1", c.WebhookShare)
	case c.HoldShare < 0 || c.HoldShare > 1:
		return fmt.Errorf("load: hold share %g is outside 0..1", c.HoldShare)
	case c.HoldShare > 0 && (c.HoldTimeout < time.Second || c.HoldTimeout > time.Hour || c.HoldTimeout%time.Second != 0):
		return fmt.Errorf("load: hold timeout %s is not whole seconds in 1s..1h", c.HoldTimeout)
	case c.HoldShare > 0 && (c.HoldExpiryPeriod < 10*time.Millisecond || c.HoldExpiryPeriod > time.Minute):
		return fmt.Errorf("load: hold expiry period %s is outside 10ms..1m", c.HoldExpiryPeriod)
	case c.HoldGrace < 0 || c.HoldGrace > 10*time.Minute:
		return fmt.Errorf("load: hold grace %s is outside 0..10m", c.HoldGrace)
	}
	if c.WebhookSecret != "" {
		if _, err := webhookKey(c.WebhookSecret); err != nil {
			return err
		}
	}
	if c.WebhookEndpoint != "" {
		if err := checkEndpointName(c.WebhookEndpoint); err != nil {
			return err
		}
		switch {
		case c.WebhookSecret == "":
			return errors.New("load: --webhook-endpoint needs --webhook-secret (whsec_…), the endpoint's Standard Webhooks secret")
		case !c.CheckEvents:
			return errors.New("load: webhook deliveries are verified through GET /v1/events: drop --check-events=false")
		}
	}
	return nil
}
