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

// The README's install line works from a checkout, and a fresh clone
// stays clean: the go.work.sum a go command writes in a workspace (on a
// machine whose module cache lacks a checksum, as after the README's
// `go run ./cmd/idem serve`) is ignored, so git status shows nothing and
// scripts/image's `git describe --dirty` names a clean commit. The install
// runs in this checkout (a clone's packages would all be compiled anew:
// minutes on a loaded machine); the clone shows what git sees after it.
func TestFreshCheckout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := installLine.FindSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md prints no %q", installLine)
	}
	gobin := filepath.Join(dir, "bin")
	args := strings.Fields(string(m[1]))
	command(t, []string{"GOBIN=" + gobin, "GOFLAGS="}, "..", args[0], args[1:]...)
	if version := command(t, nil, "", filepath.Join(gobin, "idem"), "version"); !strings.HasPrefix(version, "idem ") {
		t.Errorf("the installed idem's version: %q", version)
	}

	clone := filepath.Join(dir, "idem")
	command(t, nil, "", "git", "clone", "--quiet", "--no-hardlinks", "..", clone)
	if err := os.WriteFile(filepath.Join(clone, "go.work.sum"), []byte("golang.org/x/example v0.0.0 h1:AAAA=\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if status := command(t, nil, clone, "git", "status", "--porcelain", "--untracked-files=all"); status != "" {
		t.Errorf("a fresh clone is not clean once go has written go.work.sum:\n%s", status)
	}
	if d := strings.TrimSpace(command(t, nil, clone, "git", "describe", "--tags", "--always", "--dirty")); strings.HasSuffix(d, "-dirty") {
		t.Errorf("git describe says %s", d)
	}
}
