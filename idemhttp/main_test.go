package idemhttp_test

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }

// leakChecked runs the tests, then fails the run when goroutines outlive
// them (a server, a pool or a waiter the middleware forgot).
