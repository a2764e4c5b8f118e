package idem_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A page states the present: how to run it, what holds, today's figures
// with the command that reproduces them. A dated run ("on 2026-12-01 we
// measured …") or a lab note ("a week ago", "before this change") is
// history, which belongs in commit messages and CHANGELOG.md's entries.
//
// The rule: outside code (fenced blocks and `spans`, where a date is an
// example value such as an --as-of argument), no page of docs/ and no
// README.md names a calendar date or uses one of the phrases below.

var (
	// datedRun is a calendar date: 2026-12-01, December 1, 2026, 1 Dec 2026.
	datedRun = regexp.MustCompile(`(?i)\b20\d\d-\d\d-\d\d\b` +
		`|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? \d{1,2},? 20\d\d\b` +
		`|\b\d{1,2} (?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? 20\d\d\b`)
	// labNote is prose that only makes sense on the day it was written.
	labNote = regexp.MustCompile(`(?i)\b(?:a week ago|yesterday|last week|this week|` +
		`before this change|after this change|the same hour|at the time)\b`)
	// codeSpan is inline code, which may wrap within its paragraph.
	codeSpan = regexp.MustCompile("`(?:[^`\n]|\n[^`\n])*`")
)

// proseLines returns a Markdown page's lines outside fenced and indented
// code, with inline code blanked, by line number.
func proseLines(text string) map[int]string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, line := range lines {
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		if fence || fenced || strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			lines[i] = ""
		}
		if fence {
			fenced = !fenced
		}
	}
	prose := codeSpan.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(code string) string {
		return strings.Repeat("\n", strings.Count(code, "\n")) // keep the numbering
	})
	out := map[int]string{}
	for i, line := range strings.Split(prose, "\n") {
		if line != "" {
			out[i+1] = line
		}
	}
	return out
}

// undated returns the dated runs and lab notes of a page's text, as
// "line: match", in line order.
func undated(text string) []string {
	lines := proseLines(text)
	ns := make([]int, 0, len(lines))
	for n := range lines {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	var found []string
	for _, n := range ns {
		for _, re := range []*regexp.Regexp{datedRun, labNote} {
			if m := re.FindString(lines[n]); m != "" {
				found = append(found, strconv.Itoa(n)+": "+m)
			}
		}
	}
	return found
}

func TestDocsUndatedRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"On 2026-12-01 we measured 5,000 transfers/s.", []string{"1: 2026-12-01"}},
		{"Measured December 1, 2026 on the VM.", []string{"1: December 1, 2026"}},
		{"taken 1 Dec 2026", []string{"1: 1 Dec 2026"}},
		{"x\nA week ago the relay drained 40k/s.", []string{"2: A week ago"}},
		{"It is twice as fast as before this change.", []string{"1: before this change"}},
		{"`--as-of 2026-11-29T14:02` is UTC.", nil},
		{"```\n$ idem ledger balance --as-of 2026-11-29T14:02:00Z\n```", nil},
		{"    first seen   2026-11-29T14:01:58Z", nil},
		{"an HTTP date (`Tue, 01 Jan\n2030 00:00:00 GMT`) or 2026-01-02", []string{"2: 2026-01-02"}},
		{"`go test -bench BenchmarkPost ./ledger/` gives 3,000 transfers/s.", nil},
	} {
		if got := undated(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("undated(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}

func TestDocsStateThePresent(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md")
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range undated(string(b)) {
			t.Errorf("%s:%s: a dated run or lab note (docs state the present; the history is in git log and CHANGELOG.md)", p, f)
		}
	}
}
