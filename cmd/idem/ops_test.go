package main

import (
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testpg"
)

// startRelay runs idem relay with its ops listener on a free loopback port
// and returns the process and the listener's base URL.
func startRelay(t *testing.T, db string) (*proc, string) {
	t.Helper()
	p := launch(t, false, nil, "relay", "--db", db, "--publish", "stdout", "--metrics-addr", "127.0.0.1:0")
	var addr string
	waitFor(t, func() bool {
		if m := relayMetricsRE.FindStringSubmatch(p.Stderr()); m != nil {
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
