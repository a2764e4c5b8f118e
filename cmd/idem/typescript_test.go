package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/testpg"
)

// tsDir is the TypeScript client's package, from this package's directory.
var tsDir = filepath.Join("..", "..", "clients", "typescript")

var (
	tsBuildOnce sync.Once
	tsBuildErr  error
)

// tsBuild installs the TypeScript client's pinned dev dependencies (npm ci,
// only when node_modules is missing) and compiles the package and its tests
// with tsc into build/. Node 20+ and npm are needed: scripts/test installs
// them with apt-get when they are missing.
func tsBuild(t *testing.T) {
	t.Helper()
	tsBuildOnce.Do(func() {
		for _, tool := range []string{"node", "npm"} {
			if _, err := exec.LookPath(tool); err != nil {
				tsBuildErr = fmt.Errorf("%s is not installed: the TypeScript client's tests need Node.js 20+ and npm (apt-get install nodejs npm, as scripts/test does)", tool)
				return
			}
		}
		out, err := exec.Command("node", "-p", "process.versions.node").Output()
		if err != nil {
			tsBuildErr = fmt.Errorf("node -p process.versions.node: %v", err)
			return
		}
		major, _ := strconv.Atoi(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0])
		if major < 20 {
			tsBuildErr = fmt.Errorf("node %s is too old: the TypeScript client needs Node.js 20 or later", strings.TrimSpace(string(out)))
			return
		}
		if _, err := os.Stat(filepath.Join(tsDir, "node_modules", ".bin", "tsc")); err != nil {
			if out, err := tsCommand(nil, "npm", "ci", "--no-audit", "--no-fund").CombinedOutput(); err != nil {
				tsBuildErr = fmt.Errorf("npm ci in %s: %v\n%s", tsDir, err, out)
				return
			}
		}
		if err := os.RemoveAll(filepath.Join(tsDir, "build")); err != nil {
			tsBuildErr = err
			return
		}
		if out, err := tsCommand(nil, filepath.Join("node_modules", ".bin", "tsc"), "-p", "tsconfig.test.json").CombinedOutput(); err != nil {
			tsBuildErr = fmt.Errorf("tsc -p tsconfig.test.json: %v\n%s", err, out)
		}
	})
	if tsBuildErr != nil {
		t.Fatal(tsBuildErr)
	}
}

func tsCommand(env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = tsDir
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// nodeTest runs Node's test runner on the compiled test files and fails t
// with the runner's output when a test fails.
func nodeTest(t *testing.T, env []string, files ...string) {
	t.Helper()
	args := []string{"--test", "--test-reporter=tap"}
	for _, f := range files {
		args = append(args, filepath.Join("build", "test", f))
	}
	var out bytes.Buffer
	cmd := tsCommand(env, "node", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("node --test %s: %v\n%s", strings.Join(files, " "), err, out.String())
	}
	if !strings.Contains(out.String(), "\n# fail 0") {
		t.Fatalf("node --test %s: no failure count in the output\n%s", strings.Join(files, " "), out.String())
	}
	t.Logf("node --test %s:\n%s", strings.Join(files, " "), tsTail(out.String(), 9))
}

func tsTail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// TestTypeScriptClient runs the TypeScript client's tests (clients/typescript,
// docs/clients.md): the shared conformance cases and the checks before
// sending, then, against a real idem serve on each dialect, the client
// killed after the server answered, the server killed mid-burst, 409 in
// flight, 422 and 400, and (PostgreSQL) 503 while the database is stopped.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	tsBuild(t)
	t.Run("conformance", func(t *testing.T) {
		t.Parallel()
		nodeTest(t, nil, "conformance.test.js", "client.test.js")
	})
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			env := []string{"IDEM_BIN=" + binary(t), "IDEM_TEST_DIALECT=" + dialect}
			if dialect == "postgres" {
				pg := testpg.NewCluster(t)
				env = append(env,
					"IDEM_TEST_PG_URL="+drivertest.PostgresURL(t),
					"IDEM_TEST_PG_PAUSE_URL="+pg.URL,
					"IDEM_TEST_PG_PAUSE="+pg.PauseCommand(),
					"IDEM_TEST_PG_RESUME="+pg.ResumeCommand())
			}
			nodeTest(t, env, "server.test.js")
		})
	}
}
