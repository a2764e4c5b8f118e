package inspect

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/idemhq/idem/internal/cli"
)

// OutboxUsage is `idem outbox`'s help.
const OutboxUsage = `Usage:
  idem outbox stats  [--json] [--db URL]            backlog: pending, oldest pending age, dead letters
  idem outbox list   --dead [--limit N] [--json] [--db URL]   dead letters, oldest first
  idem outbox redrive [--db URL] ID                 make a dead letter pending again (published ~5s later)
`

// OpenOutbox opens the database named by --db and --config (both may be
// empty: IDEM_DB, the file, the default) and returns the outbox's view of it
// and a func that closes it.
type OpenOutbox func(ctx context.Context, db, configFile string) (OutboxView, func(), error)

// RunOutbox is `idem outbox stats|list --dead|redrive ID`: args are those
// after "outbox". The command in cmd/idem passes an open that builds the
// outbox package's view on the database.
func RunOutbox(ctx context.Context, args []string, open OpenOutbox, now time.Time, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, OutboxUsage)
		return cli.Usagef("outbox", "outbox: want the subcommand stats, list or redrive")
	}
	fs := cli.NewFlagSet("outbox " + args[0])
	asJSON := fs.Bool("json", false, "write JSON for scripts instead of a table")
	dead := fs.Bool("dead", false, "list dead letters (the only list there is today; required so that a later list of pending messages is not a surprise)")
	limit := fs.Int("limit", 100, fmt.Sprintf("at most this many dead letters (1..%d)", MaxDeadLetters))
	db := fs.String("db", "", "database: postgres://… or sqlite:PATH (env IDEM_DB; default SQLite in ./idem-data/)")
	configFile := fs.String("config", "", "YAML configuration file (env IDEM_CONFIG)")
	var pos []string
	rest := args[1:]
	for {
		if err := cli.Parse(fs, rest); err != nil {
			return err
		}
		if rest = fs.Args(); len(rest) == 0 {
			break
		}
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	// Check the arguments before touching the database.
	switch {
	case args[0] == "stats" && len(pos) != 0:
		return cli.Usagef("outbox stats", "outbox stats: unexpected argument %q", pos[0])
	case args[0] == "list" && (!*dead || len(pos) != 0):
		fmt.Fprint(stderr, OutboxUsage)
		return cli.Usagef("outbox list", "outbox list: want --dead and no arguments")
	case args[0] == "list" && (*limit < 1 || *limit > MaxDeadLetters):
		return cli.Usagef("outbox list", "outbox list: --limit %d is outside 1..%d", *limit, MaxDeadLetters)
	case args[0] == "redrive" && len(pos) != 1:
		fmt.Fprint(stderr, OutboxUsage)
		return cli.Usagef("outbox redrive", "outbox redrive: want exactly one message ID, got %d arguments", len(pos))
	case args[0] != "stats" && args[0] != "list" && args[0] != "redrive":
		fmt.Fprint(stderr, OutboxUsage)
		return cli.Usagef("outbox", "outbox: unknown subcommand %q", args[0])
	}
	view, closeView, err := open(ctx, *db, *configFile)
	if err != nil {
		return err
	}
	defer closeView()
	switch args[0] {
	case "stats":
		s, err := view.Stats(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return WriteJSON(stdout, s)
		}
		return WriteOutboxStats(stdout, s, now)
	case "list":
		ds, err := view.ListDead(ctx, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			if ds == nil {
				ds = []DeadLetter{}
			}
			return WriteJSON(stdout, ds)
		}
		return WriteDeadLetters(stdout, ds)
	default: // redrive
		if err := view.Redrive(ctx, pos[0]); err != nil {
			return fmt.Errorf("outbox redrive %s: %w", pos[0], err)
		}
		_, err := fmt.Fprintf(stdout, "message %s is pending again; the relay will publish it\n", pos[0])
		return err
	}
}
