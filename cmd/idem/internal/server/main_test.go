package server

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(m)) }
