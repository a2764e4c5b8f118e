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
	"syscall"
)

const usage = `idem makes retried work happen once.

Usage:
  idem serve   [--db URL] [--addr HOST:PORT]   run the HTTP service
  idem migrate [--db URL]                      apply database migrations
  idem relay   [--db URL] [--publish URL]      publish committed outbox messages
  idem outbox stats | list --dead | redrive ID  the outbox backlog and its dead letters
  idem keys get [--tenant T] [--operation OP] KEY          what was stored for an idempotency key
  idem ledger balance [--tenant T] [--as-of TIME] ACCOUNT  a balance as believed at a moment
  idem ledger verify                           check every ledger invariant (non-zero exit when broken)
  (inspection commands take --json for scripts and --db like serve)
  idem load    --target URL | --chaos --db URL  duplicate-heavy load, then verify exactly-once (idem load -h)
  idem healthcheck [--url URL]                 exit 0 when URL (default serve's /readyz) answers 2xx, else 1

Configuration (flags win over environment variables):
  --db    IDEM_DB    database: postgres://… or sqlite:PATH (default SQLite in ./idem-data/)
  --addr  IDEM_ADDR  listen address (default 127.0.0.1:8080)
  --admin-key IDEM_ADMIN_KEY  web console (/ui/) admin key (default none: console for loopback clients only)
  --metrics-addr IDEM_METRICS_ADDR  relay: answer /healthz, /readyz and /metrics there (default none)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, errUnhealthy) {
			os.Exit(1) // healthcheck said why on stderr
		}
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "idem:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
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
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// envDefault returns the environment variable's value, or def when unset.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
