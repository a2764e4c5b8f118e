package idem_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The docs cite each other's sections, and code and scripts cite them too,
// in two forms: a link with an anchor (`ledger.md#as-of-answers-are-final`)
// and a page followed by section titles in quotes (`docs/architecture.md,
// "Group commit"`, `docs/ledger.md, "Foreign keys" and "Benchmarks"`,
// `docs/benchmarks.md ("database/sql beside pgx")`). A citation of a
// section that is not there sends the reader nowhere, so these tests fail
// on one. CHANGELOG.md is history: its entries cite the docs as they were.

var (
	// citeLink is a Markdown page with an anchor; the page may have a
	// directory before it.
	citeLink = regexp.MustCompile(`([A-Za-z0-9_.-]+/)*([a-z0-9_-]+\.md)#([A-Za-z0-9_-]+)`)
	// citeQuoted is a page, then a comma, a colon, an opening
	// parenthesis or a space, then the first quoted title; citeMore takes
	// the titles that follow it (`, "B"`, ` and "C"`, `, and "D"`).
	citeQuoted = regexp.MustCompile(`([A-Za-z0-9_.-]+/)*([a-z0-9_-]+\.md)(?:[,:] ?| \(| )"([^"\n]+)"`)
	citeMore   = regexp.MustCompile(`^(?:,| and|, and) "([^"\n]+)"`)
	// docsPage is a page of docs/ named by its path, cited whole or not.
	docsPage = regexp.MustCompile(`docs/([a-z0-9_-]+\.md)`)
	// lineJoin is a line break with what continues a comment or a
	// paragraph on the next line: a citation may be wrapped anywhere.
	lineJoin = regexp.MustCompile(`[ \t]*\n[ \t]*(?:(?://|#|--|\*)[ \t]*)?`)
)

// citation is one section a file cites.
type citation struct {
	page    string // the cited page's base name: architecture.md
	section string // a title, or an anchor when anchor is set
	anchor  bool
}

// citations returns what text cites, in order.
func citations(text string) []citation {
	text = lineJoin.ReplaceAllString(text, " ")
	var out []citation
	for _, m := range citeLink.FindAllStringSubmatch(text, -1) {
		out = append(out, citation{page: m[2], section: m[3], anchor: true})
	}
	for _, loc := range citeQuoted.FindAllStringSubmatchIndex(text, -1) {
		page := text[loc[4]:loc[5]]
		out = append(out, citation{page: page, section: text[loc[6]:loc[7]]})
		rest := text[loc[1]:]
		for {
			m := citeMore.FindStringSubmatchIndex(rest)
			if m == nil {
				break
			}
			out = append(out, citation{page: page, section: rest[m[2]:m[3]]})
			rest = rest[m[1]:]
		}
	}
	return out
}

// boldLead is a paragraph or list item that opens with a bold title
// ending in a full stop, "**Foreign keys.** A transfer's …": the pages
// cite these as sections too.
var boldLead = regexp.MustCompile(`^(?:[-*] )?\*\*([^*]+?)\.\*\*`)

// sections reads a Markdown page's headings (outside fenced code) as
// titles, with backticks removed, and as GitHub's anchors; a heading's
// title before ": " and a bold paragraph lead are titles too.
func sections(t *testing.T, path string) (titles, anchors map[string]bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	titles, anchors = map[string]bool{}, map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if lead := boldLead.FindStringSubmatch(line); lead != nil {
			titles[plainTitle(lead[1])] = true
			continue
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		titles[plainTitle(title)] = true
		// "Routers: chi, gin, echo" is cited as "Routers".
		if short, _, ok := strings.Cut(title, ": "); ok {
			titles[plainTitle(short)] = true
		}
		a := anchorOf(title)
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return titles, anchors
}

func plainTitle(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "`", "")) }

// anchorOf is GitHub's anchor for a heading: lower case, spaces to
// hyphens, every other character but letters, digits, '-' and '_' dropped.
func anchorOf(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// citedPages are the pages a citation may name: docs/*.md and README.md,
// by base name (docs/README.md does not exist, so the names are unique).
func citedPages(t *testing.T) map[string]string {
	t.Helper()
	pages := map[string]string{"README.md": "README.md"}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range docs {
		if _, dup := pages[filepath.Base(p)]; dup {
			t.Fatalf("%s: two pages named %s", p, filepath.Base(p))
		}
		pages[filepath.Base(p)] = p
	}
	return pages
}

// citingFiles are the files whose citations are checked: the docs and
// READMEs, the Go code, and the scripts, SQL and configuration beside it.
func citingFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "idem-data", "testdata", "dist":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md":
			if path != "CHANGELOG.md" {
				files = append(files, path)
			}
		case ".go", ".sh", ".sql", ".yaml", ".yml", ".ts", ".proto":
			files = append(files, path)
		case "":
			dir := filepath.Dir(path)
			if dir == "bench" || dir == "scripts" || d.Name() == "Makefile" || d.Name() == "Dockerfile" {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// citingText is the text of file that may cite: for Go its comments
// (string literals name pages without citing them), otherwise all of it.
func citingText(t *testing.T, file string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Ext(file) != ".go" {
		return string(src)
	}
	f, err := parser.ParseFile(token.NewFileSet(), file, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, g := range f.Comments {
		b.WriteString(g.Text())
		b.WriteString("\n\n")
	}
	return b.String()
}

func TestDocsCitationsName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want []citation
	}{
		{`see docs/architecture.md, "Group commit".`, []citation{{"architecture.md", "Group commit", false}}},
		{"// the plans (docs/benchmarks.md,\n// \"Generic plans\"). next", []citation{{"benchmarks.md", "Generic plans", false}}},
		{"# bench/run (docs/benchmarks.md,\n#   \"Reads over arrays\")", []citation{{"benchmarks.md", "Reads over arrays", false}}},
		{`(docs/ledger.md, "Foreign keys" and "Benchmarks")`, []citation{{"ledger.md", "Foreign keys", false}, {"ledger.md", "Benchmarks", false}}},
		{`docs/benchmarks.md ("database/sql beside pgx") has`, []citation{{"benchmarks.md", "database/sql beside pgx", false}}},
		{`docs/operations.md "High availability"`, []citation{{"operations.md", "High availability", false}}},
		{`[final](ledger.md#as-of-answers-are-final)`, []citation{{"ledger.md", "as-of-answers-are-final", true}}},
		{`[ops](docs/operations.md)`, nil},
		{`page string // the base name, "architecture.md"`, nil},
		{`docs/api.md: the routes`, nil},
	} {
		if got := citations(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("citations(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if got, want := anchorOf("Past one primary: Citus, `tenant_id` & co."), "past-one-primary-citus-tenant_id--co"; got != want {
		t.Errorf("anchorOf = %q, want %q", got, want)
	}
}

// TestDocsCitationsResolve fails on a citation, in a page, in code or in a
// script, of a docs section or a docs page that does not exist.
func TestDocsCitationsResolve(t *testing.T) {
	t.Parallel()
	pages := citedPages(t)
	type headings struct{ titles, anchors map[string]bool }
	read := map[string]headings{}
	checked := 0
	for _, file := range citingFiles(t) {
		text := citingText(t, file)
		for _, m := range docsPage.FindAllStringSubmatch(text, -1) {
			if _, ok := pages[m[1]]; !ok {
				t.Errorf("%s names docs/%s: no such page", file, m[1])
			}
		}
		for _, c := range citations(text) {
			path, ok := pages[c.page]
			if !ok {
				t.Errorf("%s cites %s, %q: no such page in docs/", file, c.page, c.section)
				continue
			}
			h, ok := read[path]
			if !ok {
				h.titles, h.anchors = sections(t, path)
				read[path] = h
			}
			checked++
			if c.anchor && !h.anchors[c.section] {
				t.Errorf("%s links %s#%s: no heading of %s has that anchor", file, c.page, c.section, path)
			}
			if !c.anchor && !h.titles[plainTitle(c.section)] {
				t.Errorf("%s cites %s, %q: no such section in %s", file, c.page, c.section, path)
			}
		}
	}
	// The forms above are how this repository cites; finding none would
	// mean the patterns no longer match it, not that all is well.
	t.Logf("%d citations checked", checked)
	if checked < 30 {
		t.Errorf("only %d citations found: have the citation forms changed?", checked)
	}
}
