// Package benchknob turns a hot-path mechanism off for the benchmark that
// measures what it buys (bench/run mechanisms; docs/architecture.md, "The
// hot path's mechanisms"). IDEM_BENCH_OFF names the mechanisms to turn
// off, comma-separated, read once at start: replay-cache, read-first,
// coalesce. It is a benchmark's knob, not a setting: a
// mechanism turned off costs speed, never a guarantee, and production
// leaves the variable unset.
package benchknob

import (
	"os"
	"slices"
	"strings"
)

// Names are the mechanisms IDEM_BENCH_OFF may name.
var Names = []string{"replay-cache", "read-first", "coalesce"}

var off = parse(os.Getenv("IDEM_BENCH_OFF"))

func parse(v string) map[string]bool {
	m := map[string]bool{}
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			m[n] = true
		}
	}
	return m
}

// Off reports whether IDEM_BENCH_OFF turned the mechanism name off.
func Off(name string) bool { return off[name] }

// Unknown returns the names IDEM_BENCH_OFF gives that are none of Names,
// for the process to refuse: a misspelt knob would measure nothing.
func Unknown() []string {
	var bad []string
	for n := range off {
		if !slices.Contains(Names, n) {
			bad = append(bad, n)
		}
	}
	slices.Sort(bad)
	return bad
}
