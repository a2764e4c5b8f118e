package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cleanEnv is this process's environment without IDEM_ settings, so that
// a command runs on its defaults.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// inEmptyDir runs idem args in dir and returns its combined output and
// exit error.
func inEmptyDir(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// entries lists what dir holds, recursively.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err == nil && p != dir {
			found = append(found, strings.TrimPrefix(p, dir+string(filepath.Separator)))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// idem migrate --dry-run and --print change nothing, not even in an empty
// directory: no ./idem-data, no database file where --db names a missing
// one. They still list every migration as pending.
func TestMigrateReviewCreatesNothing(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate", "--dry-run"},
		{"migrate", "--print"},
		{"migrate", "--dry-run", "--db", "sqlite:data/review.db"},
	} {
		dir := t.TempDir()
		out, err := inEmptyDir(t, dir, args...)
		if err != nil {
			t.Fatalf("idem %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		want := "001_keeper"
		if args[1] == "--dry-run" {
			want = "no database there yet"
			if !strings.Contains(out, "version 0 of") || !strings.Contains(out, "001_keeper") {
				t.Errorf("idem %s lists no pending migrations:\n%s", strings.Join(args, " "), out)
			}
		}
		if !strings.Contains(out, want) {
			t.Errorf("idem %s: output lacks %q:\n%s", strings.Join(args, " "), want, out)
		}
		if left := entries(t, dir); len(left) > 0 {
			t.Errorf("idem %s left %v in an empty directory", strings.Join(args, " "), left)
		}
	}
}

// idem serve on a taken port fails before it creates anything: no
// ./idem-data, no database, no NATS store; the error names the setting.
func TestServePortTakenLeavesNothing(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, args := range [][]string{
		{"serve", "--addr", ln.Addr().String()},
		{"serve", "--addr", "127.0.0.1:0", "--metrics-addr", ln.Addr().String()},
	} {
		dir := t.TempDir()
		out, err := inEmptyDir(t, dir, args...)
		if err == nil {
			t.Fatalf("idem %s started on a taken port:\n%s", strings.Join(args, " "), out)
		}
		if setting := strings.TrimPrefix(args[len(args)-2], "--"); !strings.Contains(out, setting+": listen tcp") || !strings.Contains(out, "address already in use") {
			t.Errorf("idem %s: the error does not name %s and the cause:\n%s", strings.Join(args, " "), setting, out)
		}
		if left := entries(t, dir); len(left) > 0 {
			t.Errorf("idem %s left %v behind", strings.Join(args, " "), left)
		}
	}
}

// serveMetricsRE finds the metrics listener in serve's start-up log.
var serveMetricsRE = regexp.MustCompile(`msg="idem metrics" addr=(\S+)`)

// With --metrics-addr (or IDEM_METRICS_ADDR) serve answers /metrics on
// that listener only, beside /healthz and /readyz; the API's port answers
// /metrics 404. Without it, /metrics stays on --addr.
func TestServeMetricsAddr(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		env   []string
		extra []string
	}{
		{"flag", nil, []string{"--metrics-addr", "127.0.0.1:0"}},
		{"env", []string{"IDEM_METRICS_ADDR=127.0.0.1:0"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, _ := serveDB(t, "sqlite", c.env, c.extra...)
			var ops string
			waitFor(t, func() bool {
				if m := serveMetricsRE.FindStringSubmatch(p.Stderr()); m != nil {
					ops = "http://" + m[1]
				}
				return ops != ""
			})
			account(t, p.URL, "metered", "EUR")
			if r := call(t, "GET", p.URL+"/metrics", "", nil); r.Status != 404 {
				t.Errorf("/metrics on the API's port: %d, want 404 with --metrics-addr", r.Status)
			}
			m := call(t, "GET", ops+"/metrics", "", nil)
			if m.Status != 200 || !strings.Contains(string(m.Body), `idem_http_request_duration_seconds_count{code="201",route="POST /v1/accounts"} 1`) ||
				!strings.Contains(string(m.Body), "\nidem_ready 1\n") {
				t.Errorf("/metrics on the metrics address: %d, lacking the account's request or idem_ready 1:\n%.2000s", m.Status, m.Body)
			}
			for _, path := range []string{"/healthz", "/readyz"} {
				if r := call(t, "GET", ops+path, "", nil); r.Status != 200 {
					t.Errorf("%s on the metrics address: %d %s", path, r.Status, r.Body)
				}
			}
		})
	}
	p, _ := serveDB(t, "sqlite", nil)
	if r := call(t, "GET", p.URL+"/metrics", "", nil); r.Status != 200 {
		t.Errorf("/metrics on --addr without --metrics-addr: %d", r.Status)
	}
}
