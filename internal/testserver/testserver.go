// Package testserver holds the bash helpers the test-server scripts share
// (free_port, as_owner, pg_bindir, install_packages in testserver.bash) and writes
// them beside a script: each test-server package (testpg, testpgbouncer,
// testrabbit, testpatroni) embeds its script and runs it from a temporary
// directory, so that no source tree is needed, and the script sources
// testserver.bash from there.
package testserver

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FileName is the library's name beside a script.
const FileName = "testserver.bash"

//go:embed testserver.bash
var lib []byte

// WriteScript writes script as dir/name with the library beside it, and
// returns the script's path.
func WriteScript(dir, name string, script []byte) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, FileName), lib, 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", FileName, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, script, 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	return path, nil
}

// Dir makes a directory for a test server's script and data, removed when
// tb ends. Not tb.TempDir: its parents are private to us, and the servers
// run as the postgres user when we are root, so the directory is readable
// by all. prefix names it (idem-testpg-, …).
func Dir(tb testing.TB, prefix string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}
