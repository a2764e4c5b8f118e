package outbox_test

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
)

// TestMain fails the run if a goroutine outlived the tests. The tests that
// need a NATS server are in cmd/idem/internal/integration/outbox, in the idem
// binary's module, so that this module does not depend on nats-server.
func TestMain(m *testing.M) {
	code := testpg.Main(m)
	code = leakcheck.After(code)
	os.Exit(code)
}
