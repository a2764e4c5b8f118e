package load

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
	"github.com/idemhq/idem/cmd/idem/internal/load/verify"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// small is a quick run's configuration against url.
func small(url string) run.Config {
	return run.Config{Targets: []string{url}, Accounts: 6, Operations: 150, Duplicates: 0.3, Concurrency: 8,
		Seed: 42, Timeout: 5 * time.Second, BackoffMax: 20 * time.Millisecond, Settle: 10 * time.Second, RefusedShare: 0.1, EventsWait: time.Second}
}

func checks(r *run.Report) map[string]int {
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
		// The same ledger bugs with the events checked: the listings
		// confirm what they can, and must confirm none of these.
		{"double-applies a duplicate, events checked", bugs{doubleApply: true}, true, "applied_twice", false},
		{"loses acknowledged transfers, events checked", bugs{loseTransfer: true}, true, "acknowledged_lost", false},
		{"applies a refused transfer, events checked", bugs{refusedApplied: true}, true, "refused_applied", false},
		{"stores another amount than answered, events checked", bugs{wrongAmount: true}, true, "transfer_differs", false},
	}
	// And once more against a service that lists no events, so that
	// every transfer is looked up by its own GET.
	for _, c := range cases {
		if !c.events && !c.webhooks {
			c.name += ", no events listed"
			c.bugs.noEvents = true
			cases = append(cases, c)
		}
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
			if c.bugs.webhookTwice && !slices.ContainsFunc(r.Details, func(v run.Violation) bool {
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
			if c.want == "" && !c.bugs.flaky {
				// Effects, read from the fake's own state: each applied
				// transfer posted once.
				f.mu.Lock()
				defer f.mu.Unlock()
				applied, ledgerOps := 0, 0
				for _, o := range j.Ops {
					if o.Kind == run.KindTransfer || o.Kind == run.KindReversal {
						ledgerOps++
					}
					if (o.Kind == run.KindTransfer || o.Kind == run.KindReversal) && o.Applied() {
						applied++
						if f.transfers[o.ID] == nil {
							t.Errorf("applied %s missing from the service", o.ID)
						}
					}
				}
				if applied != len(f.transfers) {
					t.Errorf("%d applied, the service holds %d transfers", applied, len(f.transfers))
				}
				// The listings settled every transfer: none was looked up
				// by its own GET. Without events listed, every one was.
				want := 0
				if c.bugs.noEvents {
					want = ledgerOps
				}
				if f.transferGets != want {
					t.Errorf("%d GET /v1/transfers/{id} for %d transfers and reversals, %d applied; want %d", f.transferGets, ledgerOps, applied, want)
				}
			}
		})
	}
}

// checkWebhookEffects reads the fake's own state after a run with webhook
// deliveries: the copies of a delivery were real redeliveries (several
// distinct signatures for one id), and, for a correct service, each applied
// delivery left exactly one event.
func checkWebhookEffects(t *testing.T, f *fake, r *run.Report, j *run.Journal, correct bool) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	applied, resigned := 0, 0
	for _, o := range j.Ops {
		if o.Kind != run.KindWebhook || !o.Applied() {
			continue
		}
		applied++
		if len(f.sigs[o.ID]) > 1 {
			resigned++
		}
	}
	if applied == 0 || r.Operations[run.KindWebhook] < applied {
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
			events[verify.PayloadID(ev.Payload)]++
		}
	}
	for _, o := range j.Ops {
		if o.Kind == run.KindWebhook && o.Applied() && events[o.ID] != 1 {
			t.Errorf("delivery %s left %d events", o.ID, events[o.ID])
		}
	}
	if len(events) != applied || r.WebhookEvents != applied {
		t.Errorf("%d deliveries applied; the fake holds events of %d, the report counts %d", applied, len(events), r.WebhookEvents)
	}
}

// A service that loses acknowledged transfers with everything they wrote
// (a failover of asynchronous replication): an ordinary run reports each
// as acknowledged_lost, a violation; with ExpectLoss they are a figure,
// Lost, with their keys, and everything else must still hold: a lost
// transfer a later copy did again is there once, balances add up.
func TestExpectLoss(t *testing.T) {
	t.Parallel()
	for _, expect := range []bool{false, true} {
		f, srv := newFake(t, bugs{commitLost: true})
		cfg := small(srv.URL)
		cfg.CheckEvents, cfg.ExpectLoss = true, expect
		r, _, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		dropped := len(f.lostIDs)
		f.mu.Unlock()
		if dropped == 0 || r.Lost == 0 || r.Lost > dropped || len(r.LostKeys) != r.Lost {
			t.Fatalf("expect loss %v: the fake dropped %d transfers; the report counts %d lost, keys %v", expect, dropped, r.Lost, r.LostKeys)
		}
		got := checks(r)
		if !expect && got["acknowledged_lost"] != r.Lost {
			t.Fatalf("without ExpectLoss: %d lost, violations %v", r.Lost, got)
		}
		if expect && r.Violations != 0 {
			t.Fatalf("with ExpectLoss: %d violations: %v", r.Violations, r.Details)
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
	back, err := run.ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Ops) != len(j.Ops) || back.Ops[3].Answer != j.Ops[3].Answer {
		t.Fatal("journal did not round-trip")
	}
	r2, err := verify.Journal(context.Background(), run.Config{Targets: []string{srv.URL}, Probes: 1000}, back)
	if err != nil || r2.Violations != 0 || r2.Applied != r.Applied {
		t.Fatalf("verify: %v %+v", err, r2)
	}

	// Tamper with one acknowledged transfer's answer: the probe's replay
	// and the GET no longer match it.
	for _, o := range back.Ops {
		if o.Kind == run.KindTransfer && o.Applied() {
			o.Answer = strings.Replace(o.Answer, `"amount":`, `"amount":9`, 1)
			break
		}
	}
	r3, err := verify.Journal(context.Background(), run.Config{Targets: []string{srv.URL}, Probes: 1000}, back)
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
			counts, err := verify.ReadStream(context.Background(), url)
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
