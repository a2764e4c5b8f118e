// Command idem runs the idem service and its tools: serve, migrate (and, as
// they land, relay, load and the inspection commands).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/idemhq/idem/internal/cli"
)

const usage = `idem makes retried work happen once.

Usage:
  idem version                                 the module version, commit and Go of this binary
  idem serve   [--db URL] [--addr HOST:PORT]   run the HTTP service
  idem migrate [--db URL]                      apply database migrations
  idem relay   [--db URL] [--publish URL]      publish committed outbox messages
  idem outbox stats | list --dead | redrive ID  the outbox backlog and its dead letters
  idem keys get [--tenant T] [--operation OP] KEY          what was stored for an idempotency key
  idem keys rotate [--check]                   re-wrap data keys under the newest encryption key
  idem tenants forget TENANT                   destroy a tenant's data keys: its stored records become unreadable
  idem ledger balance [--tenant T] [--as-of TIME] ACCOUNT  a balance as believed at a moment
  idem ledger verify                           check every ledger invariant (non-zero exit when broken)
  (inspection commands take --json for scripts and --db like serve)
  idem load    --target URL | --chaos --db URL  duplicate-heavy load, then verify exactly-once (idem load -h)
  idem healthcheck [--url URL]                 exit 0 when URL (default serve's /readyz) answers 2xx, else 1

Every command takes --help (its flags, their types and defaults). Exit
status: 0 done, 1 failed (or a check found violations), 2 usage error.

Configuration (flags win over environment variables):
  --db    IDEM_DB    database: postgres://… or sqlite:PATH (default SQLite in ./idem-data/)
  --addr  IDEM_ADDR  listen address (default 127.0.0.1:8080)
  --admin-key IDEM_ADMIN_KEY  web console (/ui/) admin key (default none: console for loopback clients only)
  --encryption-key-file IDEM_ENCRYPTION_KEY_FILE  master keys that encrypt stored records at rest (default none)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitCode reports err and says how the process exits: 0 for success and
// --help (the flags printed on stdout), 2 for a usage error (nothing ran),
// 1 for a run that failed or a check that found violations.
func exitCode(err error, stdout, stderr io.Writer) int {
	var help *cli.HelpError
	var usageErr *cli.UsageError
	switch {
	case err == nil:
		return cli.ExitOK
	case errors.As(err, &help):
		help.PrintHelp(stdout)
		return cli.ExitOK
	case errors.Is(err, flag.ErrHelp):
		return cli.ExitUsage // the usage was printed where it was asked for
	case errors.Is(err, errUnhealthy):
		return cli.ExitFailed // healthcheck said why on stderr
	case errors.As(err, &usageErr):
		fmt.Fprintln(stderr, "idem:", err)
		if usageErr.Command != "" {
			fmt.Fprintf(stderr, "run 'idem %s --help' for its flags\n", usageErr.Command)
		}
		return cli.ExitUsage
	default:
		fmt.Fprintln(stderr, "idem:", err)
		return cli.ExitFailed
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "version", "--version", "-version":
		if len(args) > 1 {
			return cli.Usagef("version", "version: unexpected argument %q", args[1])
		}
		fmt.Fprintln(stdout, versionLine())
		return nil
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "migrate":
		return migrate(ctx, args[1:], stdout, stderr)
	case "relay":
		return relay(ctx, args[1:], stdout, stderr)
	case "outbox":
		return outboxCmd(ctx, args[1:], stdout, stderr)
	case "keys":
		return keys(ctx, args[1:], stdout, stderr)
	case "tenants":
		return tenantsCmd(ctx, args[1:], stdout, stderr)
	case "ledger":
		return ledgerCmd(ctx, args[1:], stdout, stderr)
	case "load":
		return loadCmd(ctx, args[1:], stdout, stderr)
	case "healthcheck":
		return healthcheck(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return cli.Usagef("", "unknown command %q", args[0])
	}
}

// releaseVersion and releaseRevision name a release build: scripts/image
// sets them (-ldflags -X) from its --version and the git commit, since a
// build outside the module proxy has no version of its own ("(devel)").
var releaseVersion, releaseRevision string

// versionLine is what idem version prints: the module version, the commit
// and the Go that built the binary, from its build information.
func versionLine() string {
	version, commit, at, modified := "(unknown)", "", "", false
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if releaseVersion != "" {
		version = releaseVersion
	}
	if releaseRevision != "" && commit == "" {
		commit = releaseRevision
	}
	line := "idem " + version
	if commit != "" {
		if modified {
			commit += "+modified"
		}
		line += " (commit " + commit
		if at != "" {
			line += ", " + at
		}
		line += ")"
	}
	return line + " " + goVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// envDefault returns the environment variable's value, or def when unset.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
