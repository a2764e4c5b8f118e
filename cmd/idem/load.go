package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/load"
	"github.com/idemhq/idem/cmd/idem/internal/load/chaos"
	loadrun "github.com/idemhq/idem/cmd/idem/internal/load/run"
	"github.com/idemhq/idem/cmd/idem/internal/load/verify"
	"github.com/idemhq/idem/internal/cli"
)

const loadUsage = `Usage:
  idem load   --target URL [flags]        duplicate-heavy load, then verify exactly-once
  idem load   --chaos --db URL [flags]    the same against servers it runs and SIGKILLs
              [--chaos-db-restart CMD] [--chaos-nats]   also restart the database, NATS nodes
              [--chaos-failover CMD]                  also fail the database over
  idem load verify --target URL --journal FILE [--json]   verify a recorded run again

Every flag also reads IDEM_LOAD_<FLAG> (--kill-every: IDEM_LOAD_KILL_EVERY);
--target, --api-key, --db and --nats read IDEM_TARGET, IDEM_API_KEY, IDEM_DB
and IDEM_NATS. Flags win. See docs/load.md.

Flags:
`

// loadFlags binds the flags of load and load verify, each defaulting to its
// environment variable.
type loadFlags struct {
	fs     *flag.FlagSet
	getenv func(string) string
	err    error
}

func (l *loadFlags) env(name string) string {
	switch name {
	case "target", "api-key", "db", "nats":
		return "IDEM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	}
	return "IDEM_LOAD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func (l *loadFlags) str(name, def, help string) *string {
	if v := l.getenv(l.env(name)); v != "" {
		def = v
	}
	return l.fs.String(name, def, fmt.Sprintf("%s (env %s)", help, l.env(name)))
}

// given reports whether the user set the flag, on the command line or in
// its environment variable.
func (l *loadFlags) given(name string) bool {
	set := l.getenv(l.env(name)) != ""
	l.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func (l *loadFlags) int(name string, def int, help string) *int {
	if v := l.getenv(l.env(name)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil && l.err == nil {
			l.err = fmt.Errorf("%s: %q is not an integer", l.env(name), v)
		}
		def = n
	}
	return l.fs.Int(name, def, fmt.Sprintf("%s (env %s)", help, l.env(name)))
}

func (l *loadFlags) float(name string, def float64, help string) *float64 {
	if v := l.getenv(l.env(name)); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil && l.err == nil {
			l.err = fmt.Errorf("%s: %q is not a number", l.env(name), v)
		}
		def = f
	}
	return l.fs.Float64(name, def, fmt.Sprintf("%s (env %s)", help, l.env(name)))
}

func (l *loadFlags) dur(name string, def time.Duration, help string) *time.Duration {
	if v := l.getenv(l.env(name)); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil && l.err == nil {
			l.err = fmt.Errorf("%s: %q is not a duration such as 3s", l.env(name), v)
		}
		def = d
	}
	return l.fs.Duration(name, def, fmt.Sprintf("%s (env %s)", help, l.env(name)))
}

func (l *loadFlags) bool(name string, def bool, help string) *bool {
	if v := l.getenv(l.env(name)); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil && l.err == nil {
			l.err = fmt.Errorf("%s: %q is not true or false", l.env(name), v)
		}
		def = b
	}
	return l.fs.Bool(name, def, fmt.Sprintf("%s (env %s)", help, l.env(name)))
}

// loadCmd is `idem load` and `idem load verify`.
func loadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verifyOnly := len(args) > 0 && args[0] == "verify"
	if verifyOnly {
		args = args[1:]
	}
	l := &loadFlags{fs: cli.NewFlagSetUsage("load", loadUsage), getenv: os.Getenv}
	def := loadrun.Defaults()
	var (
		target      = l.str("target", "", "base URL(s) of the service, comma-separated")
		apiKey      = l.str("api-key", "", "API key sent as Authorization: Bearer")
		journal     = l.str("journal", "", "write the run's journal here (verify: read it)")
		jsonOut     = l.bool("json", false, "print one JSON object on stdout instead of the table")
		checkEvents = l.bool("check-events", true, "check GET /v1/events: one event per applied operation (false for a service that runs no relay)")
		natsURL     = l.str("nats", "", "check stream IDEM at this NATS URL: one message per event")
		eventsWait  = l.dur("events-wait", def.EventsWait, "how long to wait for events to be published (0: look once)")
		probes      = l.int("probes", def.Probes, "acknowledged operations re-sent after the run to check their replay (0: none)")
		concurrency = l.int("concurrency", def.Concurrency, "clients sending at once")
		timeout     = l.dur("timeout", def.Timeout, "bound on one HTTP exchange")
		retries     = l.int("retries", def.Retries, "retries of one copy after a transport error, 409, 425, 429, 502, 503 or 504 (0: none)")

		accounts   = l.int("accounts", def.Accounts, "accounts the run creates")
		operations = l.int("operations", def.Operations, "unique transfers, reversals, webhook deliveries, holds, posts and voids; the run ends at the first of --operations and --duration (not bounded when --duration is given without it)")
		duration   = l.dur("duration", def.Duration, "stop sending new operations after this long; given without --operations, the run sends for this long")
		duplicates = l.float("duplicates", def.Duplicates, "share of requests that are extra copies (0..0.9)")
		burst      = l.int("burst", def.Burst, "most copies of one operation sent at the same instant")
		rate       = l.float("rate", def.Rate, "requests per second (0: as fast as the clients go)")
		settle     = l.dur("settle", def.Settle, "how long to retry unanswered operations after the run (0: not at all)")
		refused    = l.float("refused", def.RefusedShare, "share of transfers built to be refused (currency mismatch; 0: none)")
		seed       = l.int("seed", 0, "seed of the run's choices (0: from the clock)")
		progress   = l.bool("progress", true, "report progress on stderr: each phase's rate and the time left")
		expectLoss = l.bool("expect-loss", false, "count acknowledged operations the service lost (asynchronous replication's failover) as acknowledged_lost, not as violations")

		whEndpoint = l.str("webhook-endpoint", "", "also send Standard Webhooks deliveries to POST /v1/webhooks/NAME (needs --webhook-secret)")
		whSecret   = l.str("webhook-secret", "", "the endpoint's Standard Webhooks secret (whsec_…); the tool signs with it")
		whShare    = l.float("webhook-share", def.WebhookShare, "share of the main phase's operations that are webhook deliveries (0..1)")

		holdShare   = l.float("hold-share", def.HoldShare, "share of the main phase's operations that are holds and their posts and voids (0..1; 0: none)")
		holdTimeout = l.dur("hold-timeout", def.HoldTimeout, "every hold's timeout, whole seconds (1s..1h)")
		holdPeriod  = l.dur("hold-expiry-period", def.HoldExpiryPeriod, "the servers' serve --hold-expiry-period: a hold must be released within its timeout plus this and --hold-grace (--chaos passes it to its servers)")
		holdGrace   = l.dur("hold-grace", def.HoldGrace, "allowance beyond --hold-expiry-period for the release's own transaction (0..10m)")

		chaosRun  = l.bool("chaos", false, "run and SIGKILL the servers: needs --db")
		serveBin  = l.str("serve-bin", "", "idem executable the chaos servers run (default: this one)")
		db        = l.str("db", "", "database of the chaos servers (postgres://…)")
		servers   = l.int("servers", 2, "chaos servers running at once")
		killEvery = l.dur("kill-every", 3*time.Second, "mean interval between SIGKILLs (jittered ±50%)")
		killCount = l.int("chaos-kills", 0, "stop after this many server kills, and end the main phase once the last killed server serves again (--duration still bounds it; 0: no limit)")
		serveCfg  = l.str("serve-config", "", "configuration file the chaos servers read (serve --config): the webhook endpoints")
		dbRestart = l.str("chaos-db-restart", "", "shell command (sh -c) that restarts the database, run at random intervals, e.g. 'scripts/pg restart DIR'")
		dbEvery   = l.dur("chaos-db-every", 20*time.Second, "mean interval between database restarts (jittered ±50%)")
		dbTimeout = l.dur("chaos-db-timeout", 60*time.Second, "bound on one run of the database restart or failover command")
		failover  = l.str("chaos-failover", "", "shell command (sh -c) that fails the database over to a standby, run at random intervals of its own, e.g. 'patronictl failover --force'")
		failEvery = l.dur("chaos-failover-every", time.Minute, "mean interval between failovers (jittered ±50%)")
		failCount = l.int("chaos-failovers", 0, "stop after this many failovers, and end the main phase then (--duration still bounds it; 0: no limit)")
		chaosNATS = l.bool("chaos-nats", false, "run a 3-node NATS cluster the servers publish to (3 replicas), shut a node down at random intervals, and check the stream")
		natsEvery = l.dur("chaos-nats-every", 10*time.Second, "mean interval between NATS node shutdowns (jittered ±50%)")
		natsDown  = l.dur("chaos-nats-down", 3*time.Second, "how long a NATS node stays down")
	)
	if l.err != nil {
		return l.err
	}
	if err := cli.Parse(l.fs, args); err != nil {
		return err
	}
	if l.fs.NArg() > 0 {
		return cli.Usagef("load", "load: unexpected argument %q", l.fs.Arg(0))
	}
	// The flags carry the defaults (def, which is Explicit): a flag given
	// as 0 means 0.
	cfg := def
	cfg.APIKey, cfg.Accounts, cfg.Operations, cfg.Duration = *apiKey, *accounts, *operations, *duration
	// --duration alone reads as the run's length: --operations' default
	// would end a run of more than a few seconds first.
	if l.given("duration") && !l.given("operations") {
		cfg.Operations = loadrun.MaxOperations
	}
	cfg.Duplicates, cfg.Burst, cfg.Concurrency = *duplicates, *burst, *concurrency
	cfg.Rate, cfg.Retries, cfg.Timeout, cfg.Settle, cfg.RefusedShare = *rate, *retries, *timeout, *settle, *refused
	cfg.Seed, cfg.Probes, cfg.CheckEvents, cfg.NATS, cfg.EventsWait = int64(*seed), *probes, *checkEvents, *natsURL, *eventsWait
	cfg.WebhookEndpoint, cfg.WebhookSecret, cfg.WebhookShare = *whEndpoint, *whSecret, *whShare
	cfg.ExpectLoss = *expectLoss
	cfg.HoldShare, cfg.HoldTimeout, cfg.HoldExpiryPeriod, cfg.HoldGrace = *holdShare, *holdTimeout, *holdPeriod, *holdGrace
	for _, t := range strings.Split(*target, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Targets = append(cfg.Targets, strings.TrimRight(t, "/"))
		}
	}
	if *progress {
		// Progress and the chaos supervisor write from their own
		// goroutines: one lock keeps their lines whole.
		cfg.Progress = &lockedWriter{w: stderr}
		cfg.ProgressBar = isTerminal(stderr)
	}

	var (
		report *loadrun.Report
		err    error
	)
	switch {
	case verifyOnly:
		if *journal == "" {
			return errors.New("load verify: --journal FILE is required")
		}
		j, rerr := loadrun.ReadJournal(*journal)
		if rerr != nil {
			return rerr
		}
		if len(cfg.Targets) == 0 {
			cfg.Targets = j.Targets
		}
		report, err = verify.Journal(ctx, cfg, j)
	default:
		var sup *chaos.Supervisor
		if *serveCfg != "" && !*chaosRun {
			return errors.New("load: --serve-config configures the servers --chaos runs; a --target service reads its own --config")
		}
		if *killCount != 0 && !*chaosRun {
			return errors.New("load: --chaos-kills counts the server kills of --chaos: add --chaos")
		}
		if *dbRestart != "" && !*chaosRun {
			return errors.New("load: --chaos-db-restart restarts the database under the servers --chaos runs: add --chaos")
		}
		if *failCount != 0 && *failover == "" {
			return errors.New("load: --chaos-failovers counts the failovers of --chaos-failover: add it")
		}
		if *failover != "" && !*chaosRun {
			return errors.New("load: --chaos-failover fails over the database under the servers --chaos runs: add --chaos")
		}
		if *chaosNATS && !*chaosRun {
			return errors.New("load: --chaos-nats runs the NATS cluster of the servers --chaos runs: add --chaos")
		}
		if *chaosNATS && cfg.NATS != "" {
			return errors.New("load: --chaos-nats checks the stream of its own cluster: drop --nats")
		}
		if *chaosRun {
			if len(cfg.Targets) > 0 {
				return errors.New("load: --chaos runs its own servers; drop --target")
			}
			// The servers' expiry worker runs at the period the verifier
			// allows a hold past its timeout.
			args := []string{"--hold-expiry-period", cfg.HoldExpiryPeriod.String()}
			if *serveCfg != "" {
				// Absolute: each server runs in a directory of its own.
				p, aerr := filepath.Abs(*serveCfg)
				if aerr != nil {
					return fmt.Errorf("load: --serve-config: %w", aerr)
				}
				args = append(args, "--config", p)
			}
			sup, err = chaos.Start(ctx, chaos.Config{Bin: *serveBin, DB: *db, Servers: *servers,
				KillEvery: *killEvery, Kills: *killCount, Log: cfg.Progress, Seed: int64(*seed), Args: args,
				DBRestart: *dbRestart, DBEvery: *dbEvery, DBTimeout: *dbTimeout,
				Failover: *failover, FailoverEvery: *failEvery, Failovers: *failCount,
				NATS: *chaosNATS, NATSEvery: *natsEvery, NATSDown: *natsDown})
			if err != nil {
				return err
			}
			defer sup.Close()
			cfg.Pool = sup.Pool()
			cfg.Faults = sup.Faults
			if *failCount > 0 || *killCount > 0 {
				// The main phase ends once every fault counted has had
				// its count, each finished: a failover completed, a
				// killed server serving again.
				kills, failovers := *killCount, *failCount
				cfg.Enough = func() bool { return sup.Restarted() >= kills && sup.Failovers() >= failovers }
			}
			cfg.Targets = nil
			if *chaosNATS {
				// The verifier checks the cluster's stream: one message
				// per event, none missing, none doubled.
				cfg.NATS = sup.NATSURL()
				cfg.CheckEvents = true
			}
		}
		report, err = runLoad(ctx, cfg, sup, *journal)
	}
	if report != nil {
		if *jsonOut {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(report); jerr != nil {
				return jerr
			}
		} else {
			report.WriteTable(stdout)
		}
	}
	if err != nil {
		return err
	}
	if report.Violations > 0 {
		return fmt.Errorf("%w: %d", load.ErrViolations, report.Violations)
	}
	return nil
}

// runLoad runs the load (with the chaos supervisor killing servers while
// it sends, and calm during verification) and writes the journal.
func runLoad(ctx context.Context, cfg loadrun.Config, sup *chaos.Supervisor, journal string) (*loadrun.Report, error) {
	if sup != nil {
		sup.Run(ctx)
		cfg.BeforeVerify = sup.Calm
	}
	report, j, err := load.Run(ctx, cfg)
	if sup != nil && report != nil {
		report.Restarts = sup.Kills()
		report.DBRestarts = sup.DBRestarts()
		report.Failovers = sup.Failovers()
		report.NATSKills = sup.NATSKills()
	}
	if j != nil && journal != "" {
		if werr := j.WriteFile(journal); werr != nil && err == nil {
			err = werr
		}
	}
	return report, err
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// isTerminal reports whether w is a character device (a terminal), where a
// progress bar redrawn in place reads well.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
