package inbox_test

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/leakcheck"
)

// TestMain fails the run if a goroutine outlived the tests. The tests that
// need a NATS server are in cmd/idem/internal/integration/inbox, in the idem
// binary's module, so that this module does not depend on nats-server.
func TestMain(m *testing.M) {
	code := m.Run()
	code = leakcheck.After(code)
	os.Exit(code)
}
