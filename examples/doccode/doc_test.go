// Package doccode_test compiles the Go blocks of README.md and docs/*.md,
// so that code a reader copies from a page builds against today's API.
// docs/contributing.md ("Go in the docs") states the convention this test
// enforces; the examples module is its home because it requires every
// module and library a block names (gRPC, Connect, pgx, the stacks).
package doccode_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// root is the repository, seen from this package's directory.
const root = "../.."

// imports maps the package names blocks use to their import paths. A name
// a block declares itself (a variable db, a parameter) is not imported.
var imports = map[string]string{
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"io":          "io",
	"log":         "log",
	"os":          "os",
	"strings":     "strings",
	"time":        "time",
	"json":        "encoding/json",
	"http":        "net/http",
	"slog":        "log/slog",
	"sql":         "database/sql",
	"testing":     "testing",
	"connect":     "connectrpc.com/connect",
	"grpc":        "google.golang.org/grpc",
	"wrapperspb":  "google.golang.org/protobuf/types/known/wrapperspb",
	"uuid":        "github.com/google/uuid",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"db":          "github.com/idemhq/idem/examples/doccode/db",
	"pgx":         "github.com/jackc/pgx/v5",
	"pgconn":      "github.com/jackc/pgx/v5/pgconn",
	"idem":        "github.com/idemhq/idem",
	"driver":      "github.com/idemhq/idem/driver",
	"postgres":    "github.com/idemhq/idem/driver/postgres",
	"sqlite":      "github.com/idemhq/idem/driver/sqlite",
	"idemclient":  "github.com/idemhq/idem/idemclient",
	"idemhttp":    "github.com/idemhq/idem/idemhttp",
	"idemgrpc":    "github.com/idemhq/idem/idemgrpc",
	"idemconnect": "github.com/idemhq/idem/idemconnect",
	"inbox":       "github.com/idemhq/idem/inbox",
	"ledger":      "github.com/idemhq/idem/ledger",
	"outbox":      "github.com/idemhq/idem/outbox",
	"seal":        "github.com/idemhq/idem/seal",
	"webhookout":  "github.com/idemhq/idem/outbox/webhookout",
	"webhook":     "github.com/idemhq/idem/webhook",
	"drivertest":  "github.com/idemhq/idem/internal/drivertest",
	"shop":        "github.com/idemhq/idem/examples/stacks/shop",
}

// prelude is what every fragment may name without declaring it: the
// context, transaction, driver and mux a page's prose has introduced.
const prelude = `package doc

import (
	"context"
	"net/http"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
)

var (
	ctx    context.Context
	tx     driver.Tx
	d      driver.Driver
	keeper *idem.Keeper
	mux    *http.ServeMux
	tenant string
)
`

// block is one ```go block of a page.
type block struct {
	page   string // relative to the repository, e.g. docs/stacks.md
	line   int    // the first line of code (the one after the fence)
	code   string
	marker string // the "<!-- go: … -->" comment on the line before the fence, without its delimiters
}

var markerRE = regexp.MustCompile(`^<!-- go: (.+) -->$`)

// blocks reads every ```go block of README.md and docs/*.md.
func blocks(t *testing.T) []block {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	var out []block
	for _, p := range pages {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		var (
			cur  *block
			prev string
		)
		sc := bufio.NewScanner(bytes.NewReader(src))
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case cur == nil && line == "```go":
				cur = &block{page: filepath.ToSlash(rel), line: n + 1}
				if m := markerRE.FindStringSubmatch(prev); m != nil {
					cur.marker = m[1]
				}
			case cur != nil && line == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.code += line + "\n"
			}
			prev = line
		}
		if cur != nil {
			t.Errorf("%s:%d: a ```go block that never closes", rel, cur.line-1)
		}
	}
	return out
}

// Every ```go block compiles: a program as it is, declarations in a
// package of their own, statements in a function, with the imports the
// names they use call for. A block marked "not compiled" says why; one
// marked "as in FILE" is checked declaration by declaration against that
// file, which its own package's tests build and run.
func TestDocBlocksCompile(t *testing.T) {
	t.Parallel()
	all := blocks(t)
	if len(all) < 25 {
		t.Fatalf("found %d Go blocks in the docs, want the 25 or more they hold: is the page layout different?", len(all))
	}
	tmp := t.TempDir()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	overlay := map[string]string{}
	var pkgs []string
	add := func(dir, name, src string) {
		f := filepath.Join(tmp, fmt.Sprintf("%d-%s", len(overlay), name))
		if err := os.WriteFile(f, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(here, "blocks", dir, name)] = f
	}
	for i, b := range all {
		where := fmt.Sprintf("%s:%d", b.page, b.line)
		switch {
		case strings.HasPrefix(b.marker, "not compiled: "):
			continue
		case b.marker == "not compiled" || b.marker == "not compiled:":
			t.Errorf("%s: say why a block is not compiled (<!-- go: not compiled: why -->)", where)
			continue
		case strings.HasPrefix(b.marker, "as in "):
			sameAs(t, b, strings.TrimPrefix(b.marker, "as in "))
			continue
		}
		var given string
		if g, ok := strings.CutPrefix(b.marker, "given "); ok {
			given = g
		} else if b.marker != "" {
			t.Errorf("%s: unknown marker %q (want: not compiled: why / as in FILE / given DECLS)", where, b.marker)
			continue
		}
		dir := fmt.Sprintf("b%02d", i)
		if strings.HasPrefix(strings.TrimSpace(stripComments(b.code)), "package ") {
			add(dir, "main.go", fmt.Sprintf("//line %s:%d\n%s", b.page, b.line, b.code))
		} else {
			src, err := wrap(b, given)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			add(dir, "block.go", src)
			add(dir, "prelude.go", prelude)
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(filepath.Join("blocks", dir)))
	}
	if len(pkgs) == 0 {
		t.Fatal("no block to compile")
	}
	ov, _ := json.Marshal(map[string]any{"Replace": overlay})
	ovPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", ovPath}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("Go blocks of the docs do not compile (positions are the pages'; docs/contributing.md, \"Go in the docs\"):\n%s", out)
	}
}

// stripComments drops the // comment lines a program opens with.
func stripComments(code string) string {
	var b strings.Builder
	for line := range strings.Lines(code) {
		if !strings.HasPrefix(strings.TrimSpace(line), "//") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// wrap makes a block a file of package doc: its top-level declarations
// stay top-level, its statements become the body of a function, given
// declarations are appended, and the imports its names need are added.
// //line directives keep the compiler's positions the page's.
func wrap(b block, given string) (string, error) {
	lines := strings.SplitAfter(b.code, "\n")
	var decls, stmts strings.Builder
	directive := func(w *strings.Builder, i int) { fmt.Fprintf(w, "//line %s:%d\n", b.page, b.line+i) }
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !isDeclStart(l) {
			if strings.TrimSpace(l) != "" {
				directive(&stmts, i)
				stmts.WriteString(l)
			}
			continue
		}
		directive(&decls, i)
		decls.WriteString(l)
		open := strings.TrimRight(stripTrailingComment(l), " \t\n")
		if !strings.HasSuffix(open, "{") && !strings.HasSuffix(open, "(") {
			continue
		}
		for i++; i < len(lines); i++ {
			decls.WriteString(lines[i])
			if t := strings.TrimRight(lines[i], "\n"); t == "}" || t == ")" {
				break
			}
		}
	}
	body := stmts.String()
	src := "package doc\n\n" + decls.String() + "\n"
	if given != "" {
		// At the marker's line, the one before the fence.
		src += fmt.Sprintf("//line %s:%d\n%s\n", b.page, b.line-2, given)
	}
	if body != "" {
		src += "func _() {\n" + body + "}\n"
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "block.go", src, parser.SkipObjectResolution)
	if err != nil {
		return "", fmt.Errorf("does not parse as Go declarations and statements (mark it <!-- go: not compiled: why --> if it is a listing): %v", err)
	}
	// Variables the statements declare and never read would not compile
	// in a function; on a page they are the point of the example.
	var uses []string
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "_" {
			continue
		}
		for _, st := range fd.Body.List {
			if as, ok := st.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
				for _, e := range as.Lhs {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
						uses = append(uses, "_ = "+id.Name+"\n")
					}
				}
			}
		}
	}
	if len(uses) > 0 {
		i := strings.LastIndex(src, "}")
		src = src[:i] + strings.Join(uses, "") + src[i:]
	}
	var paths []string
	for name := range packagesUsed(f) {
		paths = append(paths, fmt.Sprintf("%s %q\n", name, imports[name]))
	}
	sort.Strings(paths)
	if len(paths) > 0 {
		src = strings.Replace(src, "package doc\n", "package doc\n\nimport (\n"+strings.Join(paths, "")+")\n", 1)
	}
	return src, nil
}

func isDeclStart(l string) bool {
	for _, kw := range []string{"func ", "type ", "var ", "const "} {
		if strings.HasPrefix(l, kw) {
			return true
		}
	}
	return false
}

func stripTrailingComment(l string) string {
	if i := strings.Index(l, " //"); i >= 0 {
		return l[:i]
	}
	return l
}

// packagesUsed is the names of imports: whose x in x.Sel is
// a package name the file does not declare.
func packagesUsed(f *ast.File) map[string]bool {
	declared := map[string]bool{}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.Field:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.FuncDecl:
			declared[n.Name.Name] = true
		case *ast.TypeSpec:
			declared[n.Name.Name] = true
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{n.Key, n.Value} {
				if id, ok := e.(*ast.Ident); ok {
					declared[id.Name] = true
				}
			}
		}
		return true
	})
	out := map[string]bool{}
	for name := range used {
		if _, ok := imports[name]; ok && !declared[name] {
			out[name] = true
		}
	}
	return out
}

// sameAs checks that each top-level declaration of b is, to the byte, the
// declaration of that name in file (comments aside).
func sameAs(t *testing.T, b block, file string) {
	t.Helper()
	where := fmt.Sprintf("%s:%d", b.page, b.line)
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	want, err := declsOf(string(src))
	if err != nil {
		t.Errorf("%s: %s: %v", where, file, err)
		return
	}
	got, err := declsOf("package p\n\n" + b.code)
	if err != nil {
		t.Errorf("%s: a block marked \"as in\" holds declarations only: %v", where, err)
		return
	}
	if len(got) == 0 {
		t.Errorf("%s: no declaration to compare with %s", where, file)
	}
	for name, text := range got {
		if want[name] != text {
			t.Errorf("%s: %s differs from its declaration in %s (copy it from the file):\n--- page\n%s\n--- %s\n%s", where, name, file, text, file, want[name])
		}
	}
}

// declsOf maps each top-level declaration's name (a method's as
// Recv.Name) to its source text, doc comments left out.
func declsOf(src string) (map[string]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "f.go", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	text := func(n ast.Node) string {
		return src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset]
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = strings.TrimPrefix(text(d.Recv.List[0].Type), "*") + "." + name
			}
			out[name] = text(d)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = text(d)
				case *ast.ValueSpec:
					out[s.Names[0].Name] = text(d)
				}
			}
		}
	}
	return out, nil
}
