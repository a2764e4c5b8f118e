// Package testpatroni gives a test a high-availability PostgreSQL of its
// own: one etcd and two PostgreSQL nodes under Patroni with streaming
// replication, started by the project's scripts/patroni (the embedded
// patroni.bash) in a temporary directory and stopped when the test ends.
// Tests reach it through its multi-host URL, which follows the primary
// (target_session_attrs=read-write), and fail its primary over with
// KillPrimary or, from another process, KillPrimaryCommand.
//
// As with package testpg, the script is embedded and written beside the
// cluster, so no source tree is looked for, and test code never installs
// anything: scripts/test does, before go test. There is no skip: a test
// that cannot have the cluster fails, saying what to install.
package testpatroni

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testserver"
)

// Config configures a cluster.
type Config struct {
	// Sync turns Patroni's synchronous_mode on: a commit is acknowledged
	// once the standby has it, and only that standby may be promoted.
	// Default false: asynchronous streaming replication.
	Sync bool
}

// Cluster is a running cluster of one test's own.
type Cluster struct {
	// URL is the multi-host URL of both nodes with
	// target_session_attrs=read-write.
	URL string
	dir string
}

// errNotInstalled is the one instruction a test without the servers gets.
var errNotInstalled = errors.New("no Patroni, etcd or PostgreSQL: install them " +
	"(Debian: apt-get install patroni etcd-server postgresql; scripts/patroni install does)")

// Installed reports whether the script can find Patroni, etcd and
// PostgreSQL's initdb.
func Installed() bool {
	for _, name := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(name); err != nil {
			return false
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(out)), "initdb")); err == nil {
			return true
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	return len(dirs) > 0
}

// script is scripts/patroni's script, embedded for the reasons package
// testpg gives for its own.
//
//go:embed patroni.bash
var script []byte

// Start starts a cluster for tb and returns once a leader runs with a
// standby streaming from it (the synchronous standby with cfg.Sync). The
// cluster is stopped and its directory removed when tb ends, or, should
// the test process die first, by the script's watcher.
func Start(tb testing.TB, cfg Config) *Cluster {
	tb.Helper()
	if !Installed() {
		tb.Fatalf("testpatroni: %v", errNotInstalled)
	}
	parent := testserver.Dir(tb, "idem-testpatroni-")
	if _, err := testserver.WriteScript(parent, "patroni.bash", script); err != nil {
		tb.Fatalf("testpatroni: write the script: %v", err)
	}
	c := &Cluster{dir: filepath.Join(parent, "cluster")}
	args := []string{"start", c.dir, "--watch", strconv.Itoa(os.Getpid())}
	if cfg.Sync {
		args = append(args, "--sync")
	}
	out, err := c.cmd(args...).Output()
	// Registered before the check: a start that failed halfway leaves
	// servers to stop.
	tb.Cleanup(func() { _ = c.cmd("stop", c.dir).Run() })
	if err != nil {
		tb.Fatalf("testpatroni: start: %v %s", err, stderrOf(err))
	}
	c.URL = strings.TrimSpace(string(out))
	return c
}

// cmd runs the script beside the cluster with bash (it has no exec bit).
// IDEM_PATRONI_NO_INSTALL keeps it from installing anything.
func (c *Cluster) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command("bash", append([]string{c.script()}, args...)...)
	cmd.Env = append(os.Environ(), "IDEM_PATRONI_NO_INSTALL=1")
	// From /: a server started as the postgres user inherits the working
	// directory, and the test's (a checkout under a home only root may
	// enter) may be closed to it.
	cmd.Dir = "/"
	return cmd
}

func (c *Cluster) script() string { return filepath.Join(filepath.Dir(c.dir), "patroni.bash") }

func (c *Cluster) run(tb testing.TB, op string) string {
	tb.Helper()
	out, err := c.cmd(op, c.dir).Output()
	if err != nil {
		tb.Fatalf("testpatroni: %s: %v %s%s", op, err, out, stderrOf(err))
	}
	return strings.TrimSpace(string(out))
}

// Primary is the leader's host:port.
func (c *Cluster) Primary(tb testing.TB) string { tb.Helper(); return c.run(tb, "primary") }

// Wait waits until a leader runs with a standby streaming from it.
func (c *Cluster) Wait(tb testing.TB) { tb.Helper(); c.run(tb, "wait") }

// KillPrimary loses the leader's node (SIGKILL of its Patroni, postmaster
// and backends), waits until Patroni promotes the standby, and brings the
// lost node back as the new standby. It returns the script's account.
func (c *Cluster) KillPrimary(tb testing.TB) string { tb.Helper(); return c.run(tb, "kill-primary") }

// KillPrimaryCommand is a shell command line that does what KillPrimary
// does, for another process (idem load --chaos-failover).
func (c *Cluster) KillPrimaryCommand() string {
	return "IDEM_PATRONI_NO_INSTALL=1 bash " + shellQuote(c.script()) + " kill-primary " + shellQuote(c.dir)
}

// Logs is the tail of each server's log, for a failing test's message.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, name := range []string{"etcd.log", "node1/patroni.log", "node2/patroni.log"} {
		data, _ := os.ReadFile(filepath.Join(c.dir, name))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
