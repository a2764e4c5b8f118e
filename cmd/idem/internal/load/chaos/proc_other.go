//go:build !linux

package chaos

import (
	"os"
	"os/exec"
)

// terminate asks a server to stop.
var terminate = os.Interrupt

// setDeathSignal has no portable equivalent outside Linux: Close ends the
// servers.
func setDeathSignal(cmd *exec.Cmd) {}
