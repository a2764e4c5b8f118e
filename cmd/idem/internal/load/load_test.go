package load

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// small is a quick run's configuration against url.
func small(url string) Config {
	return Config{Targets: []string{url}, Accounts: 6, Operations: 150, Duplicates: 0.3, Concurrency: 8,
		Seed: 42, Timeout: 5 * time.Second, BackoffMax: 20 * time.Millisecond, Settle: 10 * time.Second, RefusedShare: 0.1, EventsWait: time.Second}
}

func checks(r *Report) map[string]int {
	m := map[string]int{}
	for _, v := range r.Details {
		m[v.Check]++
	}
	return m
}

// A verifier that cannot fail is worthless: each broken service must be
// caught by the check that names its broken promise, and the correct one
// (even when it answers 503, 409 and loses answers after commit) must pass.
func TestVerifierCatchesBrokenServices(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		bugs     bugs
		events   bool
		want     string // "" = no violations
		webhooks bool
	}{
		{"correct", bugs{}, false, "", false},
		{"correct with webhooks", bugs{}, true, "", true},
		{"correct but flaky", bugs{flaky: true}, true, "", true},
		{"applies a webhook redelivery twice", bugs{webhookTwice: true}, true, "event_doubled", true},
		{"double-applies a duplicate", bugs{doubleApply: true}, false, "applied_twice", false},
		{"different body on replay", bugs{replayDiffers: true}, false, "replay_differs", false},
		{"loses acknowledged transfers", bugs{loseTransfer: true}, false, "acknowledged_lost", false},
		{"applies a refused transfer", bugs{refusedApplied: true}, false, "refused_applied", false},
		{"stores another amount than answered", bugs{wrongAmount: true}, false, "transfer_differs", false},
		{"lists an event twice", bugs{eventDoubled: true}, true, "event_doubled", false},
		{"misses an event", bugs{eventMissing: true}, true, "event_missing", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f, srv := newFake(t, c.bugs)
			cfg := small(srv.URL)
			cfg.CheckEvents = c.events
			if c.webhooks {
				cfg.WebhookEndpoint, cfg.WebhookSecret, cfg.WebhookShare = "hooks", fakeWebhookSecret, 0.3
			}
			r, j, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := checks(r)
			if c.want == "" {
				if r.Violations != 0 {
					t.Fatalf("correct service: %d violations: %v", r.Violations, r.Details)
				}
			} else if got[c.want] == 0 {
				t.Fatalf("want a %s violation; got %v", c.want, r.Details)
			}
			if c.bugs.webhookTwice && !slices.ContainsFunc(r.Details, func(v Violation) bool {
				return v.Check == "event_doubled" && strings.Contains(v.Detail, "redelivery was applied again")
			}) {
				t.Fatalf("no doubled webhook delivery reported: %v", r.Details)
			}
			// The run did what it says: duplicates sent, replays served,
			// every operation answered.
			if r.Duplicates == 0 || r.Replays == 0 || r.Unresolved != 0 || r.Probes == 0 {
				t.Fatalf("report: %+v", r)
			}
			if dupShare := float64(r.Duplicates) / float64(r.Requests-r.Retries); dupShare < 0.2 || dupShare > 0.4 {
				t.Errorf("duplicates are %.2f of requests, want about 0.3", dupShare)
			}
			if c.bugs.flaky && r.Retries == 0 {
				t.Error("flaky service, but no retries")
			}
			if c.webhooks {
				checkWebhookEffects(t, f, r, j, c.want == "")
			}
			if c.name == "correct" {
				// Effects, read from the fake's own state: each applied
				// transfer posted once.
				f.mu.Lock()
				defer f.mu.Unlock()
				applied := 0
				for _, o := range j.Ops {
					if (o.Kind == KindTransfer || o.Kind == KindReversal) && o.Applied() {
						applied++
						if f.transfers[o.ID] == nil {
							t.Errorf("applied %s missing from the service", o.ID)
						}
					}
				}
				if applied != len(f.transfers) {
					t.Errorf("%d applied, the service holds %d transfers", applied, len(f.transfers))
				}
			}
		})
	}
}

// checkWebhookEffects reads the fake's own state after a run with webhook
// deliveries: the copies of a delivery were real redeliveries (several
// distinct signatures for one id), and, for a correct service, each applied
// delivery left exactly one event.
func checkWebhookEffects(t *testing.T, f *fake, r *Report, j *Journal, correct bool) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	applied, resigned := 0, 0
	for _, o := range j.Ops {
		if o.Kind != KindWebhook || !o.Applied() {
			continue
		}
		applied++
		if len(f.sigs[o.ID]) > 1 {
			resigned++
		}
	}
	if applied == 0 || r.Operations[KindWebhook] < applied {
		t.Fatalf("%d webhook deliveries applied; report %v", applied, r.Operations)
	}
	if resigned == 0 {
		t.Error("no delivery was resent under a new signature")
	}
	if !correct {
		return
	}
	events := map[string]int{}
	for _, ev := range f.events {
		if strings.HasPrefix(ev.Type, "webhook.standard.") {
			events[payloadID(ev.Payload)]++
		}
	}
	for _, o := range j.Ops {
		if o.Kind == KindWebhook && o.Applied() && events[o.ID] != 1 {
			t.Errorf("delivery %s left %d events", o.ID, events[o.ID])
		}
	}
	if len(events) != applied || r.WebhookEvents != applied {
		t.Errorf("%d deliveries applied; the fake holds events of %d, the report counts %d", applied, len(events), r.WebhookEvents)
	}
}

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

// Verify reads a journal back and checks the service again; a journal whose
// acknowledged answer the service does not match fails.
func TestVerifyJournal(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, bugs{})
	r, j, err := Run(context.Background(), small(srv.URL))
	if err != nil || r.Violations != 0 {
		t.Fatalf("run: %v %v", err, r.Details)
	}
	path := filepath.Join(t.TempDir(), "journal.json")
	if err := j.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Ops) != len(j.Ops) || back.Ops[3].Answer != j.Ops[3].Answer {
		t.Fatal("journal did not round-trip")
	}
	r2, err := Verify(context.Background(), Config{Targets: []string{srv.URL}, Probes: 1000}, back)
	if err != nil || r2.Violations != 0 || r2.Applied != r.Applied {
		t.Fatalf("verify: %v %+v", err, r2)
	}

	// Tamper with one acknowledged transfer's answer: the probe's replay
	// and the GET no longer match it.
	for _, o := range back.Ops {
		if o.Kind == KindTransfer && o.Applied() {
			o.Answer = strings.Replace(o.Answer, `"amount":`, `"amount":9`, 1)
			break
		}
	}
	r3, err := Verify(context.Background(), Config{Targets: []string{srv.URL}, Probes: 1000}, back)
	if err != nil {
		t.Fatal(err)
	}
	if c := checks(r3); c["replay_differs"] == 0 || c["transfer_differs"] == 0 {
		t.Fatalf("tampered journal: %v", r3.Details)
	}
}

// The NATS check against a real embedded JetStream server: one message per
// event passes; a missing or doubled publish fails.
func TestNATSCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		bugs bugs
		want string
	}{
		{"once each", bugs{}, ""},
		{"missing publish", bugs{natsMissing: true}, "nats_missing"},
		{"doubled publish", bugs{natsDoubled: true}, "nats_doubled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, js := startNATS(t)
			f, srv := newFake(t, c.bugs)
			f.js = js
			cfg := small(srv.URL)
			cfg.Operations = 60
			cfg.NATS = url
			cfg.EventsWait = 10 * time.Second
			r, _, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.EventsChecked == 0 {
				t.Fatal("no events checked")
			}
			got := checks(r)
			if c.want == "" && r.Violations != 0 {
				t.Fatalf("%d violations: %v", r.Violations, r.Details)
			}
			if c.want != "" && got[c.want] == 0 {
				t.Fatalf("want %s; got %v", c.want, r.Details)
			}
			// The stream itself, read independently: one message per
			// listed event in the correct case.
			counts, err := streamMsgIDs(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" && len(counts) != r.EventsChecked {
				t.Fatalf("stream holds %d ids for %d events", len(counts), r.EventsChecked)
			}
		})
	}
}

// startNATS runs an embedded JetStream server with stream IDEM (a short
// duplicate window, so a test can publish past it) and returns its URL.
func startNATS(t *testing.T) (string, nats.JetStreamContext) {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "IDEM", Subjects: []string{"idem.>"},
		Duplicates: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return ns.ClientURL(), js
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
		err := cfg.withDefaults().validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// With Explicit, a zero is kept where it is a value, and refused where
	// it is not; without, it takes the default.
	zero := Config{Targets: ok.Targets, Accounts: 2, Operations: 1, Duration: time.Second, Burst: 1, Concurrency: 1,
		Timeout: time.Second, BackoffMax: time.Second, Explicit: true}
	if err := zero.withDefaults().validate(); err != nil {
		t.Errorf("explicit zeros: %v", err)
	}
	if c := zero.withDefaults(); c.Duplicates != 0 || c.Retries != 0 || c.Settle != 0 || c.RefusedShare != 0 ||
		c.Probes != 0 || c.EventsWait != 0 || c.WebhookShare != 0 {
		t.Errorf("explicit zeros replaced: %+v", c)
	}
	if c := (Config{}).withDefaults(); c.Settle != defaultSettle || c.RefusedShare != defaultRefusedShare {
		t.Errorf("zero config: settle %s, refused share %g, want the defaults", c.Settle, c.RefusedShare)
	}
	if err := (Config{Targets: ok.Targets, Explicit: true}).withDefaults().validate(); err == nil || !strings.Contains(err.Error(), "accounts 0") {
		t.Errorf("explicit zero accounts: %v", err)
	}
}

// The JSON report has an integer violations member and the details beside it.
func TestReportJSON(t *testing.T) {
	t.Parallel()
	st := newStats(1)
	st.observe(outcomeFirst, 3*time.Millisecond)
	st.violate(Violation{Check: "zero_sum", Detail: "x"})
	var r Report
	st.fill(&r)
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
