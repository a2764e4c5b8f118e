// Package failpoint lets crash tests stop a real process at a named point.
//
// When IDEM_FAILPOINT names a point, Hit at that point writes
// "failpoint: NAME" to stderr and holds the goroutine there, so the test
// that started the process can SIGKILL it exactly there. The hold is
// bounded (IDEM_FAILPOINT_HOLD, default 5m, 1s..1h): a process nobody kills
// exits with status 3 instead of hanging, which for the work at that point
// is the same as a crash. With IDEM_FAILPOINT_THEN=continue the goroutine
// goes on after the hold instead, for tests that act on the process while
// it is held there (a SIGTERM during a janitor's DELETE) and then watch it
// finish. An armed failpoint is announced on stderr when
// the process starts, so it cannot be set by mistake unnoticed. Anywhere
// else Hit costs one string comparison.
package failpoint

import (
	"fmt"
	"os"
	"slices"
	"time"
)

// Env is the variable that names the armed failpoint; HoldEnv bounds how
// long a hit failpoint holds before the process exits.
const (
	Env     = "IDEM_FAILPOINT"
	HoldEnv = "IDEM_FAILPOINT_HOLD"
	ThenEnv = "IDEM_FAILPOINT_THEN" // "exit" (the default) or "continue"
)

// ExitCode is the status of a process whose failpoint held its full bound.
const ExitCode = 3

// Names are the failpoints there are.
var Names = []string{"keeper.before_commit", "relay.before_publish", "relay.after_publish", "janitor.before_delete", "ledger.before_expiry_commit"}

const (
	defaultHold = 5 * time.Minute
	minHold     = time.Second
	maxHold     = time.Hour
)

var (
	armed, hold = arm(os.Getenv(Env), os.Getenv(HoldEnv))
	goOn        = armed != "" && os.Getenv(ThenEnv) == "continue"
)

// arm reads the variables and announces an armed failpoint on stderr.
func arm(name, holdText string) (string, time.Duration) {
	if name == "" {
		return "", 0
	}
	d := defaultHold
	if holdText != "" {
		v, err := time.ParseDuration(holdText)
		if err != nil || v < minHold || v > maxHold {
			fmt.Fprintf(os.Stderr, "idem: WARNING: %s=%q is not a duration in %s..%s; holding %s\n", HoldEnv, holdText, minHold, maxHold, defaultHold)
		} else {
			d = v
		}
	}
	if !slices.Contains(Names, name) {
		fmt.Fprintf(os.Stderr, "idem: WARNING: %s=%q names no failpoint (there are %v); nothing will stop\n", Env, name, Names)
		return "", 0
	}
	then := "exits"
	if os.Getenv(ThenEnv) == "continue" {
		then = "goes on"
	}
	fmt.Fprintf(os.Stderr, "idem: WARNING: failpoint %q is armed (%s): this process stops there and %s after %s. For crash tests only: unset it in production.\n", name, Env, then, d)
	return name, d
}

// Armed is the armed failpoint's name, or "".
func Armed() string { return armed }

// Hit stops the process at name when name is armed: it holds for the
// bound, then exits with ExitCode, or returns under ThenEnv=continue.
func Hit(name string) {
	if armed == "" || armed != name {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint: %s\n", name)
	time.Sleep(hold)
	if goOn {
		fmt.Fprintf(os.Stderr, "failpoint: %s held %s: going on\n", name, hold)
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint: %s held %s without being killed: exiting\n", name, hold)
	os.Exit(ExitCode)
}
