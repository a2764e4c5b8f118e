// Package pgtest gives tests a real PostgreSQL: the server named by
// IDEM_TEST_DATABASE_URL, or a throwaway cluster started in a temporary
// directory on first use and stopped by Main. Each test gets a schema of
// its own, dropped when it ends. There is no skip: a test that needs
// PostgreSQL and cannot have it fails, saying what to install.
//
// It is the exported face of the server the library's own tests use, so
// that the test kit (module idemtest) starts PostgreSQL through a
// versioned API. Users' tests call idemtest.Postgres, which adds idem's
// migrations; this package is for a kit that needs the bare server.
//
// Compatibility: pgtest is part of the library's module and follows its
// semantic versioning: within a major version its functions keep their
// signatures and meaning.
package pgtest

import (
	"testing"

	"github.com/idemhq/idem/internal/testpg"
)

// EnvURL names the variable that points tests at an existing server.
const EnvURL = testpg.EnvURL

// URL returns the server's URL, starting a throwaway cluster on first use
// when EnvURL is unset. It fails tb when no server can be had.
func URL(tb testing.TB) string {
	tb.Helper()
	return testpg.URL(tb)
}

// Schema creates an empty schema for tb on the server URL returns, dropped
// at tb's end, and returns its name. Connect with search_path set to it.
func Schema(tb testing.TB) string {
	tb.Helper()
	return testpg.Schema(tb)
}

// Main runs a package's tests and then stops the cluster URL started, if
// any. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
func Main(m interface{ Run() int }) int { return testpg.Main(m) }
