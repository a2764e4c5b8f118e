// Package testpg gives tests a real PostgreSQL: the server named by
// IDEM_TEST_DATABASE_URL, or a throwaway cluster started by the project's
// scripts/pg in a temporary directory and stopped by Main. Each test gets a
// schema of its own, dropped when it ends. There is no skip: a test that
// needs Postgres and cannot have it fails, saying what to install.
//
// It works from a read-only copy of the module (a user's module cache):
// scripts/pg is run with bash, so it needs no exec bit, and everything it
// writes goes under the temporary directory. Test code never installs
// anything; scripts/test does, before go test.
package testpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable that points tests at an existing server.
const EnvURL = "IDEM_TEST_DATABASE_URL"

var (
	once     sync.Once
	url      string
	startErr error
	dir      string
)

// URL returns the server's URL, starting a throwaway cluster on first use
// when EnvURL is unset. It fails tb when no server can be had.
func URL(tb testing.TB) string {
	tb.Helper()
	once.Do(func() {
		if url = os.Getenv(EnvURL); url != "" {
			return
		}
		url, startErr = start()
	})
	if startErr != nil {
		tb.Fatalf("testpg: %v", startErr)
	}
	return url
}

// Main runs the tests of a package and stops the cluster URL started, if
// any. Call it from TestMain.
func Main(m interface{ Run() int }) int {
	code := m.Run()
	if dir != "" {
		_ = pg("stop", dir).Run()
	}
	return code
}

// errNotInstalled is the one instruction a test without PostgreSQL gets.
var errNotInstalled = errors.New("no PostgreSQL: set " + EnvURL + " to a PostgreSQL URL, " +
	"or install PostgreSQL (Debian: apt-get install postgresql)")

func start() (string, error) {
	if !installed() {
		return "", errNotInstalled
	}
	parent, err := os.MkdirTemp("", "idem-testpg-")
	if err != nil {
		return "", err
	}
	// The cluster runs as the postgres user when we are root.
	if err := os.Chmod(parent, 0o755); err != nil {
		return "", err
	}
	dir = filepath.Join(parent, "pg")
	out, err := pg("start", dir).Output()
	if err != nil {
		return "", fmt.Errorf("start PostgreSQL with %s: %w %s", script(), err, stderrOf(err))
	}
	return strings.TrimSpace(string(out)), nil
}

// installed reports whether scripts/pg can find PostgreSQL's initdb, where
// it looks: pg_config's bindir, Debian's /usr/lib/postgresql/*/bin, PATH.
func installed() bool {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if isExecutable(filepath.Join(strings.TrimSpace(string(out)), "initdb")) {
			return true
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) {
			return true
		}
	}
	_, err := exec.LookPath("initdb")
	return err == nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// pg runs scripts/pg with bash: in a module cache the script is read-only
// and has no exec bit. IDEM_PG_NO_INSTALL keeps the script from installing
// PostgreSQL, which is scripts/test's job, never a test's.
func pg(args ...string) *exec.Cmd {
	cmd := exec.Command("bash", append([]string{script()}, args...)...)
	cmd.Env = append(os.Environ(), "IDEM_PG_NO_INSTALL=1")
	return cmd
}

// script is the path of scripts/pg in this module: in the source tree, or
// in the module cache when the module is a dependency.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "pg")
}

// Schema creates an empty schema for tb, dropped at its end, and returns
// its name. Connect with search_path set to it.
func Schema(tb testing.TB) string {
	tb.Helper()
	u := URL(tb)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		tb.Fatalf("testpg: connect: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("testpg: create schema: %v", err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), u)
		if err != nil {
			tb.Errorf("testpg: connect for cleanup: %v", err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			tb.Errorf("testpg: drop schema: %v", err)
		}
	})
	return name
}

// Cluster is a PostgreSQL server of one test's own, for tests that stop
// and restart the database under a running service.
type Cluster struct {
	URL string
	dir string
}

// NewCluster starts a cluster for tb, removed when tb ends. It commits
// synchronously (fsync stays off): a crash of the server loses no
// acknowledged commit, so tests that crash it (Restart) find nothing lost
// that the service was told had committed.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	if !installed() {
		tb.Fatalf("testpg: %v", errNotInstalled)
	}
	// Not tb.TempDir: its parents are private to us, and the cluster runs
	// as the postgres user when we are root.
	parent, err := os.MkdirTemp("", "idem-testpg-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{dir: filepath.Join(parent, "pg")}
	out, err := pg("start", c.dir, "--crash-safe").Output()
	if err != nil {
		tb.Fatalf("testpg: start cluster: %v %s", err, stderrOf(err))
	}
	c.URL = strings.TrimSpace(string(out))
	tb.Cleanup(func() { _ = pg("stop", c.dir).Run() })
	return c
}

// Pause stops the server (fast shutdown: sessions are cut), keeping data.
func (c *Cluster) Pause(tb testing.TB) { c.run(tb, "pause") }

// Resume starts it again on the same port.
func (c *Cluster) Resume(tb testing.TB) { c.run(tb, "resume") }

// Restart crashes the server (immediate-mode stop: no shutdown
// checkpoint, crash recovery at start) and starts it again on the same port.
func (c *Cluster) Restart(tb testing.TB) { c.run(tb, "restart") }

// RestartCommand is a shell command line that does what Restart does, for
// a process that restarts the cluster itself (idem load
// --chaos-db-restart).
func (c *Cluster) RestartCommand() string {
	return "bash " + shellQuote(script()) + " restart " + shellQuote(c.dir)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (c *Cluster) run(tb testing.TB, cmd string) {
	tb.Helper()
	if _, err := pg(cmd, c.dir).Output(); err != nil {
		tb.Fatalf("testpg: %s: %v %s", cmd, err, stderrOf(err))
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
