package idemclient_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandardLibraryOnly: the package imports nothing outside the
// standard library, so any Go program can take it without a dependency.
func TestStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/idemhq/idem/idemclient" {
			t.Errorf("idemclient depends on %s", p)
		}
	}
}
