package idemtest_test

import (
	"testing"

	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/failpoint"
)

// idemtest names the failpoint variable itself rather than importing the
// library's internal package: the two must stay the same name, or
// KillRelay would arm nothing.
func TestEnvFailpointIsTheLibrarys(t *testing.T) {
	t.Parallel()
	if idemtest.EnvFailpoint != failpoint.Env {
		t.Fatalf("idemtest.EnvFailpoint = %q, the library reads %q", idemtest.EnvFailpoint, failpoint.Env)
	}
}
