package run

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
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
		{"holds", func(c *Config) { c.HoldShare = 0.5 }, ""},
		{"hold share", func(c *Config) { c.HoldShare = 1.5 }, "hold share"},
		{"hold timeout", func(c *Config) { c.HoldShare, c.HoldTimeout = 0.5, 1500*time.Millisecond }, "hold timeout"},
		{"hold expiry period", func(c *Config) { c.HoldShare, c.HoldExpiryPeriod = 0.5, 2*time.Minute }, "hold expiry period"},
		{"hold grace", func(c *Config) { c.HoldGrace = -time.Second }, "hold grace"},
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
	r := Report{Operations: map[Kind]int{KindTransfer: 1000}, LoadSeconds: 2, VerifySeconds: 0.25}
	st.Fill(&r)
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["violations"] != float64(1) || len(m["violation_details"].([]any)) != 1 || m["load_seconds"] != float64(2) || m["verify_seconds"] != 0.25 {
		t.Fatalf("report JSON: %s", b)
	}
	var sb strings.Builder
	r.WriteTable(&sb)
	// The load phase's and the verification's rates, beside their times.
	if !strings.Contains(sb.String(), "violations: 1") || !strings.Contains(sb.String(), "first") ||
		!strings.Contains(sb.String(), "2.0s  500 ops/s") || !strings.Contains(sb.String(), "0.2s  4000 ops/s") {
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
		d.BackoffMax != defaultBackoffMax || d.Probes != defaultProbes || d.HoldTimeout != defaultHoldTimeout ||
		d.HoldExpiryPeriod != defaultHoldPeriod || d.HoldGrace != defaultHoldGrace || d.HoldShare != 0 {
		t.Errorf("Defaults: %+v", d)
	}
}

// The fault figures, on a timeline of attempts made by hand: the first
// failure after a fault's start, the first success begun after it, the
// failures in between, each fault measured up to the next one's start; a
// fault no request noticed costs nothing, and one never recovered from
// says so.
func TestFaultFigures(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	st := NewStats(1)
	// Before the first fault: successes, and a failure that must not count.
	st.mark(at(0), at(10), false)
	st.mark(at(20), at(30), true)
	// Fault 1 at 100 ms: an attempt begun before it fails at 150, two more
	// fail, one begun before the first failure succeeds (not a recovery),
	// then one begun after it succeeds at 400.
	st.mark(at(90), at(150), true)
	st.mark(at(160), at(200), true)
	st.mark(at(140), at(250), false)
	st.mark(at(210), at(300), true)
	st.mark(at(310), at(400), false)
	st.mark(at(500), at(900), true) // after the recovery: not counted
	// Fault 2 at 1000 ms: nothing fails. Fault 3 at 2000 ms: failures to
	// the end.
	st.mark(at(1100), at(1200), false)
	st.mark(at(2100), at(2200), true)
	got := st.Figures([]FaultWindow{
		{Kind: "db_restart", Start: at(2000), End: at(2500)},
		{Kind: "failover", Start: at(100), End: at(700)},
		{Kind: "failover", Start: at(1000), End: at(1010)},
	}, t0, at(3000))
	want := []Fault{
		{Kind: "failover", AtSeconds: 0.1, CommandMS: 600, FirstFailureMS: 50, RecoveredMS: 300, Recovered: true, FailedRequests: 3},
		{Kind: "failover", AtSeconds: 1, CommandMS: 10, Recovered: true},
		{Kind: "db_restart", AtSeconds: 2, CommandMS: 500, FirstFailureMS: 200, FailedRequests: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("figures:\n got %+v\nwant %+v", got, want)
	}
}

// A progress line shows the rate so far and the time left at that rate;
// the final one, and a phase without a total, no estimate.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	const counts = "0 violations"
	cases := []struct {
		bar, final  bool
		done, total int
		elapsed     time.Duration
		want        string
	}{
		{false, false, 33_838, 81_159, 10 * time.Second, "load: verify 33838/81159 ops, 3384 ops/s, 14s left, 0 violations\n"},
		{false, false, 0, 81_159, 10 * time.Second, "load: verify 0/81159 ops, 0 violations\n"},
		{false, true, 81_159, 81_159, 20 * time.Second, "load: verify 81159/81159 ops, 4058 ops/s, 0 violations\n"},
		{false, false, 5, 0, time.Second, "load: verify, 0 violations\n"},
		{true, false, 50, 100, time.Second, "\r\033[Kverify    [###############...............] 50/100 ops, 50 ops/s, 1s left, 0 violations"},
		{true, true, 100, 100, time.Second, "\r\033[Kverify    [##############################] 100/100 ops, 100 ops/s, 0 violations\n"},
	}
	for _, c := range cases {
		if got := progressLine(c.bar, c.final, "verify", "ops", c.done, c.total, c.elapsed, counts); got != c.want {
			t.Errorf("progressLine(%v, %v, %d/%d, %s) = %q, want %q", c.bar, c.final, c.done, c.total, c.elapsed, got, c.want)
		}
	}
	// The estimate is the rest at the rate so far, never under a second
	// while something is left.
	for _, c := range []struct {
		done, total int
		elapsed     time.Duration
		want        time.Duration
	}{
		{1, 4, 3 * time.Second, 9 * time.Second},
		{999, 1000, time.Second, time.Second},
		{0, 10, time.Second, 0},
		{10, 10, time.Second, 0},
	} {
		if got := timeLeft(c.done, c.total, c.elapsed); got != c.want {
			t.Errorf("timeLeft(%d, %d, %s) = %s, want %s", c.done, c.total, c.elapsed, got, c.want)
		}
	}
}
