// Package pgbench holds no code: its test checks that the pgbench scripts
// beside it run the statements driver/postgres runs, so that a ceiling
// measured with them is the ceiling of idem's own SQL.
package pgbench

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A use is one statement of a script that must be a driver's statement
// with the script's values in place of its parameters ($1 is args[0]).
type use struct {
	script string
	name   string // the constant in driver/postgres
	args   []string
}

// The keeper's statements, which the scripts repeat by hand. The ledger's
// and the outbox's are the scripts' own renderings of statements the
// driver builds from several pieces; they are not checked here.
var uses = []use{
	{"keeper_first.sql", "sqlKeyClaim", []string{"'tenant-a'", "'POST /v1/things'", "('pgb-' || :k)", "decode(repeat('ab', 32), 'hex')", "now()", "(now() + interval '24 hours')", "(now() - interval '30 days')"}},
	{"keeper_first.sql", "sqlKeyRecord", []string{"'tenant-a'", "'POST /v1/things'", "('pgb-' || :k)", "201", "NULL", `convert_to('{"id":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"posted","amount":1250,"currency":"EUR"}', 'UTF8')`, "false"}},
	{"keeper_replay.sql", "sqlKeyGet", []string{"'tenant-a'", "'POST /v1/things'", "'replay-' || :k"}},
	{"transfer_first.sql", "sqlKeyClaim", []string{"'bench'", "'POST /v1/transfers'", "('pgb-' || :k)", "decode(repeat('ab', 32), 'hex')", "now()", "(now() + interval '24 hours')", "(now() - interval '30 days')"}},
	{"transfer_first.sql", "sqlKeyRecord", []string{"'bench'", "'POST /v1/transfers'", "('pgb-' || :k)", "201", `convert_to('{"Content-Type":["application/json"],"Location":["/v1/transfers/x"]}', 'UTF8')`, "convert_to(repeat('x', 280), 'UTF8')", "false"}},
}

func TestScriptsRunTheDriversStatements(t *testing.T) {
	t.Parallel()
	consts := driverConstants(t, filepath.Join("..", "..", "driver", "postgres"))
	param := regexp.MustCompile(`\$([0-9]+)`)
	for _, u := range uses {
		sql, ok := consts[u.name]
		if !ok {
			t.Errorf("driver/postgres has no string constant %s, which %s repeats", u.name, u.script)
			continue
		}
		want := param.ReplaceAllStringFunc(sql, func(p string) string {
			n, _ := strconv.Atoi(p[1:])
			if n < 1 || n > len(u.args) {
				t.Errorf("%s has parameter %s; the use in %s gives %d values", u.name, p, u.script, len(u.args))
				return p
			}
			return u.args[n-1]
		})
		want = normalize(want)
		stmts := statements(t, u.script)
		found := false
		for _, s := range stmts {
			if s == want {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s does not run driver/postgres's %s with its values; want the statement\n\t%s;\nhas\n\t%s",
				u.script, u.name, want, strings.Join(stmts, ";\n\t"))
		}
	}
}

// driverConstants returns the string constants of the non-test files of
// the package in dir, by name.
func driverConstants(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatalf("%s: %s: %v", path, name.Name, err)
						}
						out[name.Name] = s
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no string constant in %s", dir)
	}
	return out
}

// statements returns the SQL statements of a pgbench script, normalized:
// comments and meta-commands (\set) dropped, \gset ending a statement as
// ";" does.
func statements(t *testing.T, script string) []string {
	t.Helper()
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	var sql strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "--"):
		case strings.HasPrefix(trimmed, `\gset`):
			sql.WriteString(";\n")
		case strings.HasPrefix(trimmed, `\`):
		default:
			sql.WriteString(line + "\n")
		}
	}
	var out []string
	for _, s := range strings.Split(sql.String(), ";") {
		if s = normalize(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// normalize folds white space: the scripts lay statements out for reading.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }
