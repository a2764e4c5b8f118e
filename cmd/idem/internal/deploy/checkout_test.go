package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// installLine is the README's install of the binary from a checkout.
var installLine = regexp.MustCompile("`(go install \\./cmd/idem)`")

// A fresh clone builds and installs the binary with the command the
// README prints, and stays clean: the go.work.sum a go command writes in
// a workspace (on a machine whose module cache lacks a checksum) is
// ignored, so git status shows nothing and the installed binary's
// version names the commit without "+modified".
func TestFreshCheckout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clone := filepath.Join(dir, "idem")
	command(t, nil, "", "git", "clone", "--quiet", "--no-hardlinks", "..", clone)
	head := strings.TrimSpace(command(t, nil, clone, "git", "rev-parse", "HEAD"))

	readme, err := os.ReadFile(filepath.Join(clone, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := installLine.FindSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md prints no %q", installLine)
	}
	// What `go run ./cmd/idem serve` leaves on such a machine.
	if err := os.WriteFile(filepath.Join(clone, "go.work.sum"), []byte("golang.org/x/example v0.0.0 h1:AAAA=\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gobin := filepath.Join(dir, "bin")
	args := strings.Fields(string(m[1]))
	command(t, []string{"GOBIN=" + gobin, "GOFLAGS="}, clone, args[0], args[1:]...)

	version := command(t, nil, "", filepath.Join(gobin, "idem"), "version")
	if !strings.Contains(version, "(commit "+head) || strings.Contains(version, "+modified") {
		t.Errorf("the installed idem says %q, want commit %s unmodified", strings.TrimSpace(version), head)
	}
	if status := command(t, nil, clone, "git", "status", "--porcelain", "--untracked-files=all"); status != "" {
		t.Errorf("the fresh clone is not clean after the install:\n%s", status)
	}
}
