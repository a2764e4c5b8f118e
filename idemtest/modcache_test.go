package idemtest_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A user's module depends on idem through the module cache, where every
// file is read-only and none is executable, and runs its tests with
// IDEM_TEST_DATABASE_URL unset: idemtest.Postgres starts its own cluster
// from there, and writes nothing into the modules. The copies of idem's
// module and of idemtest's are laid out like the module cache, and a
// throwaway module replaces both with them. The user's tests run as built
// plainly and with -trimpath, where a source file's path is no path on disk.
func TestKitFromReadOnlyModule(t *testing.T) {
	t.Parallel()
	kit, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(kit)
	mod := filepath.Join(t.TempDir(), "idem")
	copyModule(t, root, mod)
	kitMod := filepath.Join(t.TempDir(), "idemtest")
	copyModule(t, kit, kitMod)
	before := append(tree(t, mod), tree(t, kitMod)...)
	readOnly(t, mod)
	readOnly(t, kitMod)

	user := t.TempDir()
	write(t, filepath.Join(user, "go.mod"), "module example.com/kituser\n\ngo 1.26.0\n\n"+
		"require (\n\tgithub.com/idemhq/idem v0.0.0\n\tgithub.com/idemhq/idem/idemtest v0.0.0\n)\n\n"+
		"replace github.com/idemhq/idem => "+mod+"\n\n"+
		"replace github.com/idemhq/idem/idemtest => "+kitMod+"\n")
	write(t, filepath.Join(user, "kit_test.go"), kitUserTest)

	for _, flags := range [][]string{nil, {"-trimpath"}} {
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		cmd := exec.CommandContext(ctx, "go", append(append([]string{"test", "-count=1"}, flags...), "./...")...)
		cmd.Dir = user
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "IDEM_TEST_DATABASE_URL=") || strings.HasPrefix(kv, "GOFLAGS=")
		}), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("go test %v in a module that imports idemtest from a read-only copy: %v\n%s", flags, err, out)
		}
		if !bytes.Contains(out, []byte("ok")) {
			t.Fatalf("go test %v ran no test:\n%s", flags, out)
		}
	}
	if after := append(tree(t, mod), tree(t, kitMod)...); !slices.Equal(before, after) {
		t.Fatalf("the kit wrote into the modules: %d entries before, %d after", len(before), len(after))
	}
}

// kitUserTest is the user's test: no IDEM_TEST_DATABASE_URL, a schema with
// idem's tables in it all the same.
const kitUserTest = `package kituser

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/idemtest"
)

func TestMain(m *testing.M) { os.Exit(idemtest.Main(m)) }

func TestKit(t *testing.T) {
	if u := os.Getenv("IDEM_TEST_DATABASE_URL"); u != "" {
		t.Fatalf("IDEM_TEST_DATABASE_URL is set (%s): the kit must start its own cluster", u)
	}
	db := idemtest.Postgres(t)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM idem_keys").Scan(&n); err != nil || n != 0 {
		t.Fatalf("idem_keys in the test's schema: %d rows, %v", n, err)
	}
}
`

// copyModule copies the files git tracks in the module at root to dst,
// less the directories of nested modules, as the module's zip leaves them
// out.
func copyModule(t *testing.T, root, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	names := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	var nested []string
	for _, name := range names {
		if dir := filepath.Dir(name); filepath.Base(name) == "go.mod" && dir != "." {
			nested = append(nested, dir+string(filepath.Separator))
		}
	}
	for _, name := range names {
		if slices.ContainsFunc(nested, func(dir string) bool { return strings.HasPrefix(name, dir) }) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dst, name), string(b))
	}
}

// readOnly makes dir's files 0444 and its directories 0555, as in the
// module cache, and writable again when t ends, so that it can be removed.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	chmodAll := func(file, directory fs.FileMode) error {
		return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return os.Chmod(path, directory)
			}
			return os.Chmod(path, file)
		})
	}
	t.Cleanup(func() {
		if err := chmodAll(0o644, 0o755); err != nil {
			t.Error(err)
		}
	})
	if err := chmodAll(0o444, 0o555); err != nil {
		t.Fatal(err)
	}
}

// tree lists every path under dir.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		paths = append(paths, path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
