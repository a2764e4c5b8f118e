package idemhttp_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakChecked{m})) }

// leakChecked runs the tests, then fails the run when goroutines outlive
// them (a server, a pool or a waiter the middleware forgot).
type leakChecked struct{ m *testing.M }

func (l leakChecked) Run() int {
	code := l.m.Run()
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		return 1
	}
	return 0
}
