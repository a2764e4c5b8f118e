package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/load"
)

// loadRun runs `idem load args... --json` in this process and returns the
// report it printed and the command's error.
func loadRun(t *testing.T, args ...string) (load.Report, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), append(append([]string{"load"}, args...), "--json"), &stdout, &stderr)
	var r load.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
		t.Fatalf("load %v: %v; stdout %q\nstderr:\n%s", args, jerr, stdout.String(), stderr.String())
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

// idem load with nothing but --target against a real idem serve, on both
// databases: zero violations, and the service's own counters agree that
// each operation ran once and every duplicate was a replay.
func TestLoad(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		// The relay publishes to a real NATS server, so the verifier checks
		// the events API and the stream: one message per event.
		natsURL, _ := startNATS(t)
		p, _ := serveDB(t, dialect, nil, "--publish", natsURL)
		journal := filepath.Join(t.TempDir(), "journal.json")
		r, err := loadRun(t, "--target", p.URL, "--journal", journal, "--nats", natsURL)
		if err != nil || r.Violations != 0 {
			t.Fatalf("load: %v; %d violations: %v", err, r.Violations, r.Details)
		}
		ops := 0
		for _, n := range r.Operations {
			ops += n
		}
		if ops != 1016 || r.Unresolved != 0 || r.Duplicates == 0 || r.Replays < r.Duplicates || r.Probes == 0 {
			t.Fatalf("report: %+v", r)
		}
		// The service ran each operation exactly once (no retries happened
		// against a healthy server, so nothing was rolled back and redone)…
		if first := metric(t, p.URL, `idem_http_idempotency_outcomes_total{outcome="first"}`); r.Retries == 0 && first != int64(ops) {
			t.Errorf("service ran %d handlers for %d operations", first, ops)
		}
		// …and answered every other copy, and every probe, with a replay.
		if replayed := metric(t, p.URL, `idem_http_idempotency_outcomes_total{outcome="replayed"}`); replayed != r.Replays+int64(r.Probes) {
			t.Errorf("service replayed %d; the run saw %d replays and sent %d probes", replayed, r.Replays, r.Probes)
		}

		// The journal verifies again later.
		v, err := loadRun(t, "verify", "--target", p.URL, "--journal", journal)
		if err != nil || v.Violations != 0 || v.Applied != r.Applied {
			t.Fatalf("verify: %v %+v", err, v)
		}

		// A journal that claims an acknowledgement the service never gave
		// fails verification with a non-zero exit.
		j, err := load.ReadJournal(journal)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range j.Ops {
			if o.Kind == load.KindTransfer && o.Applied() {
				o.Answer = strings.Replace(o.Answer, `"amount":`, `"amount":7`, 1)
				break
			}
		}
		bad := filepath.Join(t.TempDir(), "bad.json")
		if err := j.WriteFile(bad); err != nil {
			t.Fatal(err)
		}
		v, err = loadRun(t, "verify", "--target", p.URL, "--journal", bad, "--progress=false")
		if !errors.Is(err, load.ErrViolations) || v.Violations == 0 {
			t.Fatalf("tampered journal: %v, %d violations", err, v.Violations)
		}
	})
}

// idem load --chaos on Postgres: two servers, one SIGKILLed and restarted
// about every 2 seconds while load runs. Nothing acknowledged is lost or
// doubled.
func TestLoadChaos(t *testing.T) {
	t.Parallel()
	db := dbURL(t, "postgres")
	r, err := loadRun(t, "--chaos", "--db", db, "--serve-bin", binary(t), "--kill-every", "2s",
		"--duration", "20s", "--operations", "1000000", "--concurrency", "8", "--seed", "7")
	if err != nil || r.Violations != 0 {
		t.Fatalf("chaos: %v; %d violations: %v", err, r.Violations, r.Details)
	}
	if r.Restarts < 3 || r.Applied == 0 || r.Duplicates == 0 {
		t.Fatalf("chaos report: %+v", r)
	}
	t.Logf("chaos: %d kills, %d operations applied, %d requests, %d retries, %d unresolved",
		r.Restarts, r.Applied, r.Requests, r.Retries, r.Unresolved)
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
	} {
		out.Reset()
		if err := run(t.Context(), c.args, &out, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	out.Reset()
	if err := run(t.Context(), []string{"load", "-h"}, &out, &out); !strings.Contains(out.String(), "--kill-every") {
		t.Errorf("help: %v\n%s", err, out.String())
	}
}
