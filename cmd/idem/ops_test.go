package main

import (
	"errors"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testpg"
)

// relayListeningRE finds the ops listener's address in idem relay's log.
var relayListeningRE = regexp.MustCompile(`msg="idem relay listening" addr=(\S+)`)

// startRelay runs idem relay with its ops listener on a free loopback port
// and returns the process and the listener's base URL.
func startRelay(t *testing.T, db string) (*proc, string) {
	t.Helper()
	p := launch(t, false, nil, "relay", "--db", db, "--publish", "stdout", "--metrics-addr", "127.0.0.1:0")
	var addr string
	waitFor(t, func() bool {
		if m := relayListeningRE.FindStringSubmatch(p.Stderr()); m != nil {
			addr = m[1]
			return true
		}
		select {
		case <-p.exited:
			t.Fatalf("idem relay exited: %v\n%s", p.waitErr, p.Stderr())
		default:
		}
		return false
	})
	return p, "http://" + addr
}

// runHealthcheck runs the binary's healthcheck against url and returns its
// exit code and output.
func runHealthcheck(t *testing.T, url string) (int, string) {
	t.Helper()
	out, err := exec.Command(binary(t), "healthcheck", "--url", url).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	default:
		t.Fatal(err)
		return 0, ""
	}
}

// idem relay --metrics-addr answers liveness, readiness and its metrics
// (which it had nowhere to show before), and `idem healthcheck` reads them
// as a container runtime would: exit 0 while the relay is ready, 1 once
// nothing answers.
func TestRelayOpsListener(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, u := startRelay(t, dbURL(t, dialect))
		if r := call(t, "GET", u+"/healthz", "", nil); r.Status != http.StatusOK || r.json(t)["status"] != "ok" {
			t.Fatalf("healthz: %d %s", r.Status, r.Body)
		}
		if r := call(t, "GET", u+"/readyz", "", nil); r.Status != http.StatusOK || r.json(t)["status"] != "ok" {
			t.Fatalf("readyz: %d %s", r.Status, r.Body)
		}
		// The only relay leases every shard once it has heartbeaten.
		waitFor(t, func() bool {
			return strings.Contains(string(call(t, "GET", u+"/metrics", "", nil).Body), "\nidem_outbox_relay_shards 64\n")
		})
		m := string(call(t, "GET", u+"/metrics", "", nil).Body)
		for _, want := range []string{"\nidem_ready 1\n", "\nidem_outbox_backlog 0\n", "\nidem_outbox_published_total 0\n", "\ngo_goroutines "} {
			if !strings.Contains(m, want) {
				t.Errorf("relay metrics lack %q", strings.TrimSpace(want))
			}
		}
		if code, out := runHealthcheck(t, u+"/readyz"); code != 0 || !strings.Contains(out, `"status":"ok"`) {
			t.Fatalf("healthcheck of a ready relay: exit %d: %s", code, out)
		}

		p.signal(syscall.SIGTERM)
		if err := p.wait(30 * time.Second); err != nil {
			t.Fatalf("relay exit after SIGTERM: %v\n%s", err, p.Stderr())
		}
		if code, out := runHealthcheck(t, u+"/healthz"); code != 1 {
			t.Fatalf("healthcheck of a stopped relay: exit %d, want 1: %s", code, out)
		}
	})
}

// With its database down the relay stays alive (it retries) but is not
// ready, and says so to Prometheus (idem_ready 0) and to a health check
// (exit 1); when the database returns, so does readiness.
func TestRelayOpsDatabaseDown(t *testing.T) {
	t.Parallel()
	pg := testpg.NewCluster(t)
	_, u := startRelay(t, pg.URL)
	if code, out := runHealthcheck(t, u+"/readyz"); code != 0 {
		t.Fatalf("healthcheck before the outage: exit %d: %s", code, out)
	}
	pg.Pause(t)
	if r := call(t, "GET", u+"/readyz", "", nil); r.Status != http.StatusServiceUnavailable || r.json(t)["reason"] != "database unreachable" {
		t.Fatalf("readyz with the database down: %d %s", r.Status, r.Body)
	}
	if r := call(t, "GET", u+"/healthz", "", nil); r.Status != http.StatusOK {
		t.Fatalf("healthz is liveness and must not depend on the database: %d", r.Status)
	}
	if m := string(call(t, "GET", u+"/metrics", "", nil).Body); !strings.Contains(m, "\nidem_ready 0\n") {
		t.Fatalf("metrics with the database down lack idem_ready 0")
	}
	if code, out := runHealthcheck(t, u+"/readyz"); code != 1 || !strings.Contains(out, "503") {
		t.Fatalf("healthcheck with the database down: exit %d, want 1: %s", code, out)
	}
	pg.Resume(t)
	waitFor(t, func() bool { return call(t, "GET", u+"/readyz", "", nil).Status == http.StatusOK })
	if m := string(call(t, "GET", u+"/metrics", "", nil).Body); !strings.Contains(m, "\nidem_ready 1\n") {
		t.Fatalf("metrics after the outage lack idem_ready 1")
	}
}
