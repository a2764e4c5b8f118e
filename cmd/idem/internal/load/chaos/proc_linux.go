package chaos

import (
	"os/exec"
	"syscall"
)

// terminate asks a server to drain and stop.
var terminate = syscall.SIGTERM

// setDeathSignal makes the kernel SIGKILL the server if this process dies
// first, so a crashed load run leaves no servers behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
