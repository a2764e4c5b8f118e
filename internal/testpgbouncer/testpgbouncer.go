// Package testpgbouncer gives tests a real PgBouncer in front of a
// PostgreSQL server: a private pooler started by the project's
// scripts/pgbouncer in a temporary directory and stopped when the test
// ends. There is no skip: a test that needs PgBouncer and cannot have it
// fails, saying what to install.
//
// As with package testpg, the script (pgbouncer.bash, which
// scripts/pgbouncer runs) is embedded and written beside the pooler, so no
// source tree is looked for. Test code never installs anything;
// scripts/test does, before go test.
package testpgbouncer

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testserver"
)

//go:embed pgbouncer.bash
var script []byte

// Options shape a pooler. The zero value is PgBouncer in transaction mode
// with 20 server connections per database and user.
type Options struct {
	// Session runs the pooler in session mode (pool_mode = session).
	Session bool
	// PoolSize is default_pool_size. Default 20.
	PoolSize int
}

// Bouncer is a running PgBouncer of one test's own.
type Bouncer struct {
	// URL connects through the pooler (password included), to the database
	// the server URL named.
	URL string
	dir string
}

// New starts a pooler in front of the server pgURL names (as testpg
// gives it: postgres://USER@HOST:PORT/DB…), stopped when tb ends.
func New(tb testing.TB, pgURL string, opts Options) *Bouncer {
	tb.Helper()
	if !installed() {
		tb.Fatalf("testpgbouncer: no PgBouncer: install it (Debian: apt-get install pgbouncer; scripts/test does)")
	}
	parent := testserver.Dir(tb, "idem-testpgbouncer-")
	if _, err := testserver.WriteScript(parent, "pgbouncer.bash", script); err != nil {
		tb.Fatal(err)
	}
	b := &Bouncer{dir: filepath.Join(parent, "pgbouncer")}
	args := []string{"start", b.dir, pgURL}
	if opts.Session {
		args = append(args, "--session")
	}
	if opts.PoolSize > 0 {
		args = append(args, "--pool-size", strconv.Itoa(opts.PoolSize))
	}
	out, err := b.cmd(args...).Output()
	if err != nil {
		tb.Fatalf("testpgbouncer: start: %v %s", err, stderrOf(err))
	}
	b.URL = strings.TrimSpace(string(out))
	tb.Cleanup(func() { _ = b.cmd("stop", b.dir).Run() })
	return b
}

// installed reports whether the script can find PgBouncer where it looks.
func installed() bool {
	if _, err := exec.LookPath("pgbouncer"); err == nil {
		return true
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// Restart kills the pooler (SIGKILL: every client and server connection
// is cut) and starts it again on the same port.
func (b *Bouncer) Restart(tb testing.TB) {
	tb.Helper()
	if out, err := b.cmd("restart", b.dir).CombinedOutput(); err != nil {
		tb.Fatalf("testpgbouncer: restart: %v %s", err, out)
	}
}

// RestartCommand is a shell command line that does what Restart does, for
// a process that restarts the pooler itself (idem load
// --chaos-db-restart).
func (b *Bouncer) RestartCommand() string {
	return fmt.Sprintf("bash %s restart %s", shellQuote(filepath.Join(filepath.Dir(b.dir), "pgbouncer.bash")), shellQuote(b.dir))
}

// Log is what the pooler logged so far, for a failing test to show.
func (b *Bouncer) Log() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	return string(out)
}

// cmd runs the script beside b's directory with bash (it has no exec
// bit). IDEM_PG_NO_INSTALL keeps it from installing PgBouncer.
func (b *Bouncer) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command("bash", append([]string{filepath.Join(filepath.Dir(b.dir), "pgbouncer.bash")}, args...)...)
	cmd.Env = append(os.Environ(), "IDEM_PG_NO_INSTALL=1")
	// From /: a server started as the postgres user inherits the working
	// directory, and the test's (a checkout under a home only root may
	// enter) may be closed to it.
	cmd.Dir = "/"
	return cmd
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
