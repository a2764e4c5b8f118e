package config

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load("serve", nil, env(nil), ServeSettings...)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:8080" || c.DB != "" || !c.Relay || c.MaxBodyBytes != 1<<20 ||
		c.KeyRetention != 24*time.Hour || c.KeyMemory != 0 || c.InFlightWait != 5*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestPrecedenceFlagsOverEnvOverFile(t *testing.T) {
	t.Parallel()
	file := writeFile(t, `
addr: 127.0.0.1:7000
db: sqlite:/tmp/from-file.db
key_retention: 48h
key_memory: 2160h
api_keys: ["acme:0123456789abcdef", "globex:fedcba9876543210"]
relay: false
webhooks:
  stripe-main:
    provider: stripe
    secrets: ["whsec_x"]
`)
	c, err := Load("serve", []string{"--config", file, "--addr", "127.0.0.1:9000"},
		env(map[string]string{"IDEM_ADDR": "127.0.0.1:8000", "IDEM_DB": "postgres://env/db", "IDEM_IN_FLIGHT_WAIT": "250ms"}),
		ServeSettings...)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9000" {
		t.Errorf("addr %q: the flag must win", c.Addr)
	}
	if c.DB != "postgres://env/db" {
		t.Errorf("db %q: the environment must beat the file", c.DB)
	}
	if c.KeyRetention != 48*time.Hour || c.KeyMemory != 90*24*time.Hour || c.Relay || len(c.APIKeys) != 2 || c.APIKeys[1].Tenant != "globex" {
		t.Errorf("file values lost: %+v", c)
	}
	if c.InFlightWait != 250*time.Millisecond {
		t.Errorf("in-flight wait %s", c.InFlightWait)
	}
	if !strings.Contains(string(c.Webhooks), "stripe-main") {
		t.Errorf("webhooks block not kept: %q", c.Webhooks)
	}
	// IDEM_CONFIG names the file when --config does not.
	c, err = Load("serve", nil, env(map[string]string{"IDEM_CONFIG": file}), ServeSettings...)
	if err != nil || c.Addr != "127.0.0.1:7000" {
		t.Fatalf("IDEM_CONFIG: %v %q", err, c.Addr)
	}
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want string
	}{
		{"public addr without keys", []string{"--addr", "0.0.0.0:8080"}, nil, "", `--addr (IDEM_ADDR) "0.0.0.0:8080" is not loopback`},
		{"all interfaces without keys", []string{"--addr", ":8080"}, nil, "", "not loopback"},
		{"bad duration", nil, map[string]string{"IDEM_KEY_RETENTION": "forever"}, "", "IDEM_KEY_RETENTION"},
		{"retention too short", []string{"--key-retention", "1s"}, nil, "", "--key-retention (IDEM_KEY_RETENTION) 1s is outside 1m..400 days"},
		{"memory below the retention", []string{"--key-retention", "48h", "--key-memory", "24h"}, nil, "", "--key-memory (IDEM_KEY_MEMORY) 24h0m0s is outside 48h0m0s..400 days (it is at least --key-retention (IDEM_KEY_RETENTION))"},
		{"memory too long", nil, map[string]string{"IDEM_KEY_MEMORY": "9700h"}, "", "--key-memory (IDEM_KEY_MEMORY) 9700h0m0s is outside"},
		{"memory not a duration", nil, nil, "key_memory: a month\n", "key_memory"},
		{"relay poll 0s, a flag", []string{"--relay-poll", "0s"}, nil, "", "config: --relay-poll (IDEM_RELAY_POLL) 0s is outside 1ms..1m"},
		{"relay poll 0s, a variable", nil, map[string]string{"IDEM_RELAY_POLL": "0s"}, "", "config: --relay-poll (IDEM_RELAY_POLL) 0s is outside 1ms..1m"},
		{"body limit too big", []string{"--max-body-bytes", "1000000000"}, nil, "", "--max-body-bytes (IDEM_MAX_BODY_BYTES) 1000000000 is outside"},
		{"short key", nil, map[string]string{"IDEM_API_KEYS": "acme:short"}, "", "shorter than"},
		{"bad tenant", nil, map[string]string{"IDEM_API_KEYS": "a c:0123456789abcdef"}, "", "tenant"},
		{"duplicate key", nil, map[string]string{"IDEM_API_KEYS": "a:0123456789abcdef,b:0123456789abcdef"}, "", "twice"},
		{"bad hash", nil, map[string]string{"IDEM_API_KEYS": "a:sha256:zz"}, "", "64 hex"},
		{"unknown yaml", nil, nil, "adress: 127.0.0.1:1\n", "unknown setting"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "", `--log-level (IDEM_LOG_LEVEL) "loud": want debug`},
		{"batch share above 1", []string{"--batch-share", "1.5"}, nil, "", "--batch-share (IDEM_BATCH_SHARE) 1.5 is outside 0..1"},
		{"batch share not a number", nil, map[string]string{"IDEM_BATCH_SHARE": "half"}, "", "IDEM_BATCH_SHARE"},
		{"idempotency key neither required nor optional", []string{"--idempotency-key", "sometimes"}, nil, "", "want required or optional"},
		{"stray argument", []string{"extra"}, nil, "", "unexpected argument"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if c.file != "" {
				args = append(args, "--config", writeFile(t, c.file))
			}
			_, err := Load("serve", args, env(c.env), ServeSettings...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "0123456789abcdef") {
				t.Fatalf("error leaks the key: %v", err)
			}
		})
	}
}

func TestPublicAddrWithKeys(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("0123456789abcdef"))
	c, err := Load("serve", []string{"--addr", "0.0.0.0:8080", "--api-keys", "acme:sha256:" + hex.EncodeToString(sum[:])}, env(nil), ServeSettings...)
	if err != nil {
		t.Fatal(err)
	}
	if c.APIKeys[0].Hash != sum {
		t.Fatal("pre-hashed key not kept")
	}
}

// --metrics-addr is a flag of idem relay and of idem serve (which then
// answers /metrics there only), and must be a host:port.
func TestMetricsAddr(t *testing.T) {
	t.Parallel()
	c, err := Load("relay", []string{"--metrics-addr", "0.0.0.0:8081"}, env(nil), RelaySettings...)
	if err != nil || c.MetricsAddr != "0.0.0.0:8081" {
		t.Fatalf("relay --metrics-addr: %v %q", err, c.MetricsAddr)
	}
	c, err = Load("relay", nil, env(map[string]string{"IDEM_METRICS_ADDR": "127.0.0.1:9"}), RelaySettings...)
	if err != nil || c.MetricsAddr != "127.0.0.1:9" {
		t.Fatalf("IDEM_METRICS_ADDR: %v %q", err, c.MetricsAddr)
	}
	if _, err := Load("relay", []string{"--metrics-addr", "8081"}, env(nil), RelaySettings...); err == nil || !strings.Contains(err.Error(), "metrics-addr") {
		t.Fatalf("a port without a host: %v", err)
	}
	if c, err := Load("serve", []string{"--metrics-addr", "127.0.0.1:8081"}, env(nil), ServeSettings...); err != nil || c.MetricsAddr != "127.0.0.1:8081" {
		t.Fatalf("serve --metrics-addr: %v %q", err, c.MetricsAddr)
	}
	c, err = Load("serve", nil, env(map[string]string{"IDEM_METRICS_ADDR": "10.0.0.1:9090"}), ServeSettings...)
	if err != nil || c.MetricsAddr != "10.0.0.1:9090" {
		t.Fatalf("serve with IDEM_METRICS_ADDR: %v %q", err, c.MetricsAddr)
	}
}

// --idempotency-key is required by default, optional from a flag, its
// variable or the file (the rollout mode of idem serve).
func TestIdempotencyKeySetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", nil, nil, KeyRequired},
		{"flag", []string{"--idempotency-key", "optional"}, nil, KeyOptional},
		{"env", nil, map[string]string{"IDEM_IDEMPOTENCY_KEY": "optional"}, KeyOptional},
		{"file", []string{"--config", writeFile(t, "idempotency_key: optional\n")}, nil, KeyOptional},
		{"flag over env", []string{"--idempotency-key", "required"}, map[string]string{"IDEM_IDEMPOTENCY_KEY": "optional"}, KeyRequired},
	} {
		c, err := Load("serve", tc.args, env(tc.env), ServeSettings...)
		if err != nil || c.IdempotencyKey != tc.want {
			t.Fatalf("%s: %v %q, want %q", tc.name, err, c.IdempotencyKey, tc.want)
		}
	}
}

// A YAML syntax error names the file and the position only: the parser's
// excerpt of the neighbouring lines, and its message, which can quote the
// text it could not read, would print API keys and broker passwords.
func TestYAMLErrorShowsOnlyThePosition(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ file, want string }{
		{"publish: nats://relay:hunter2-s3cret@h:4222\napi_keys: acme:s3cret-api-key-0123\n  bad: [x\n", "at line 2, column 11"},
		{"api_keys: 's3cret-unterminated\n", "at line 1, column 11"},
		{"api_keys: acme:s3cret-key-0123456789\n\ts3cret_tab: 1\n", "at line 2, column 1"},
	} {
		path := writeFile(t, c.file)
		_, err := Load("serve", []string{"--config", path}, env(nil), ServeSettings...)
		if err == nil || !strings.Contains(err.Error(), path+": not valid YAML "+c.want) {
			t.Errorf("%q: %v, want the file and %q", c.file, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: the error shows the file's text: %q", c.file, err)
		}
	}
}

// The key file is one setting with a flag, a variable and a YAML key, for
// serve and for relay (which decrypts outbox payloads before publishing).
func TestEncryptionKeyFile(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "encryption_key_file: /etc/idem/keys-from-yaml\n")
	for _, tc := range []struct {
		cmd  string
		use  []string
		args []string
		env  map[string]string
		want string
	}{
		{"serve", ServeSettings, []string{"--config", file}, nil, "/etc/idem/keys-from-yaml"},
		{"serve", ServeSettings, []string{"--config", file}, map[string]string{"IDEM_ENCRYPTION_KEY_FILE": "/env/keys"}, "/env/keys"},
		{"relay", RelaySettings, []string{"--config", file, "--encryption-key-file", "/flag/keys"},
			map[string]string{"IDEM_ENCRYPTION_KEY_FILE": "/env/keys"}, "/flag/keys"},
		{"serve", ServeSettings, nil, nil, ""},
	} {
		c, err := Load(tc.cmd, tc.args, env(tc.env), tc.use...)
		if err != nil || c.EncryptionKeyFile != tc.want {
			t.Errorf("%s %v %v: %q %v, want %q", tc.cmd, tc.args, tc.env, c.EncryptionKeyFile, err, tc.want)
		}
	}
}
