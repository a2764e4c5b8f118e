package run

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeWebhookSecret is the secret of the load package's fake service.
var fakeWebhookSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("load-test-secret-of-32-bytes-ok!"))

// The tool's Standard Webhooks signer agrees with the specification's
// reference library, and the service's verifier accepts what it signs and
// refuses it with another secret.
func TestSignStandard(t *testing.T) {
	t.Parallel()
	key, err := webhookKey(fakeWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := standardwebhooks.NewWebhook(fakeWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now()
	body := []byte(`{"type":"load.ping","data":{"n":1}}`)
	h := signStandard(key, "ld1-w1", ts, body)
	want, err := ref.Sign("ld1-w1", ts, body)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("Webhook-Signature"); got != want {
		t.Fatalf("signature %q; the reference library signs %q", got, want)
	}
	if err := ref.Verify(body, h); err != nil {
		t.Fatalf("reference library refuses: %v", err)
	}
	// A redelivery a second later: same id and body, another signature.
	if again := signStandard(key, "ld1-w1", ts.Add(time.Second), body); again.Get("Webhook-Signature") == h.Get("Webhook-Signature") {
		t.Fatal("a new timestamp made the same signature")
	}
	other, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("another-secret-of-thirty-two-by!")))
	if err := other.Verify(body, h); err == nil {
		t.Fatal("another secret verified the signature")
	}
	for _, bad := range []string{"whsec_!!!", "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))} {
		if _, err := webhookKey(bad); err == nil {
			t.Errorf("secret %q accepted", bad)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	ok := Config{Targets: []string{"http://127.0.0.1:1"}}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"defaults", func(*Config) {}, ""},
		{"no target", func(c *Config) { c.Targets = nil }, "no target"},
		{"bad target", func(c *Config) { c.Targets = []string{"127.0.0.1:80"} }, "want http(s)"},
		{"duplicates", func(c *Config) { c.Duplicates = 0.95 }, "duplicates"},
		{"one account", func(c *Config) { c.Accounts = 1 }, "accounts"},
		{"burst", func(c *Config) { c.Burst = 65 }, "burst"},
		{"rate", func(c *Config) { c.Rate = -1 }, "rate"},
		{"timeout", func(c *Config) { c.Timeout = time.Millisecond }, "timeout"},
		{"webhooks", func(c *Config) { c.WebhookEndpoint, c.WebhookSecret, c.CheckEvents = "hooks", fakeWebhookSecret, true }, ""},
		{"webhook without secret", func(c *Config) { c.WebhookEndpoint, c.CheckEvents = "hooks", true }, "--webhook-secret"},
		{"webhook without events", func(c *Config) { c.WebhookEndpoint, c.WebhookSecret = "hooks", fakeWebhookSecret }, "--check-events"},
		{"webhook endpoint name", func(c *Config) {
			c.WebhookEndpoint, c.WebhookSecret, c.CheckEvents = "a/b", fakeWebhookSecret, true
		}, "endpoint"},
		{"webhook secret", func(c *Config) { c.WebhookSecret = "whsec_abc" }, "webhook secret"},
		{"webhook share", func(c *Config) { c.WebhookEndpoint, c.WebhookShare = "hooks", 2 }, "webhook share"},
	}
	for _, c := range cases {
		cfg := ok
		c.mutate(&cfg)
		err := cfg.WithDefaults().Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// With Explicit, a zero is kept where it is a value, and refused where
	// it is not; without, it takes the default.
	zero := Config{Targets: ok.Targets, Accounts: 2, Operations: 1, Duration: time.Second, Burst: 1, Concurrency: 1,
		Timeout: time.Second, BackoffMax: time.Second, Explicit: true}
	if err := zero.WithDefaults().Validate(); err != nil {
		t.Errorf("explicit zeros: %v", err)
	}
	if c := zero.WithDefaults(); c.Duplicates != 0 || c.Retries != 0 || c.Settle != 0 || c.RefusedShare != 0 ||
		c.Probes != 0 || c.EventsWait != 0 || c.WebhookShare != 0 {
		t.Errorf("explicit zeros replaced: %+v", c)
	}
	if c := (Config{}).WithDefaults(); c.Settle != defaultSettle || c.RefusedShare != defaultRefusedShare {
		t.Errorf("zero config: settle %s, refused share %g, want the defaults", c.Settle, c.RefusedShare)
	}
	if err := (Config{Targets: ok.Targets, Explicit: true}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "accounts 0") {
		t.Errorf("explicit zero accounts: %v", err)
	}
}

// The JSON report has an integer violations member and the details beside it.
func TestReportJSON(t *testing.T) {
	t.Parallel()
	st := NewStats(1)
	st.observe(outcomeFirst, 3*time.Millisecond)
	st.Violate(Violation{Check: "zero_sum", Detail: "x"})
	var r Report
	st.Fill(&r)
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["violations"] != float64(1) || len(m["violation_details"].([]any)) != 1 {
		t.Fatalf("report JSON: %s", b)
	}
	var sb strings.Builder
	r.WriteTable(&sb)
	if !strings.Contains(sb.String(), "violations: 1") || !strings.Contains(sb.String(), "first") {
		t.Fatalf("table:\n%s", sb.String())
	}
}

// Defaults holds every default (the command line's flags show them) and
// takes zeros as given.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	d := Defaults()
	if !d.Explicit || d.Accounts != defaultAccounts || d.Duplicates != defaultDuplicates || d.Settle != defaultSettle ||
		d.RefusedShare != defaultRefusedShare || d.Retries != defaultRetries || d.WebhookShare != defaultWebhookShare ||
		d.BackoffMax != defaultBackoffMax || d.Probes != defaultProbes {
		t.Errorf("Defaults: %+v", d)
	}
}
