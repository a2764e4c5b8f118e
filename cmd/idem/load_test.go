package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/load"
	loadrun "github.com/idemhq/idem/cmd/idem/internal/load/run"
	"github.com/idemhq/idem/internal/testpg"
)

// loadRun runs `idem load args... --json` in this process and returns the
// report it printed and the command's error.
func loadRun(t *testing.T, args ...string) (loadrun.Report, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), append(append([]string{"load"}, args...), "--json"), &stdout, &stderr)
	var r loadrun.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
		t.Fatalf("load %v: %v (%v); stdout %q\nstderr:\n%s", args, err, jerr, stdout.String(), stderr.String())
	}
	if t.Failed() || r.Violations > 0 {
		t.Logf("load stderr:\n%s", stderr.String())
	}
	return r, err
}

// metric reads one counter from /metrics.
func metric(t *testing.T, url, series string) int64 {
	t.Helper()
	m := call(t, "GET", url+"/metrics", "", nil)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`)
	match := re.FindSubmatch(m.Body)
	if match == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(match[1]), 10, 64)
	return n
}

// loadWebhookSecret is the Standard Webhooks secret of the load tests'
// endpoint: whsec_ and the base64 of 32 bytes.
var loadWebhookSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("idem-load-webhook-secret-32bytes"))

// loadWebhookConfig writes a serve configuration with one standard
// endpoint, "hooks", in the default tenant (the tenant GET /v1/events lists
// without API keys), and returns its path.
func loadWebhookConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.yaml")
	cfg := "webhooks:\n  hooks:\n    provider: standard\n    secrets: [" + loadWebhookSecret + "]\n    tenant: default\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// idem load with --target and a webhook endpoint against a real idem
// serve, on both databases: zero violations, webhook deliveries among the
// operations with their events counted, and the service's own counters
// agree that each operation and delivery ran once and every duplicate and
// redelivery was a replay.
func TestLoad(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		// The relay publishes to a real NATS server, so the verifier checks
		// the events API and the stream: one message per event.
		natsURL, _ := startNATS(t)
		p, _ := serveDB(t, dialect, nil, "--publish", natsURL, "--config", loadWebhookConfig(t))
		journal := filepath.Join(t.TempDir(), "journal.json")
		// The run's end is its 1000 operations, not the clock (--duration
		// alone would be the run's length): the default
		// 30s duration cut the main phase short on a loaded machine (half
		// the operations sent, the count below wrong). A copy that times
		// out is retried, and its retry may be a replay the service counts
		// and the run does not see: the exchange's bound is generous too.
		r, err := loadRun(t, "--target", p.URL, "--journal", journal, "--nats", natsURL,
			"--operations", "1000", "--duration", "10m", "--timeout", "2m",
			"--webhook-endpoint", "hooks", "--webhook-secret", loadWebhookSecret)
		if err != nil || r.Violations != 0 {
			t.Fatalf("load: %v; %d violations: %v", err, r.Violations, r.Details)
		}
		ops := 0
		for _, n := range r.Operations {
			ops += n
		}
		hooks := r.Operations[loadrun.KindWebhook]
		if ops != 1016 || r.Unresolved != 0 || r.Duplicates == 0 || r.Replays < r.Duplicates || r.Probes == 0 {
			t.Fatalf("report: %+v", r)
		}
		if hooks == 0 || r.WebhookEvents != hooks {
			t.Fatalf("%d webhook deliveries, %d webhook events checked", hooks, r.WebhookEvents)
		}
		// The service ran each operation and delivery exactly once (no
		// retries happened against a healthy server, so nothing was rolled
		// back and redone)…
		first := metric(t, p.URL, `idem_http_idempotency_outcomes_total{outcome="first"}`)
		whFirst := metric(t, p.URL, `idem_webhook_deliveries_total{endpoint="hooks",outcome="first"}`)
		if r.Retries == 0 && (first != int64(ops-hooks) || whFirst != int64(hooks)) {
			t.Errorf("service ran %d handlers for %d operations and %d deliveries for %d", first, ops-hooks, whFirst, hooks)
		}
		// …and answered every other copy, and every probe, with a replay.
		replayed := metric(t, p.URL, `idem_http_idempotency_outcomes_total{outcome="replayed"}`) +
			metric(t, p.URL, `idem_webhook_deliveries_total{endpoint="hooks",outcome="replayed"}`)
		if replayed != r.Replays+int64(r.Probes) {
			t.Errorf("service replayed %d; the run saw %d replays and sent %d probes", replayed, r.Replays, r.Probes)
		}
		if refused := metric(t, p.URL, `idem_webhook_deliveries_total{endpoint="hooks",outcome="rejected_signature_invalid"}`); refused != 0 {
			t.Errorf("%d deliveries refused as forged", refused)
		}

		// The journal verifies again later (the probes re-sign deliveries,
		// so the secret is needed again).
		v, err := loadRun(t, "verify", "--target", p.URL, "--journal", journal, "--webhook-secret", loadWebhookSecret)
		if err != nil || v.Violations != 0 || v.Applied != r.Applied {
			t.Fatalf("verify: %v %+v", err, v)
		}

		// A journal that claims an acknowledgement the service never gave
		// fails verification with a non-zero exit.
		j, err := loadrun.ReadJournal(journal)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range j.Ops {
			if o.Kind == loadrun.KindTransfer && o.Applied() {
				o.Answer = strings.Replace(o.Answer, `"amount":`, `"amount":7`, 1)
				break
			}
		}
		bad := filepath.Join(t.TempDir(), "bad.json")
		if err := j.WriteFile(bad); err != nil {
			t.Fatal(err)
		}
		v, err = loadRun(t, "verify", "--target", p.URL, "--journal", bad, "--progress=false", "--webhook-secret", loadWebhookSecret)
		if !errors.Is(err, load.ErrViolations) || v.Violations == 0 {
			t.Fatalf("tampered journal: %v, %d violations", err, v.Violations)
		}
	})
}

// idem load --chaos on Postgres: two servers, one SIGKILLed and restarted
// about every 2 seconds while load runs, webhook deliveries included (the
// servers read the endpoint from --serve-config). Nothing acknowledged is
// lost or doubled.
//
// The run is counted in kills, not seconds: the load goes on until the
// third killed server serves again (--chaos-kills 3). A restart of the
// race-built binary takes a second on a quiet machine and several on a
// loaded one, so a fixed --duration made five kills or two; --duration is
// only the bound of a run whose servers cannot be restarted.
func TestLoadChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is long: -short skips it")
	}
	t.Parallel()
	db := dbURL(t, "postgres")
	r, err := loadRun(t, "--chaos", "--db", db, "--serve-bin", binary(t), "--kill-every", "2s", "--chaos-kills", "3",
		"--duration", "3m", "--operations", "1000000", "--concurrency", "8", "--seed", "7",
		"--serve-config", loadWebhookConfig(t), "--webhook-endpoint", "hooks", "--webhook-secret", loadWebhookSecret)
	if err != nil || r.Violations != 0 {
		t.Fatalf("chaos: %v; %d violations: %v", err, r.Violations, r.Details)
	}
	if r.Restarts < 3 || r.Applied == 0 || r.Duplicates == 0 || r.Operations[loadrun.KindWebhook] == 0 || r.WebhookEvents == 0 {
		t.Fatalf("chaos report: %+v", r)
	}
	t.Logf("chaos: %d kills, %d operations applied (%d webhook deliveries), %d requests, %d retries, %d unresolved",
		r.Restarts, r.Applied, r.Operations[loadrun.KindWebhook], r.Requests, r.Retries, r.Unresolved)
}

// idem load --chaos with every fault at once, on a Postgres cluster of the
// test's own: servers SIGKILLed, Postgres crashed and restarted by
// --chaos-db-restart (scripts/pg restart: immediate-mode stop, crash
// recovery), and --chaos-nats running a three-node JetStream cluster the
// servers publish to with three replicas, one node shut down at a time. No
// violation: nothing acknowledged lost or doubled in the database, the
// events API or the stream, which holds exactly one message per event
// across node restarts and leader changes. The faults happened, and the
// stream was checked.
func TestLoadChaosFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is long: -short skips it")
	}
	t.Parallel()
	pg := testpg.NewCluster(t)
	// A SIGKILLed server's relay shards wait for their lease to expire
	// before another server's relay publishes them: a short lease keeps
	// the verifier's wait for the last events short.
	serveCfg := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(serveCfg, []byte("relay_lease: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := loadRun(t, "--chaos", "--db", pg.URL, "--serve-bin", binary(t), "--serve-config", serveCfg, "--kill-every", "3s",
		"--chaos-db-restart", pg.RestartCommand(), "--chaos-db-every", "5s",
		"--chaos-nats", "--chaos-nats-every", "4s", "--chaos-nats-down", "2s",
		// A stand-in for a failover command (one node has no standby to
		// promote): the schedule runs it and the summary counts it.
		"--chaos-failover", "true", "--chaos-failover-every", "4s",
		"--duration", "14s", "--operations", "1000000", "--concurrency", "8", "--seed", "11")
	if err != nil || r.Violations != 0 {
		t.Fatalf("chaos: %v; %d violations: %v", err, r.Violations, r.Details)
	}
	if r.Restarts == 0 || r.DBRestarts == 0 || r.Failovers == 0 || r.NATSKills == 0 || r.Applied == 0 || r.EventsChecked == 0 || r.Unresolved != 0 {
		t.Fatalf("chaos report: %+v", r)
	}
	t.Logf("chaos: %d kills, %d database restarts, %d NATS node kills; %d operations applied, %d events checked in the stream, %d requests, %d retries",
		r.Restarts, r.DBRestarts, r.NATSKills, r.Applied, r.EventsChecked, r.Requests, r.Retries)
}

// Flags and environment: flags win, bad values are refused clearly.
func TestLoadFlags(t *testing.T) {
	t.Setenv("IDEM_LOAD_DUPLICATES", "zero")
	var out bytes.Buffer
	err := run(t.Context(), []string{"load", "--target", "http://127.0.0.1:1"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "IDEM_LOAD_DUPLICATES") {
		t.Fatalf("bad env: %v", err)
	}
	os.Unsetenv("IDEM_LOAD_DUPLICATES")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"load"}, "no target"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--duplicates", "0.95"}, "duplicates"},
		{[]string{"load", "--chaos"}, "--db"},
		{[]string{"load", "verify", "--target", "http://127.0.0.1:1"}, "--journal"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--webhook-endpoint", "hooks"}, "--webhook-secret"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--webhook-endpoint", "hooks", "--webhook-secret", "whsec_x"}, "webhook secret"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--serve-config", "idem.yaml"}, "--chaos"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--chaos-db-restart", "true"}, "add --chaos"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--chaos-nats"}, "add --chaos"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--chaos-kills", "3"}, "add --chaos"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-kills", "-1"}, "kills -1 is outside 0..1000"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--chaos-failover", "true"}, "add --chaos"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-failover", "true", "--chaos-failover-every", "10ms"}, "failover interval 10ms"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-failovers", "3"}, "add it"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-failover", "true", "--chaos-failovers", "-1"}, "failovers -1 is outside 0..1000"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-failover", strings.Repeat("x", 5000)}, "at most 4096"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-nats", "--nats", "nats://127.0.0.1:1"}, "drop --nats"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-db-restart", "true", "--chaos-db-every", "10ms"}, "database restart interval 10ms"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-db-restart", "true", "--chaos-db-timeout", "2h"}, "database restart timeout"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-nats", "--chaos-nats-every", "2h"}, "NATS node kill interval"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-nats", "--chaos-nats-down", "-1s"}, "NATS node downtime"},
		{[]string{"load", "--chaos", "--db", "postgres://127.0.0.1:1/x", "--chaos-db-restart", strings.Repeat("x", 5000)}, "at most 4096"},
	} {
		out.Reset()
		if err := run(t.Context(), c.args, &out, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	out.Reset()
	if code := exitCode(run(t.Context(), []string{"load", "-h"}, &out, &out), &out, &out); code != 0 || !strings.Contains(out.String(), "--kill-every") ||
		!strings.Contains(out.String(), "IDEM_LOAD_CHAOS_DB_RESTART") || !strings.Contains(out.String(), "IDEM_LOAD_CHAOS_NATS_EVERY") {
		t.Errorf("help: exit %d\n%s", code, out.String())
	}
}

// A flag given as 0 means 0; the defaults are for flags not given. Against
// a service that answers every request 503, a run with no duplicates, no
// retries and no settle phase sends each account exactly once and gives up
// (with the defaults it retried each 8 times, then for 30 s more).
func TestLoadExplicitZero(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	var out bytes.Buffer
	err := run(t.Context(), []string{"load", "--target", srv.URL, "--accounts", "4", "--concurrency", "1",
		"--duplicates", "0", "--retries", "0", "--settle", "0", "--progress=false"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "too few accounts") {
		t.Fatalf("load against a failing service: %v", err)
	}
	if n := requests.Load(); n != 4 {
		t.Errorf("%d requests for 4 accounts with --retries 0 --settle 0 --duplicates 0, want 4", n)
	}

	// --refused 0: no transfer is built to be refused, so the service
	// refuses none (one dialect is enough: the flag is the subject). With
	// the default share, some of these transfers would be.
	p, _ := serveDB(t, "sqlite", nil)
	r, err := loadRun(t, "--target", p.URL, "--refused", "0", "--operations", "400", "--probes", "0",
		"--duration", "10m", "--timeout", "2m", "--check-events=false", "--progress=false")
	if err != nil || r.Violations != 0 {
		t.Fatalf("load: %v; %d violations: %v", err, r.Violations, r.Details)
	}
	if r.Refused != 0 || r.Applied != r.Acknowledged || r.Operations[loadrun.KindTransfer] == 0 || r.Probes != 0 {
		t.Errorf("--refused 0 --probes 0: report %+v", r)
	}
}

// --duration alone is the run's length: the main phase sends for that
// long, past --operations' default of 1000 that ended it first. The
// target answers every write 201 at once, so a second holds far more than
// 1000 operations; its answers fail verification, which is not the
// subject here.
func TestLoadDurationAlone(t *testing.T) {
	var transfers atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/transfers") {
			transfers.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	began := time.Now()
	r, _ := loadRun(t, "--target", srv.URL, "--duration", "3s", "--rate", "2000", "--duplicates", "0",
		"--settle", "0", "--probes", "0", "--check-events=false", "--progress=false")
	ops := r.Operations[loadrun.KindTransfer] + r.Operations[loadrun.KindReversal]
	if ops <= 1000 || time.Since(began) < 3*time.Second {
		t.Fatalf("--duration 3s alone: %d transfers and reversals (%d POSTs) in %s, want a 3 s main phase past 1000",
			ops, transfers.Load(), time.Since(began).Round(time.Millisecond))
	}
}

// idem load's holds mix through the real binary, on both databases: holds
// reserved with a one-second timeout, then posted in full or in part,
// voided, posted and voided at the same instant, or left to expire. On
// Postgres two servers share the database and the race's two requests go
// one to each; then the same under --chaos for 6 s, a server SIGKILLed
// about every 2 s. The verifier reads the ledger and finds each hold settled once
// (every way of settling one happened), none left pending, every
// account's pending totals those of its open holds, and every event once.
func TestLoadHolds(t *testing.T) {
	holds := []string{"--hold-share", "0.8", "--hold-timeout", "1s", "--hold-expiry-period", "100ms",
		"--accounts", "8", "--duration", "10m", "--timeout", "2m", "--progress=false"}
	check := func(t *testing.T, r loadrun.Report, err error) {
		t.Helper()
		if err != nil || r.Violations != 0 {
			t.Fatalf("load: %v; %d violations: %v", err, r.Violations, r.Details)
		}
		h := r.Holds
		if h["posted"] == 0 || h["voided"] == 0 || h["expired"] == 0 || h["raced"] == 0 || h["pending"] != 0 || r.EventsChecked == 0 {
			t.Fatalf("holds %v, %d events checked; report %+v", h, r.EventsChecked, r)
		}
		t.Logf("holds: %v; operations %v", h, r.Operations)
	}
	eachDialect(t, func(t *testing.T, dialect string) {
		p, db := serveDB(t, dialect, nil, "--hold-expiry-period", "100ms")
		targets := p.URL
		if dialect == "postgres" {
			q := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--hold-expiry-period", "100ms")
			targets += "," + q.URL
		}
		journal := filepath.Join(t.TempDir(), "journal.json")
		r, err := loadRun(t, append([]string{"--target", targets, "--operations", "300", "--journal", journal}, holds...)...)
		check(t, r, err)
		// The journal verifies again later, every hold long due: the same
		// findings.
		v, err := loadRun(t, "verify", "--target", targets, "--journal", journal, "--progress=false")
		if err != nil || v.Violations != 0 || !reflect.DeepEqual(v.Holds, r.Holds) {
			t.Fatalf("verify: %v; %d violations %v; holds %v, the run found %v", err, v.Violations, v.Details, v.Holds, r.Holds)
		}
	})
	t.Run("chaos", func(t *testing.T) {
		t.Parallel()
		// Six seconds of load (the last --duration wins), whatever the
		// count: a run of a few hundred operations ends before a kill.
		r, err := loadRun(t, append(append([]string{"--chaos", "--db", dbURL(t, "postgres"), "--serve-bin", binary(t),
			"--kill-every", "2s", "--operations", "1000000", "--concurrency", "8", "--seed", "5"}, holds...), "--duration", "6s")...)
		check(t, r, err)
		if r.Restarts == 0 {
			t.Fatalf("no server killed: %+v", r)
		}
		t.Logf("chaos: %d kills, %d requests, %d retries", r.Restarts, r.Requests, r.Retries)
	})
}
