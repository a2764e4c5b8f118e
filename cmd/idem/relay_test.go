package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/storage"
)

// relayMetricsRE finds the metrics address in idem relay's start-up log.
var relayMetricsRE = regexp.MustCompile(`msg="idem relay metrics" addr=(\S+)`)

// The standalone relay is observable: --metrics-addr serves /metrics with
// the relay's and the pool's series, /healthz and /readyz; the backlog a
// serve without a relay left behind is published and counted there.
func TestRelayMetricsEndpoint(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		s, db := serveDB(t, dialect, nil, "--relay=false")
		account(t, s.URL, "r1", "EUR")
		account(t, s.URL, "r2", "EUR")

		r, base := startRelay(t, db)
		if h := call(t, "GET", base+"/healthz", "", nil); h.Status != http.StatusOK || h.json(t)["status"] != "ok" {
			t.Fatalf("healthz: %d %s", h.Status, h.Body)
		}
		if h := call(t, "GET", base+"/readyz", "", nil); h.Status != http.StatusOK || h.json(t)["status"] != "ok" {
			t.Fatalf("readyz: %d %s", h.Status, h.Body)
		}
		// The two account.created events go out; the relay leasing shard 0
		// (this one, alone) reports the drained backlog.
		var body string
		waitFor(t, func() bool {
			body = string(call(t, "GET", base+"/metrics", "", nil).Body)
			return strings.Contains(body, "idem_outbox_published_total 2") && strings.Contains(body, "idem_outbox_backlog 0")
		})
		for _, want := range []string{
			"idem_outbox_relay_shards 64",
			"idem_outbox_dead_letters 0",
			"idem_outbox_oldest_unsent_age_seconds 0",
			`idem_db_pool_connections{state="in_use"}`,
			`idem_db_pool_connections{state="idle"}`,
			"idem_db_pool_max_connections",
			"idem_db_pool_waits_total",
			"idem_db_pool_wait_seconds_total",
			"go_goroutines",
			"idem_ready 1",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("relay metrics lack %q", want)
			}
		}
		if !regexp.MustCompile(`(?m)^idem_db_pool_max_connections [1-9]`).MatchString(body) {
			t.Errorf("pool size not reported:\n%s", body)
		}
		// idem healthcheck reads them as a container runtime would: exit 0
		// while the relay is ready, 1 once nothing answers.
		if code, out := runHealthcheck(t, base+"/readyz"); code != 0 || !strings.Contains(out, `"status":"ok"`) {
			t.Fatalf("healthcheck of a ready relay: exit %d: %s", code, out)
		}
		r.signal(syscall.SIGTERM)
		if err := r.wait(30 * time.Second); err != nil {
			t.Fatalf("relay exit after SIGTERM: %v\n%s", err, r.Stderr())
		}
		if code, out := runHealthcheck(t, base+"/healthz"); code != 1 {
			t.Fatalf("healthcheck of a stopped relay: exit %d, want 1: %s", code, out)
		}
	})
}

// A metrics address that cannot be bound stops the relay at start.
func TestRelayMetricsAddrTaken(t *testing.T) {
	s, db := serveDB(t, "sqlite", nil, "--relay=false")
	taken := strings.TrimPrefix(s.URL, "http://")
	r := launch(t, false, nil, "relay", "--db", db, "--publish", "stdout", "--metrics-addr", taken)
	if err := r.wait(30 * time.Second); err == nil {
		t.Fatal("relay started on a taken metrics address")
	}
	if !strings.Contains(r.Stderr(), "metrics-addr") {
		t.Fatalf("error does not name the setting:\n%s", r.Stderr())
	}
}

// idem migrate --dry-run and --print show what is pending and change
// nothing; serve --migrate=false refuses a schema with migrations pending
// and starts on a migrated one.
func TestMigrateReviewAndMigrateOff(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		db := dbURL(t, dialect)
		dry := exec.Command(binary(t), "migrate", "--db", db, "--dry-run")
		out, err := dry.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "version 0 of") || !strings.Contains(string(out), "001_keeper") {
			t.Fatalf("dry run: %v\n%s", err, out)
		}
		print := exec.Command(binary(t), "migrate", "--db", db, "--print")
		out, err = print.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "-- migration 001_keeper") || !strings.Contains(string(out), "CREATE TABLE") {
			t.Fatalf("print: %v\n%s", err, out)
		}
		off := launch(t, false, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--migrate=false")
		if err := off.wait(60 * time.Second); err == nil || !strings.Contains(off.Stderr(), "run idem migrate") {
			t.Fatalf("serve --migrate=false on an empty database: %v\n%s", err, off.Stderr())
		}
		out, err = exec.Command(binary(t), "migrate", "--db", db).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "migrated") {
			t.Fatalf("migrate: %v\n%s", err, out)
		}
		// Before it applies anything, it says what it is about to apply.
		if !regexp.MustCompile(`applying \d+ pending migration\(s\) to \w+ \(001_keeper … \d{3}_\w+\)`).Match(out) {
			t.Fatalf("migrate does not name what it applies:\n%s", out)
		}
		out, err = exec.Command(binary(t), "migrate", "--db", db, "--dry-run").CombinedOutput()
		if err != nil || !strings.Contains(string(out), ": 0 pending") {
			t.Fatalf("dry run after migrate: %v\n%s", err, out)
		}
		s := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--migrate=false")
		if r := call(t, "GET", s.URL+"/readyz", "", nil); r.Status != http.StatusOK {
			t.Fatalf("readyz: %d %s", r.Status, r.Body)
		}
	})
}

// The relay commits its marks of what it published lazily (docs/outbox.md,
// "Durability of the relay's own writes"). On SQLite that is a commit under
// synchronous=NORMAL, which has written the WAL when it returns: a process
// killed after its relay marked rows keeps the marks, so none of the rows
// is published again by the next.
func TestLazyMarksSurviveSIGKILL(t *testing.T) {
	p, db := serveDB(t, "sqlite", nil)
	account(t, p.URL, "lm1", "EUR")
	account(t, p.URL, "lm2", "EUR")
	const transfers = 20
	for i := range transfers {
		mustStatus(t, call(t, "POST", p.URL+"/v1/transfers", fmt.Sprintf("lm-%d", i),
			map[string]any{"debit_account_id": "lm1", "credit_account_id": "lm2", "amount": 1, "currency": "EUR"}), http.StatusCreated)
	}
	const events = transfers + 2 // and the two account.created
	waitFor(t, func() bool {
		var page struct {
			Data []struct {
				PublishedAt *string `json:"published_at"`
			} `json:"data"`
		}
		if err := json.Unmarshal(call(t, "GET", p.URL+"/v1/events?limit=100", "", nil).Body, &page); err != nil {
			t.Fatal(err)
		}
		published := 0
		for _, e := range page.Data {
			if e.PublishedAt != nil {
				published++
			}
		}
		return len(page.Data) == events && published == events
	})
	p.signal(syscall.SIGKILL)
	_ = p.wait(30 * time.Second)

	d, err := storage.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var rows, unsent int
	if err := d.Reader().QueryRow(context.Background(),
		`SELECT count(*), count(*) - count(sent_at) FROM idem_outbox`).Scan(&rows, &unsent); err != nil {
		t.Fatal(err)
	}
	if rows != events || unsent != 0 {
		t.Fatalf("after SIGKILL: %d outbox rows, %d of them unsent; want %d, none unsent", rows, unsent, events)
	}
}
