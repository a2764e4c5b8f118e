package main

import (
	"runtime"
	"strings"
	"testing"
)

// The command line's conventions: --help on stdout with two-dash flags,
// their types and defaults, exit 0; a usage error exits 2 and suggests the
// nearest flag; idem version names the Go that built it.
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args     []string
		code     int
		stdout   []string
		stderr   []string
		noStdout bool
	}{
		{args: []string{"serve", "--help"}, stdout: []string{"Usage: idem serve [flags]", "\n  --db string\n", "\n  --relay-batch int\n", "\n  --relay-poll duration\n", "\n  --relay\n", "(default 2000)", "--migrate"}},
		{args: []string{"relay", "-h"}, stdout: []string{"Usage: idem relay [flags]", "  --metrics-addr string"}},
		{args: []string{"migrate", "--help"}, stdout: []string{"  --dry-run\n", "  --print\n"}},
		{args: []string{"load", "--help"}, stdout: []string{"  --target string"}},
		{args: []string{"ledger", "balance", "--help"}, stdout: []string{"  --as-of"}},
		{args: []string{"keys", "rotate", "--help"}, stdout: []string{"idem keys rotate [--check]", "  --check\n", "  --batch int\n", "  --encryption-key-file string"}},
		{args: []string{"tenants", "forget", "--help"}, stdout: []string{"idem tenants forget [--db URL] TENANT", "  --db string"}},
		{args: []string{"tenants", "forget"}, code: 2, stderr: []string{"want exactly one TENANT"}},
		{args: []string{"serve", "--help"}, stdout: []string{"  --encryption-key-file string"}},
		{args: []string{"--help"}, stdout: []string{"idem version", "Exit\nstatus: 0 done, 1 failed"}},
		{args: []string{"version"}, stdout: []string{"idem ", runtime.Version()}},
		{args: []string{"--version"}, stdout: []string{"idem ", runtime.Version()}},
		{args: []string{"serve", "--relay-bach", "3"}, code: 2, noStdout: true,
			stderr: []string{"unknown flag --relay-bach (did you mean --relay-batch?)", "run 'idem serve --help'"}},
		{args: []string{"migrate", "--dryrun"}, code: 2, stderr: []string{"did you mean --dry-run?"}},
		{args: []string{"serve", "--relay-batch", "many"}, code: 2, stderr: []string{"--relay-batch"}},
		{args: []string{"serve", "extra"}, code: 2, stderr: []string{`unexpected argument "extra"`}},
		{args: []string{"frobnicate"}, code: 2, stderr: []string{`unknown command "frobnicate"`}},
		{args: []string{"ledger", "balance"}, code: 2, stderr: []string{"want exactly one ACCOUNT"}},
		{args: []string{"outbox", "list"}, code: 2, stderr: []string{"want --dead"}},
		{args: []string{"version", "x"}, code: 2},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			out, errOut, code := runIdem(t, nil, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out, errOut)
			}
			for _, w := range c.stdout {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range c.stderr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if c.noStdout && out != "" {
				t.Errorf("a usage error wrote to stdout: %s", out)
			}
		})
	}
}
