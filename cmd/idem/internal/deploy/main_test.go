package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
)

// TestMain runs the tests on a throwaway Postgres, then fails the run if a
// goroutine outlived them (a server, relay or broker left running).
func TestMain(m *testing.M) {
	// What the tests check is in deploy/ at the repository's root.
	if err := os.Chdir(filepath.Join("..", "..", "..", "..", "deploy")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testpg.Main(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	code = leakcheck.After(code)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	binDir    string
	buildErr  error
)

// idemBinary builds the idem binary once per test run, as cmd/idem's tests
// do (with the race detector when the tests have it, whose compiled
// packages the build then reuses).
func idemBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "idem-bin-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "idem")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "../cmd/idem")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}
