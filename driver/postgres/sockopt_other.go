//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// userTimeout is Linux's TCP_USER_TIMEOUT; elsewhere the keepalives and
// the contexts' deadlines bound a connection's waits.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
