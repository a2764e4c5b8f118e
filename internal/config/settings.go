package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/money"
	"github.com/idemhq/idem/outbox/webhookout"
)

// setting is one configuration value: its flag, environment variable and
// YAML key, and how to set it from text.
type setting struct {
	flag, env, yaml, help string
	set                   func(c *Config, v string) error
}

var settings = []setting{
	{"db", "IDEM_DB", "db", "database: postgres://… or sqlite:PATH (default SQLite in ./idem-data/)",
		func(c *Config, v string) error { c.DB = v; return nil }},
	{"publish", "IDEM_PUBLISH", "publish", "publish to: nats://…, kafka://…, amqp(s)://…, http(s)://…, stdout (default embedded NATS)",
		func(c *Config, v string) error { c.Publish = v; return nil }},
	{"addr", "IDEM_ADDR", "addr", "listen address (default 127.0.0.1:8080)",
		func(c *Config, v string) error { c.Addr = v; return nil }},
	{"metrics-addr", "IDEM_METRICS_ADDR", "metrics_addr", "serve /metrics, /healthz and /readyz on this address (default none; serve then answers /metrics only there)",
		func(c *Config, v string) error { c.MetricsAddr = v; return nil }},
	{"debug-addr", "IDEM_DEBUG_ADDR", "debug_addr", "serve Go's profiler (net/http/pprof) on this address (default none; loopback unless an admin key is set, which it then requires)",
		func(c *Config, v string) error { c.DebugAddr = v; return nil }},
	{"api-keys", "IDEM_API_KEYS", "api_keys", "tenant:key,… bearer tokens (key may be sha256:HEX)",
		func(c *Config, v string) (err error) { c.APIKeys, err = ParseAPIKeys(v); return err }},
	{"admin-key", "IDEM_ADMIN_KEY", "admin_key", "web console admin key, at least 16 characters or sha256:HEX (default none: console for loopback clients only)",
		func(c *Config, v string) (err error) { c.AdminKeyHash, err = ParseAdminKey(v); return err }},
	{"migrate", "IDEM_MIGRATE", "migrate", "apply pending migrations at start (default true; false: run idem migrate first)",
		func(c *Config, v string) (err error) { c.Migrate, err = strconv.ParseBool(v); return err }},
	{"relay", "IDEM_RELAY", "relay", "run the outbox relay inside serve (default true)",
		func(c *Config, v string) (err error) { c.Relay, err = strconv.ParseBool(v); return err }},
	{"webhook-secret", "IDEM_WEBHOOK_SECRET", "webhook_secret", "whsec_… secret that signs outgoing webhooks (publish to http(s)://…)",
		func(c *Config, v string) error { c.WebhookSecret = v; return nil }},
	{"webhook-format", "IDEM_WEBHOOK_FORMAT", "webhook_format", "body of outgoing webhooks: idem (default), cloudevents, cloudevents-structured or both",
		func(c *Config, v string) error { c.WebhookFormat = v; return nil }},
	{"webhook-endpoints", "IDEM_WEBHOOK_ENDPOINTS", "webhook_endpoints", "deliver events to the tenants' own endpoints (/v1/webhook-endpoints) beside the relay (default true)",
		func(c *Config, v string) (err error) { c.WebhookEndpoints, err = strconv.ParseBool(v); return err }},
	{"webhook-allow-networks", "IDEM_WEBHOOK_ALLOW_NETWORKS", "webhook_allow_networks", "CIDR networks tenants' endpoints may reach although internal (loopback, private, link-local), and the only ones plain http may reach, e.g. 127.0.0.0/8,10.0.0.0/8 (default none)",
		func(c *Config, v string) (err error) {
			c.WebhookAllowNetworks, err = webhookout.ParseNetworks(v)
			return err
		}},
	{"webhook-schedule", "IDEM_WEBHOOK_SCHEDULE", "webhook_schedule", "waits before each delivery attempt to tenants' endpoints (default 0,5s,5m,30m,2h,5h,10h,10h)",
		func(c *Config, v string) (err error) {
			c.WebhookSchedule, err = webhookout.ParseSchedule(v)
			return err
		}},
	{"webhook-disable-after", "IDEM_WEBHOOK_DISABLE_AFTER", "webhook_disable_after", "how long a tenant's endpoint may fail without a success before it is disabled (default 120h)",
		durationSetter(func(c *Config) *time.Duration { return &c.WebhookDisableAfter })},
	{"webhook-timeout", "IDEM_WEBHOOK_TIMEOUT", "webhook_timeout", "bound on one delivery attempt to a tenant's endpoint, answer included; a delivery is leased for twice this plus 10s (default 15s)",
		durationSetter(func(c *Config) *time.Duration { return &c.WebhookTimeout })},
	{"relay-batch", "IDEM_RELAY_BATCH", "relay_batch", "rows per relay publish cycle (default 2000)",
		func(c *Config, v string) (err error) { c.RelayBatch, err = strconv.Atoi(v); return err }},
	{"relay-poll", "IDEM_RELAY_POLL", "relay_poll", "how often the relay looks for rows other processes committed (default 100ms)",
		durationSetter(func(c *Config) *time.Duration { return &c.RelayPoll })},
	{"hold-expiry-period", "IDEM_HOLD_EXPIRY_PERIOD", "hold_expiry_period", "how often serve releases holds whose timeout has passed (default 1s)",
		durationSetter(func(c *Config) *time.Duration { return &c.HoldExpiryPeriod })},
	{"relay-lease", "IDEM_RELAY_LEASE", "relay_lease", "shard lease TTL: how long a crashed relay's rows wait for another (default 30s)",
		durationSetter(func(c *Config) *time.Duration { return &c.RelayLease })},
	{"relay-max-attempts", "IDEM_RELAY_MAX_ATTEMPTS", "relay_max_attempts", "broker refusals before a message becomes a dead letter (default 10)",
		func(c *Config, v string) (err error) { c.RelayMaxAttempts, err = strconv.Atoi(v); return err }},
	{"max-body-bytes", "IDEM_MAX_BODY_BYTES", "max_body_bytes", "request body limit in bytes (default 1048576)",
		func(c *Config, v string) (err error) { c.MaxBodyBytes, err = strconv.ParseInt(v, 10, 64); return err }},
	{"key-retention", "IDEM_KEY_RETENTION", "key_retention", "how long a key's answer is kept and replayed (default 24h)",
		durationSetter(func(c *Config) *time.Duration { return &c.KeyRetention })},
	{"key-memory", "IDEM_KEY_MEMORY", "key_memory", "how long a key is remembered, as a tombstone past its retention: a copy then gets 409 idempotency_key_expired (default 30 days, or the key retention when longer)",
		durationSetter(func(c *Config) *time.Duration { return &c.KeyMemory })},
	{"idempotency-key", "IDEM_IDEMPOTENCY_KEY", "idempotency_key", "required (default): a POST without Idempotency-Key is refused 400; optional: rollout mode, it runs unguarded, once per request, counted per route",
		func(c *Config, v string) error { c.IdempotencyKey = v; return nil }},
	{"in-flight-wait", "IDEM_IN_FLIGHT_WAIT", "in_flight_wait", "how long a duplicate waits for its running twin (default 5s)",
		durationSetter(func(c *Config) *time.Duration { return &c.InFlightWait })},
	{"group-commit", "IDEM_GROUP_COMMIT", "group_commit", "share one transaction among concurrent ledger writes (default true)",
		func(c *Config, v string) (err error) { c.GroupCommit, err = strconv.ParseBool(v); return err }},
	{"batch-max", "IDEM_BATCH_MAX", "batch_max", "most requests one group-commit transaction carries (default 128)",
		func(c *Config, v string) (err error) { c.BatchMax, err = strconv.Atoi(v); return err }},
	{"batch-concurrency", "IDEM_BATCH_CONCURRENCY", "batch_concurrency", "group-commit transactions of one tenant at once (default 2 on PostgreSQL, 1 on SQLite)",
		func(c *Config, v string) (err error) { c.BatchConcurrency, err = strconv.Atoi(v); return err }},
	{"batch-share", "IDEM_BATCH_SHARE", "batch_share", "share of the database's connections one tenant holds while others are present, its group-commit transactions included (default 0.5)",
		func(c *Config, v string) (err error) { c.BatchShare, err = strconv.ParseFloat(v, 64); return err }},
	{"tenant-rate", "IDEM_TENANT_RATE", "tenant_rate", "each tenant's requests a second, over which it is answered 429 (default 0: no bound)",
		func(c *Config, v string) (err error) { c.TenantRate, err = strconv.ParseFloat(v, 64); return err }},
	{"tenant-burst", "IDEM_TENANT_BURST", "tenant_burst", "requests a tenant may send at once above --tenant-rate (default: the rate, at least 1)",
		func(c *Config, v string) (err error) { c.TenantBurst, err = strconv.Atoi(v); return err }},
	{"tenant-concurrency", "IDEM_TENANT_CONCURRENCY", "tenant_concurrency", "each tenant's requests in progress at once, over which it is answered 429 (default 0: no bound)",
		func(c *Config, v string) (err error) { c.TenantConcurrency, err = strconv.Atoi(v); return err }},
	{"db-timeout", "IDEM_DB_TIMEOUT", "db_timeout", "deadline of each request's database work and each relay, lease and janitor step; also PostgreSQL's statement and idle-in-transaction timeouts (default 10s)",
		durationSetter(func(c *Config) *time.Duration { return &c.DBTimeout })},
	{"db-connect-timeout", "IDEM_DB_CONNECT_TIMEOUT", "db_connect_timeout", "connect timeout per PostgreSQL host of the URL, then the next host is tried (default 5s)",
		durationSetter(func(c *Config) *time.Duration { return &c.DBConnectTimeout })},
	{"shutdown-timeout", "IDEM_SHUTDOWN_TIMEOUT", "shutdown_timeout", "drain time on SIGTERM (default 15s)",
		durationSetter(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{"log-level", "IDEM_LOG_LEVEL", "log_level", "debug, info, warn or error (default info)",
		func(c *Config, v string) error { c.LogLevel = v; return nil }},
	{"log-format", "IDEM_LOG_FORMAT", "log_format", "text or json (default text)",
		func(c *Config, v string) error { c.LogFormat = v; return nil }},
	{"encryption-key-file", "IDEM_ENCRYPTION_KEY_FILE", "encryption_key_file", "file of master keys, lines name:base64(32 bytes), the newest first: encrypt stored answers and payloads at rest (default none: stored as they are)",
		func(c *Config, v string) error { c.EncryptionKeyFile = v; return nil }},
	{"currency-exponents", "IDEM_CURRENCY_EXPONENTS", "currency_exponents",
		"CODE=N,… minor-unit exponents of currencies beyond ISO 4217, for the console and CLI tables (default none)",
		func(c *Config, v string) (err error) { c.CurrencyExponents, err = money.ParseExponents(v); return err }},
}

func durationSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 5s or 24h", v)
		}
		*field(c) = d
		return nil
	}
}

var settingByFlag, settingByYAML = func() (map[string]setting, map[string]setting) {
	byFlag, byYAML := map[string]setting{}, map[string]setting{}
	for _, s := range settings {
		byFlag[s.flag], byYAML[s.yaml] = s, s
	}
	return byFlag, byYAML
}()

// settingTypes are the types --help shows for settings that are not
// strings.
var settingTypes = map[string]string{
	"migrate": "bool", "relay": "bool", "group-commit": "bool", "webhook-endpoints": "bool",
	"webhook-disable-after": "duration", "webhook-timeout": "duration",
	"relay-batch": "int", "relay-max-attempts": "int", "max-body-bytes": "int",
	"batch-share": "float", "tenant-rate": "float", "tenant-burst": "int", "tenant-concurrency": "int",
	"relay-poll": "duration", "relay-lease": "duration", "hold-expiry-period": "duration", "key-retention": "duration", "key-memory": "duration",
	"in-flight-wait": "duration", "shutdown-timeout": "duration",
	"db-timeout": "duration", "db-connect-timeout": "duration",
}

// relayShared are the flags of the relay that serve has too.
var relayShared = []string{"db", "db-timeout", "db-connect-timeout", "migrate", "publish", "webhook-secret", "webhook-format",
	"webhook-endpoints", "webhook-allow-networks", "webhook-schedule", "webhook-disable-after", "webhook-timeout", "relay-batch", "relay-poll",
	"relay-lease", "relay-max-attempts", "log-level", "log-format", "encryption-key-file"}

// RelaySettings are the flags of `idem relay`.
var RelaySettings = slices.Concat([]string{"metrics-addr"}, relayShared)

// ServeSettings are the flags of `idem serve`, which serves its metrics on
// --addr, or on --metrics-addr alone when that is set.
var ServeSettings = slices.Concat([]string{"addr", "metrics-addr", "debug-addr", "api-keys", "admin-key", "relay", "max-body-bytes",
	"key-retention", "key-memory", "idempotency-key", "in-flight-wait", "group-commit", "batch-max", "batch-concurrency", "batch-share", "shutdown-timeout",
	"tenant-rate", "tenant-burst", "tenant-concurrency",
	"currency-exponents", "hold-expiry-period"}, relayShared)

// ParseAdminKey parses the console's admin key: the key itself (at least
// MinAPIKeyLength characters) or sha256:HEX, so configuration files need not
// hold it. Only the hash is kept. An empty value means no admin key.
func ParseAdminKey(v string) (*[sha256.Size]byte, error) {
	if v == "" {
		return nil, nil
	}
	var h [sha256.Size]byte
	if hexHash, ok := strings.CutPrefix(v, "sha256:"); ok {
		b, err := hex.DecodeString(hexHash)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("admin key: sha256: wants 64 hex digits")
		}
		copy(h[:], b)
		return &h, nil
	}
	if len(v) < MinAPIKeyLength {
		return nil, fmt.Errorf("admin key is shorter than %d characters", MinAPIKeyLength)
	}
	h = sha256.Sum256([]byte(v))
	return &h, nil
}
