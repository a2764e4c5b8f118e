// Package testpg gives tests a real PostgreSQL: the server named by
// IDEM_TEST_DATABASE_URL, or a throwaway cluster started by the project's
// scripts/pg in a temporary directory and stopped by Main. Each test gets a
// schema of its own, dropped when it ends. There is no skip: a test that
// needs Postgres and cannot have it fails, saying what to install.
//
// It works wherever the user's tests are built: the script (pg.bash, which
// scripts/pg runs) is embedded, written into the cluster's temporary
// directory and run with bash from there, so no source tree is looked for —
// not in a read-only module cache, a vendor directory, or a binary built
// with -trimpath, whose source paths are no paths on disk. Everything it
// writes goes under that directory. Test code never installs anything;
// scripts/test does, before go test.
package testpg

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testserver"
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
		_ = pg(filepath.Dir(dir), "stop", dir).Run()
		_ = os.RemoveAll(filepath.Dir(dir))
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
	if err := writeScript(parent); err != nil {
		return "", err
	}
	dir = filepath.Join(parent, "pg")
	out, err := pg(parent, "start", dir).Output()
	if err != nil {
		return "", fmt.Errorf("start PostgreSQL with %s: %w %s", script(parent), err, stderrOf(err))
	}
	return strings.TrimSpace(string(out)), nil
}

// installed reports whether pg.bash can find PostgreSQL's initdb, where
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

// pgScript is scripts/pg's script. It is embedded rather than looked for
// beside this file: runtime.Caller's path is no path on disk under
// -trimpath, and a vendor directory holds no scripts/.
//
//go:embed pg.bash
var pgScript []byte

// writeScript writes the script into parent, the temporary directory that
// holds a cluster, so that it lives as long as the cluster does (for
// Cluster.RestartCommand's other processes too).
func writeScript(parent string) error {
	if _, err := testserver.WriteScript(parent, "pg.bash", pgScript); err != nil {
		return fmt.Errorf("write the PostgreSQL script: %w", err)
	}
	return nil
}

// script is the script's path in parent.
func script(parent string) string { return filepath.Join(parent, "pg.bash") }

// pg runs the script in parent with bash (it has no exec bit).
// IDEM_PG_NO_INSTALL keeps it from installing PostgreSQL, which is
// scripts/test's job, never a test's.
func pg(parent string, args ...string) *exec.Cmd {
	cmd := exec.Command("bash", append([]string{script(parent)}, args...)...)
	cmd.Env = append(os.Environ(), "IDEM_PG_NO_INSTALL=1")
	// From /: a server started as the postgres user inherits the working
	// directory, and the test's (a checkout under a home only root may
	// enter) may be closed to it.
	cmd.Dir = "/"
	return cmd
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
	parent := testserver.Dir(tb, "idem-testpg-")
	if err := writeScript(parent); err != nil {
		tb.Fatalf("testpg: %v", err)
	}
	c := &Cluster{dir: filepath.Join(parent, "pg")}
	out, err := c.pg("start", c.dir, "--crash-safe").Output()
	if err != nil {
		tb.Fatalf("testpg: start cluster: %v %s", err, stderrOf(err))
	}
	c.URL = strings.TrimSpace(string(out))
	tb.Cleanup(func() { _ = c.pg("stop", c.dir).Run() })
	return c
}

// pg runs the script that started c, beside its directory.
func (c *Cluster) pg(args ...string) *exec.Cmd { return pg(filepath.Dir(c.dir), args...) }

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
func (c *Cluster) RestartCommand() string { return c.command("restart") }

// PauseCommand and ResumeCommand are shell command lines that do what
// Pause and Resume do, for a process of another language that stops and
// starts the cluster itself (the TypeScript client's tests).
func (c *Cluster) PauseCommand() string { return c.command("pause") }

// ResumeCommand: see PauseCommand.
func (c *Cluster) ResumeCommand() string { return c.command("resume") }

func (c *Cluster) command(op string) string {
	return "bash " + shellQuote(script(filepath.Dir(c.dir))) + " " + op + " " + shellQuote(c.dir)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (c *Cluster) run(tb testing.TB, cmd string) {
	tb.Helper()
	if _, err := c.pg(cmd, c.dir).Output(); err != nil {
		tb.Fatalf("testpg: %s: %v %s", cmd, err, stderrOf(err))
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// Exec runs each statement on c as its superuser, one at a time outside a
// transaction (ALTER SYSTEM, then SELECT pg_reload_conf(), for one).
func (c *Cluster) Exec(tb testing.TB, stmts ...string) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		tb.Fatalf("testpg: connect: %v", err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			tb.Fatalf("testpg: %s: %v", s, err)
		}
	}
}

// RequireStandby makes every commit on c wait for a synchronous standby
// that c does not have (synchronous_standby_names = '*'), as a promoted
// node still naming its lost standby does; with false it waits no more.
func (c *Cluster) RequireStandby(tb testing.TB, on bool) {
	tb.Helper()
	names := "''"
	if on {
		names = "'*'"
	}
	// The probe's table is made while commits do not wait (RequireStandby
	// turns the wait on before it turns it off).
	c.Exec(tb, "CREATE TABLE IF NOT EXISTS testpg_probe (i int)",
		"ALTER SYSTEM SET synchronous_standby_names = "+names, "SELECT pg_reload_conf()")
	// The reload reaches the server's processes in their own time: wait
	// until a commit that wrote a row waits, or does not, as asked.
	deadline := time.Now().Add(30 * time.Second)
	for c.commitWaits(tb) != on {
		if time.Now().After(deadline) {
			tb.Fatalf("testpg: synchronous_standby_names = %s not in effect after 30s", names)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// commitWaits reports whether a commit on c waits longer than a moment.
func (c *Cluster) commitWaits(tb testing.TB) bool {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), c.URL)
	if err != nil {
		tb.Fatalf("testpg: connect: %v", err)
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = conn.Exec(ctx, "INSERT INTO testpg_probe VALUES (1)")
	return err != nil
}
