// Package cli holds the conventions every idem subcommand follows: flags
// written with two dashes, --help on stdout with each flag's type and
// default, the nearest flag suggested for an unknown one, and exit codes
// that tell a usage error (2) from a failed run or check (1).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Exit codes.
const (
	ExitOK     = 0 // done, or --help
	ExitFailed = 1 // the command ran and failed, or a check found violations
	ExitUsage  = 2 // the command line is wrong: nothing was run
)

// UsageError is a wrong command line: an unknown command or flag, a bad
// flag value, a missing or extra argument.
type UsageError struct {
	// Command is the subcommand ("serve", "ledger balance"), or "".
	Command string
	Err     error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError for command.
func Usagef(command, format string, args ...any) error {
	return &UsageError{Command: command, Err: fmt.Errorf(format, args...)}
}

// HelpError is --help (or -h) asked of a flag set: not a failure; the
// caller prints the usage (PrintHelp) to stdout and exits 0.
type HelpError struct {
	FlagSet *flag.FlagSet
}

// usages are the texts NewFlagSetUsage gave flag sets, printed before
// their flags.
var usages sync.Map // *flag.FlagSet → string

// PrintHelp writes the command's usage text, or a plain usage line, then
// its flags.
func (e *HelpError) PrintHelp(w io.Writer) {
	if u, ok := usages.Load(e.FlagSet); ok {
		fmt.Fprint(w, u.(string))
	} else {
		fmt.Fprintf(w, "Usage: idem %s [flags]\n\nFlags:\n", e.FlagSet.Name())
	}
	PrintFlags(w, e.FlagSet)
}

func (e *HelpError) Error() string        { return "help requested" }
func (e *HelpError) Is(target error) bool { return target == flag.ErrHelp }

// NewFlagSet is a flag set for the idem subcommand name. Parse it with
// Parse, which returns errors instead of printing them.
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// NewFlagSetUsage is NewFlagSet with a usage text that --help prints
// before the flags.
func NewFlagSetUsage(name, usage string) *flag.FlagSet {
	fs := NewFlagSet(name)
	usages.Store(fs, usage)
	return fs
}

// Parse parses args into fs: a *HelpError for --help, a *UsageError naming
// the nearest flag for an unknown one, nil otherwise.
func Parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return &HelpError{FlagSet: fs}
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		msg = "unknown flag --" + name
		if near := nearest(fs, name); near != "" {
			msg += " (did you mean --" + near + "?)"
		}
	}
	return &UsageError{Command: fs.Name(), Err: fmt.Errorf("%s: %s", fs.Name(), msg)}
}

// PrintFlags writes fs's flags, two dashes each, with their type and
// default:
//
//	--db string
//	      database: postgres://… or sqlite:PATH (env IDEM_DB)
//	--relay-batch int
//	      rows per relay publish cycle (default 2000)
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if t, ok := f.Value.(interface{ Type() string }); ok {
			typ = t.Type()
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			typ = "" // --name alone means true
		}
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintf(w, "%s\n        %s", line, strings.ReplaceAll(usage, "\n", "\n        "))
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" && !strings.Contains(usage, "(default") {
			fmt.Fprintf(w, " (default %s)", def)
		}
		fmt.Fprintln(w)
	})
}

// nearest is the flag of fs closest to name, within an edit distance of a
// third of its length (at least 1), or "".
func nearest(fs *flag.FlagSet, name string) string {
	best, bestDist := "", max(1, len(name)/3)+1
	fs.VisitAll(func(f *flag.Flag) {
		if d := distance(name, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
