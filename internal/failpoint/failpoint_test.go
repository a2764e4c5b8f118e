package failpoint_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/failpoint"
)

const childEnv = "IDEM_FAILPOINT_TEST_CHILD"

// TestMain lets the test binary play the process under test: with
// childEnv set it hits the failpoint it names and reports if it returns.
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		failpoint.Hit(name)
		os.Stderr.WriteString("passed the failpoint\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(t *testing.T, env ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatal(err)
	return "", 0
}

// An armed failpoint is announced at start, stops the process where it is
// hit, and after its bounded hold exits with ExitCode instead of hanging.
func TestArmedFailpointHoldsThenExits(t *testing.T) {
	t.Parallel()
	out, code := child(t, childEnv+"=relay.before_publish", failpoint.Env+"=relay.before_publish", failpoint.HoldEnv+"=1s")
	if code != failpoint.ExitCode {
		t.Fatalf("exit %d, want %d:\n%s", code, failpoint.ExitCode, out)
	}
	for _, want := range []string{`WARNING: failpoint "relay.before_publish" is armed`, "failpoint: relay.before_publish\n", "held 1s without being killed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "passed the failpoint") {
		t.Fatal("the process went past its failpoint")
	}
}

// A failpoint other than the armed one, or an armed name that is no
// failpoint (a typo), stops nothing; the typo is announced.
func TestOtherOrUnknownFailpointPasses(t *testing.T) {
	t.Parallel()
	out, code := child(t, childEnv+"=keeper.before_commit", failpoint.Env+"=relay.after_publish")
	if code != 0 || !strings.Contains(out, "passed the failpoint") {
		t.Fatalf("another point stopped the process: exit %d\n%s", code, out)
	}
	out, code = child(t, childEnv+"=keeper.before_commit", failpoint.Env+"=keeper.before_comit")
	if code != 0 || !strings.Contains(out, "names no failpoint") {
		t.Fatalf("a misspelt failpoint: exit %d\n%s", code, out)
	}
}

// With ThenEnv=continue a hit failpoint holds, then lets the process go on.
func TestFailpointThenContinue(t *testing.T) {
	t.Parallel()
	out, code := child(t, childEnv+"=janitor.before_delete", failpoint.Env+"=janitor.before_delete",
		failpoint.HoldEnv+"=1s", failpoint.ThenEnv+"=continue")
	if code != 0 || !strings.Contains(out, "goes on after 1s") || !strings.Contains(out, "held 1s: going on") ||
		!strings.Contains(out, "passed the failpoint") {
		t.Fatalf("exit %d, want 0 past the failpoint after its hold:\n%s", code, out)
	}
}
