// Package failpoint lets crash tests stop a real process at a named point.
//
// When IDEM_FAILPOINT names a point, Hit at that point writes
// "failpoint: NAME" to stderr and blocks forever, so the test that started
// the process can SIGKILL it exactly there. Anywhere else Hit costs one
// string comparison.
package failpoint

import (
	"fmt"
	"os"
)

// Env is the variable that names the armed failpoint.
const Env = "IDEM_FAILPOINT"

var armed = os.Getenv(Env)

// Hit stops the process at name when name is armed.
func Hit(name string) {
	if armed == "" || armed != name {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint: %s\n", name)
	select {}
}
