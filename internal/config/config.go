// Package config loads idem's service configuration: built-in defaults, then
// a YAML file (--config / IDEM_CONFIG), then IDEM_* environment variables,
// then command-line flags — each later source wins. Every setting is one row
// of the table in settings.go, so a flag, its variable and its YAML key can
// never drift apart; docs/operations.md lists them.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/idemhq/idem/internal/cli"
	"github.com/idemhq/idem/seal"
)

// Config is the service's configuration. Comments give defaults and bounds.
type Config struct {
	// DB is the database: "" (SQLite in ./idem-data/), postgres://…, or
	// sqlite:PATH.
	DB string
	// Publish is where the relay publishes: "" (embedded NATS), nats://…,
	// kafka://…, http(s)://… (webhooks), or stdout.
	Publish string
	// Addr is the listen address. Default 127.0.0.1:8080. Without API keys
	// it must be a loopback address.
	Addr string
	// MetricsAddr is where idem relay serves /metrics, /healthz and
	// /readyz. Default none. It need not be loopback: those routes hold no
	// tenant data. idem serve serves them there too when it is set, and
	// then leaves /metrics off Addr (a public port need not show it).
	MetricsAddr string
	// DebugAddr is where idem serve serves Go's profiler (net/http/pprof
	// under /debug/pprof/). Default none. It must be loopback unless an
	// admin key is set; every request there then needs the admin key as a
	// bearer token, since a profile shows what the process holds.
	DebugAddr string
	// APIKeys map bearer tokens to tenants. Default none: every request is
	// tenant "default".
	APIKeys []APIKey
	// AdminKeyHash is the SHA-256 of the web console's admin key. Default
	// nil: no admin key, and the console answers only loopback clients.
	// The key is at least 16 characters and must not be an API key.
	AdminKeyHash *[sha256.Size]byte
	// Migrate applies pending migrations when serve or relay starts.
	// Default true. With false the process refuses to start on a schema
	// with migrations pending (run idem migrate first), which is how a
	// team that reviews DDL deploys.
	Migrate bool
	// Relay runs the outbox relay inside serve. Default true.
	Relay bool
	// WebhookSecret (whsec_…) signs outgoing webhooks when Publish is an
	// http(s) URL. Default none.
	WebhookSecret string
	// WebhookFormat is the body of outgoing webhooks: idem (the Standard
	// Webhooks envelope, default), cloudevents, cloudevents-structured or
	// both (package outbox/cloudevent). Checked when the publisher opens.
	WebhookFormat string
	// WebhookEndpoints runs, beside the relay, the delivery of events to
	// the endpoints tenants register (/v1/webhook-endpoints; package
	// outbox/webhookout). Default true.
	WebhookEndpoints bool
	// WebhookAllowNetworks are the networks tenants' endpoints may reach
	// although internal, and the only ones plain http may reach. Default
	// none; at most 256.
	WebhookAllowNetworks []netip.Prefix
	// WebhookSchedule is the wait before each delivery attempt. Default
	// webhookout.DefaultSchedule; 1..100 entries of 0..168h.
	WebhookSchedule []time.Duration
	// WebhookDisableAfter is how long an endpoint may fail without a
	// success before it is disabled. Default 120h; bound 1m..2160h.
	WebhookDisableAfter time.Duration
	// WebhookTimeout bounds one delivery attempt. Default 15s; bound
	// 100ms..1m.
	WebhookTimeout time.Duration
	// RelayBatch bounds the rows one relay read takes. Default 2000;
	// bound 1..10000.
	RelayBatch int
	// RelayPoll is how often the relay looks for rows committed by other
	// processes. Default 100ms; bound 1ms..1m.
	RelayPoll time.Duration
	// HoldExpiryPeriod is how often serve looks for holds whose timeout
	// has passed and releases them (the most a hold stays pending past
	// its timeout, beside the database's load). Default 1s; bound
	// 10ms..1m.
	HoldExpiryPeriod time.Duration
	// RelayLease is how long a relay's shard leases last without renewal:
	// after a crash, its rows wait this long for another relay. Default
	// 30s; bound 1s..10m.
	RelayLease time.Duration
	// RelayMaxAttempts is how many refusals make a dead letter. Default 10;
	// bound 1..1000.
	RelayMaxAttempts int
	// MaxBodyBytes bounds request bodies. Default 1 MiB; bound 1 KiB..64 MiB.
	MaxBodyBytes int64
	// KeyRetention is how long a key's stored answer is kept and
	// replayed. Default 24h; bound 1m..400 days.
	KeyRetention time.Duration
	// KeyMemory is how long after its first arrival a key is remembered:
	// past KeyRetention, as a tombstone (its fingerprint and status), and
	// a copy is refused 409 idempotency_key_expired. Default (0) 30 days,
	// or KeyRetention when that is longer; bound KeyRetention..400 days.
	KeyMemory time.Duration
	// IdempotencyKey says whether serve's write routes require the
	// Idempotency-Key header: "required" (default) refuses a request
	// without one 400 idempotency_key_missing, since a retry of it could
	// do the work twice; "optional" is the rollout mode, in which such a
	// request runs unguarded — in a transaction of its own, once per
	// request, nothing stored — and is counted per route
	// (idem_http_unguarded_requests_total). A request with a key is
	// guarded either way.
	IdempotencyKey string
	// InFlightWait bounds how long a duplicate waits for its running twin
	// before 409. Default 5s; bound 1ms..60s.
	InFlightWait time.Duration
	// GroupCommit runs the ledger's writes (accounts, transfers,
	// reversals) through the keeper's group commit: concurrent first
	// arrivals share one transaction. Default true.
	GroupCommit bool
	// BatchMax bounds the requests one group-commit transaction carries.
	// Default 128; bound 1..1000.
	BatchMax int
	// BatchConcurrency is how many group-commit transactions run at once.
	// Default 0: 2 on PostgreSQL, 1 on SQLite; bound 0..64.
	BatchConcurrency int
	// BatchShare bounds the group-commit transactions one tenant's
	// requests hold while another tenant's wait for one: that share of
	// BatchConcurrency, rounded up (idem.BatchConfig.Share); and, the
	// same share of the database's write capacity (the PostgreSQL pool,
	// SQLite's one writer), the write transactions one tenant holds while
	// another is present (the service's write gate). Default 0: one half;
	// bound 0..1.
	BatchShare float64
	// TenantRate bounds each tenant's requests a second (a token bucket
	// of TenantBurst); a request over it is answered 429 with
	// Retry-After. Default 0: no bound; bound 0..1,000,000.
	TenantRate float64
	// TenantBurst is how many requests a tenant may send at once above
	// TenantRate. Default 0: TenantRate rounded up (at least 1); bound
	// 0..1,000,000.
	TenantBurst int
	// TenantConcurrency bounds each tenant's requests in progress at once;
	// one more is answered 429 with Retry-After. Default 0: no bound;
	// bound 0..100,000.
	TenantConcurrency int
	// DBTimeout is the deadline of each request's database work and of
	// each database step of the relay (a read, a mark, a lease renewal),
	// the janitor and the lease manager: a database that stops answering
	// fails them, 503 with Retry-After for a request, instead of hanging
	// them. On PostgreSQL it is also the session's statement_timeout and
	// idle_in_transaction_session_timeout, and the bound on unacknowledged
	// data and silent idle connections (TCP_USER_TIMEOUT, keepalives).
	// A duplicate's wait for its twin (InFlightWait) is part of its
	// request's deadline; the relay's steps take RelayLease/3 when that is
	// shorter (a renewal ends before the leases it renews). Default 10s;
	// bound 100ms..10m.
	DBTimeout time.Duration
	// DBConnectTimeout bounds a connection attempt to each PostgreSQL host
	// of the URL, after which the next host is tried; the URL's
	// connect_timeout wins. Default 5s; bound 100ms..10m.
	DBConnectTimeout time.Duration
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM.
	// Default 15s; bound 1s..10m.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string
	// LogFormat is text or json. Default text.
	LogFormat string
	// CurrencyExponents are the minor-unit exponents of currencies the
	// console and the CLI show beyond ISO 4217's (or instead of them), by
	// code. Default none; exponents 0..18.
	CurrencyExponents map[string]int
	// EncryptionKeyFile is the file of master keys that encrypt what idem
	// stores at rest (package seal): lines name:base64 of 32 bytes, the
	// first wrapping new data keys, every one unwrapping. Default none:
	// records are stored as they are. Read when serve or relay starts.
	EncryptionKeyFile string
	// Webhooks is the raw YAML of the file's webhooks block, parsed by
	// package webhook.
	Webhooks []byte
	// File is the configuration file that was read, if any.
	File string
	// Sealer encrypts what the service stores: stored answers, outbox
	// messages, webhook intake bodies (package seal). It is not read from
	// flags or the file: cmd/idem's wiring (openSealer) sets it, the one
	// place the key material becomes a Sealer. Default nil: stored as
	// they are.
	Sealer seal.Sealer
}

// The values of Config.IdempotencyKey.
const (
	KeyRequired = "required"
	KeyOptional = "optional"
)

// APIKey is one tenant's bearer token, kept only as its SHA-256.
type APIKey struct {
	Tenant string
	Hash   [sha256.Size]byte
}

// Default returns the built-in defaults.
func Default() Config {
	return Config{
		Addr:                "127.0.0.1:8080",
		Migrate:             true,
		Relay:               true,
		RelayBatch:          2000,
		WebhookEndpoints:    true,
		WebhookDisableAfter: 120 * time.Hour,
		WebhookTimeout:      15 * time.Second,
		RelayPoll:           100 * time.Millisecond,
		HoldExpiryPeriod:    time.Second,
		RelayLease:          30 * time.Second,
		RelayMaxAttempts:    10,
		MaxBodyBytes:        1 << 20,
		KeyRetention:        24 * time.Hour,
		IdempotencyKey:      KeyRequired,
		InFlightWait:        5 * time.Second,
		GroupCommit:         true,
		BatchMax:            128,
		ShutdownTimeout:     15 * time.Second,
		DBTimeout:           10 * time.Second,
		DBConnectTimeout:    5 * time.Second,
		LogLevel:            "info",
		LogFormat:           "text",
	}
}

// Load parses args (the flags after the subcommand) for the settings named
// in use, reading the environment through getenv. Settings not in use are
// neither flags nor read from the environment.
func Load(name string, args []string, getenv func(string) string, use ...string) (Config, error) {
	cfg := Default()
	fs := cli.NewFlagSet(name)
	configFile := fs.String("config", "", "YAML configuration file (env IDEM_CONFIG)")
	inUse := map[string]bool{}
	for _, n := range use {
		s, ok := settingByFlag[n]
		if !ok {
			return cfg, fmt.Errorf("config: no setting %q", n)
		}
		inUse[n] = true
		fs.Var(&flagText{typ: settingTypes[n]}, s.flag, fmt.Sprintf("%s (env %s)", s.help, s.env))
	}
	if err := cli.Parse(fs, args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, cli.Usagef(name, "%s: unexpected argument %q", name, fs.Arg(0))
	}

	file := *configFile
	if file == "" {
		file = getenv("IDEM_CONFIG")
	}
	if file != "" {
		if err := cfg.loadFile(file, inUse); err != nil {
			return cfg, err
		}
	}
	for _, n := range use {
		s := settingByFlag[n]
		if v := getenv(s.env); v != "" {
			if err := s.set(&cfg, v); err != nil {
				return cfg, fmt.Errorf("%s: %w", s.env, err)
			}
		}
	}
	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		if s, ok := settingByFlag[f.Name]; ok && flagErr == nil {
			if err := s.set(&cfg, f.Value.String()); err != nil {
				flagErr = &cli.UsageError{Command: name, Err: fmt.Errorf("--%s: %w", f.Name, err)}
			}
		}
	})
	if flagErr != nil {
		return cfg, flagErr
	}
	return cfg, cfg.Validate()
}

func (c *Config) loadFile(path string, inUse map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("config %s: not valid YAML%s (the file's text is not shown: it may hold secrets)", path, yamlPosition(err))
	}
	c.File = path
	for k, v := range raw {
		if k == "webhooks" {
			sub, err := yaml.Marshal(map[string]any{"webhooks": v})
			if err != nil {
				return fmt.Errorf("config %s: webhooks: %w", path, err)
			}
			c.Webhooks = sub
			continue
		}
		s, ok := settingByYAML[k]
		if !ok {
			return fmt.Errorf("config %s: unknown setting %q", path, k)
		}
		if !inUse[s.flag] {
			continue // a setting of another subcommand
		}
		if m, ok := v.(map[string]any); ok && pairSettings[k] {
			v = pairs(m)
		}
		val, err := yamlScalar(v)
		if err != nil {
			return fmt.Errorf("config %s: %s: %w", path, k, err)
		}
		if err := s.set(c, val); err != nil {
			return fmt.Errorf("config %s: %s: %w", path, k, err)
		}
	}
	return nil
}

// yamlPosition is " at line L, column C" of a YAML error, or "" when it
// has none. The parser's message is left out with its excerpt: both can
// quote the file's text (a neighbouring line, the value it could not
// read), and the file holds API keys and broker passwords.
func yamlPosition(err error) string {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		p := ye.GetToken().Position
		return fmt.Sprintf(" at line %d, column %d", p.Line, p.Column)
	}
	return ""
}

// pairSettings may be written in YAML as a map (GOLD: 3), read as the
// flag's CODE=N,… list.
var pairSettings = map[string]bool{"currency_exponents": true}

// pairs turns a YAML map into a sorted list of "key=value" items.
func pairs(m map[string]any) []any {
	out := make([]any, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return out
}

// yamlScalar turns a YAML value into the string form flags use; lists (of
// API keys) are joined with commas.
func yamlScalar(v any) (string, error) {
	switch v := v.(type) {
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return "", errors.New("want a value or a list, not a map")
	case nil:
		return "", nil
	default:
		return fmt.Sprint(v), nil
	}
}

// Validate checks bounds and combinations.
func (c Config) Validate() error {
	switch {
	case c.MaxBodyBytes < 1<<10 || c.MaxBodyBytes > 64<<20:
		return fmt.Errorf("config: %s %d is outside 1 KiB..64 MiB", named("max-body-bytes"), c.MaxBodyBytes)
	case c.KeyRetention < time.Minute || c.KeyRetention > 400*24*time.Hour:
		return fmt.Errorf("config: %s %s is outside 1m..400 days", named("key-retention"), c.KeyRetention)
	case c.KeyMemory != 0 && (c.KeyMemory < c.KeyRetention || c.KeyMemory > 400*24*time.Hour):
		return fmt.Errorf("config: %s %s is outside %s..400 days (it is at least %s)", named("key-memory"), c.KeyMemory, c.KeyRetention, named("key-retention"))
	case c.InFlightWait < time.Millisecond || c.InFlightWait > time.Minute:
		return fmt.Errorf("config: %s %s is outside 1ms..60s", named("in-flight-wait"), c.InFlightWait)
	case c.BatchMax < 1 || c.BatchMax > 1000:
		return fmt.Errorf("config: %s %d is outside 1..1000", named("batch-max"), c.BatchMax)
	case c.BatchConcurrency < 0 || c.BatchConcurrency > 64:
		return fmt.Errorf("config: %s %d is outside 0..64", named("batch-concurrency"), c.BatchConcurrency)
	case !(c.BatchShare >= 0 && c.BatchShare <= 1):
		return fmt.Errorf("config: %s %v is outside 0..1", named("batch-share"), c.BatchShare)
	case c.ShutdownTimeout < time.Second || c.ShutdownTimeout > 10*time.Minute:
		return fmt.Errorf("config: %s %s is outside 1s..10m", named("shutdown-timeout"), c.ShutdownTimeout)
	case c.TenantRate < 0 || c.TenantRate > 1e6 || c.TenantRate != c.TenantRate:
		return fmt.Errorf("config: %s %v is outside 0..1000000 requests a second", named("tenant-rate"), c.TenantRate)
	case c.TenantBurst < 0 || c.TenantBurst > 1_000_000:
		return fmt.Errorf("config: %s %d is outside 0..1000000", named("tenant-burst"), c.TenantBurst)
	case c.TenantConcurrency < 0 || c.TenantConcurrency > 100_000:
		return fmt.Errorf("config: %s %d is outside 0..100000", named("tenant-concurrency"), c.TenantConcurrency)
	case c.WebhookDisableAfter < time.Minute || c.WebhookDisableAfter > 2160*time.Hour:
		return fmt.Errorf("config: %s %s is outside 1m..2160h", named("webhook-disable-after"), c.WebhookDisableAfter)
	case c.WebhookTimeout < 100*time.Millisecond || c.WebhookTimeout > time.Minute:
		return fmt.Errorf("config: %s %s is outside 100ms..1m", named("webhook-timeout"), c.WebhookTimeout)
	case len(c.WebhookSchedule) > 100:
		return fmt.Errorf("config: %s has %d entries, limit 100", named("webhook-schedule"), len(c.WebhookSchedule))
	case c.RelayBatch < 1 || c.RelayBatch > 10000:
		return fmt.Errorf("config: %s %d is outside 1..10000", named("relay-batch"), c.RelayBatch)
	case c.RelayPoll < time.Millisecond || c.RelayPoll > time.Minute:
		return fmt.Errorf("config: %s %s is outside 1ms..1m", named("relay-poll"), c.RelayPoll)
	case c.HoldExpiryPeriod < 10*time.Millisecond || c.HoldExpiryPeriod > time.Minute:
		return fmt.Errorf("config: %s %s is outside 10ms..1m", named("hold-expiry-period"), c.HoldExpiryPeriod)
	case c.RelayLease < time.Second || c.RelayLease > 10*time.Minute:
		return fmt.Errorf("config: %s %s is outside 1s..10m", named("relay-lease"), c.RelayLease)
	case c.RelayMaxAttempts < 1 || c.RelayMaxAttempts > 1000:
		return fmt.Errorf("config: %s %d is outside 1..1000", named("relay-max-attempts"), c.RelayMaxAttempts)
	case c.DBTimeout < 100*time.Millisecond || c.DBTimeout > 10*time.Minute:
		return fmt.Errorf("config: %s %s is outside 100ms..10m", named("db-timeout"), c.DBTimeout)
	case c.DBConnectTimeout < 100*time.Millisecond || c.DBConnectTimeout > 10*time.Minute:
		return fmt.Errorf("config: %s %s is outside 100ms..10m", named("db-connect-timeout"), c.DBConnectTimeout)
	}
	if c.IdempotencyKey != KeyRequired && c.IdempotencyKey != KeyOptional {
		return fmt.Errorf("config: %s %q: want %s or %s", named("idempotency-key"), c.IdempotencyKey, KeyRequired, KeyOptional)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("config: %s %q: want debug, info, warn or error", named("log-level"), c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("config: %s %q: want text or json", named("log-format"), c.LogFormat)
	}
	if c.AdminKeyHash != nil {
		for _, k := range c.APIKeys {
			if k.Hash == *c.AdminKeyHash {
				return fmt.Errorf("config: the admin key is also tenant %q's API key: give the console a key of its own", k.Tenant)
			}
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("config: %s %q: %w", named("metrics-addr"), c.MetricsAddr, err)
		}
	}
	if c.DebugAddr != "" {
		host, _, err := net.SplitHostPort(c.DebugAddr)
		if err != nil {
			return fmt.Errorf("config: debug-addr %q: %w", c.DebugAddr, err)
		}
		if c.AdminKeyHash == nil && !IsLoopback(host) {
			return fmt.Errorf("config: debug-addr %q is not loopback and no admin key is set: the profiler shows what the process holds", c.DebugAddr)
		}
	}
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("config: %s %q: %w", named("addr"), c.Addr, err)
	}
	if len(c.APIKeys) == 0 && !IsLoopback(host) {
		return fmt.Errorf("config: %s %q is not loopback and no API keys are configured: "+
			"set --api-keys (IDEM_API_KEYS, tenant:key,…) before serving beyond this machine", named("addr"), c.Addr)
	}
	return nil
}

// named names a setting as the user types it: its flag and its
// environment variable, "--relay-poll (IDEM_RELAY_POLL)".
func named(flag string) string {
	s, ok := settingByFlag[flag]
	if !ok {
		panic("config: no setting " + flag)
	}
	return "--" + s.flag + " (" + s.env + ")"
}

// IsLoopback reports whether host names only this machine.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopbackHost reports whether a request's Host header names this
// machine: localhost (any case, with or without one trailing dot) or a
// loopback IP literal (127.0.0.0/8, [::1]), with or without a port. Any
// other name is refused even when it resolves to 127.0.0.1: a name that
// resolves to loopback today is what DNS rebinding turns a web page's own
// name into, so that the page can read and write a service on loopback.
// An empty Host names nothing and is not loopback.
func IsLoopbackHost(hostHeader string) bool {
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	} else if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	host = strings.TrimSuffix(host, ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.IsLoopback()
}

// tenantRE: a tenant is a NATS subject token (idem.<tenant>.<type>), so no
// '.', '*', '>' or spaces.
var tenantRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)

// MinAPIKeyLength is the shortest bearer token accepted.
const MinAPIKeyLength = 16

// ParseAPIKeys parses "tenant:key,…". A key written sha256:HEX is already
// hashed, so configuration files need not hold the token itself.
//
// Its errors name an entry by its position, never by its text: an entry
// of the wrong shape (tenant=key, the key alone, key:tenant) may hold the
// secret anywhere, and the error is printed at start-up, into the logs.
func ParseAPIKeys(s string) ([]APIKey, error) {
	var keys []APIKey
	seen := map[[sha256.Size]byte]int{}
	n := 0
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n++
		tenant, key, ok := strings.Cut(item, ":")
		if !ok || !tenantRE.MatchString(tenant) {
			return nil, fmt.Errorf("API key entry %d: want tenant:key with a tenant of letters, digits, _ - (at most 64); "+
				"the entry is not shown, as it may hold the key", n)
		}
		var k APIKey
		k.Tenant = tenant
		if hexHash, ok := strings.CutPrefix(key, "sha256:"); ok {
			b, err := hex.DecodeString(hexHash)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("API key entry %d: sha256: wants 64 hex digits", n)
			}
			copy(k.Hash[:], b)
		} else {
			if len(key) < MinAPIKeyLength {
				return nil, fmt.Errorf("API key entry %d: the key is shorter than %d characters", n, MinAPIKeyLength)
			}
			k.Hash = sha256.Sum256([]byte(key))
		}
		if first, dup := seen[k.Hash]; dup {
			return nil, fmt.Errorf("API key entry %d: the same key as entry %d: a key configured twice", n, first)
		}
		seen[k.Hash] = n
		keys = append(keys, k)
	}
	return keys, nil
}

// flagText holds a setting's flag as text, set later by the setting's own
// parser; typ names its type for --help ("" is a string).
type flagText struct {
	typ, v string
}

func (f *flagText) String() string     { return f.v }
func (f *flagText) Set(v string) error { f.v = v; return nil }

// Type is the type --help shows (cli.PrintFlags).
func (f *flagText) Type() string {
	if f.typ == "" {
		return "string"
	}
	return f.typ
}

// IsBoolFlag lets a bool setting stand alone (--relay means --relay=true).
func (f *flagText) IsBoolFlag() bool { return f.typ == "bool" }
