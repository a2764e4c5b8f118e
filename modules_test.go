package idem_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// importedModules are the nested modules meant to be imported by users'
// programs. Each is versioned on its own, so its non-test code may use only
// the library's exported API: Go's internal rule goes by import path and
// lets it import the library's internal/ packages, but no version promises
// anything about those, and the first release of the library that changes
// one would break a released module built against the previous one. Tests
// and examples may use the internal test servers; they are never built by a
// user's program.
var importedModules = []string{"idemgrpc", "idemconnect", "idemtest"}

const internalPrefix = "github.com/idemhq/idem/internal"

func TestImportedModulesUseNoInternalPackage(t *testing.T) {
	t.Parallel()
	for _, mod := range importedModules {
		if _, err := os.Stat(filepath.Join(mod, "go.mod")); err != nil {
			t.Fatalf("%s is listed as a module but has no go.mod: %v", mod, err)
		}
		files := 0
		err := filepath.WalkDir(mod, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if path != mod && (e.Name() == "testdata" || strings.HasPrefix(e.Name(), ".") || strings.HasPrefix(e.Name(), "_")) {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != mod {
					return filepath.SkipDir // another module, checked on its own if listed
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			files++
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, err := strconv.Unquote(imp.Path.Value)
				if err != nil {
					return err
				}
				if p == internalPrefix || strings.HasPrefix(p, internalPrefix+"/") {
					t.Errorf("%s imports %s: a module meant to be imported may use only the library's exported packages (move what it needs behind an exported, documented API, as rpcguard and pgtest are)", path, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", mod, err)
		}
		if files == 0 {
			t.Errorf("%s: no non-test Go file found; the check would pass on nothing", mod)
		}
	}
}
