package seal_test

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }
