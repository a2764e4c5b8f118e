package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/cli"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/internal/storage"
)

const keysUsage = `Usage:
  idem keys get [--tenant T] [--operation OP] [--json] [--db URL] KEY
  idem keys rotate [--check] [--batch N] [--encryption-key-file PATH] [--db URL]

get shows what idem stored for an idempotency key: status, first seen,
expiry, request fingerprint and the stored answer every duplicate receives.
Without --operation it lists every operation of the tenant that holds the
key (operations are the method and route, such as "POST /v1/transfers").

rotate re-wraps the tenants' data keys under the newest master key of the
encryption key file (idem keys rotate --help).
`

// inspectTimeout bounds one inspection query: an operator's question should
// answer in seconds or say the database is not answering.
const inspectTimeout = 30 * time.Second

func keys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "rotate" {
		return keysRotate(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "get" {
		fmt.Fprint(stderr, keysUsage)
		return cli.Usagef("keys", "keys: want the subcommand get or rotate")
	}
	fs, common := inspectFlags("keys get", stderr)
	operation := fs.String("operation", "", "the operation, such as \"POST /v1/transfers\" (default: every operation that holds the key)")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprint(stderr, keysUsage)
		return cli.Usagef("keys get", "keys get: want exactly one KEY, got %d arguments", len(pos))
	}
	d, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	now := time.Now().UTC()
	recs, err := inspect.Keys(ctx, d, now, common.tenant, *operation, pos[0])
	if err != nil {
		return err
	}
	if common.json {
		if recs == nil {
			recs = []inspect.KeyRecord{}
		}
		return inspect.WriteJSON(stdout, recs)
	}
	return inspect.WriteKeys(stdout, common.tenant, pos[0], recs, now)
}

// inspectCommon holds the flags every inspection command takes.
type inspectCommon struct {
	tenant     string
	json       bool
	db         string
	configFile string
}

func inspectFlags(name string, stderr io.Writer) (*flag.FlagSet, *inspectCommon) {
	c := &inspectCommon{}
	fs := cli.NewFlagSet(name)
	fs.StringVar(&c.tenant, "tenant", idem.DefaultTenant, "the tenant (the one an API key maps to; \"default\" without API keys)")
	fs.BoolVar(&c.json, "json", false, "write JSON for scripts instead of a table")
	fs.StringVar(&c.db, "db", "", "database: postgres://… or sqlite:PATH (env IDEM_DB; default SQLite in ./idem-data/)")
	fs.StringVar(&c.configFile, "config", "", "YAML configuration file (env IDEM_CONFIG)")
	return fs, c
}

// open opens, read-only, the database serve uses: --db, else IDEM_DB, else
// the configuration file's db, else the embedded default.
func (c *inspectCommon) open(ctx context.Context) (driver.Driver, error) {
	return openDB(ctx, c.db, c.configFile, true)
}

// openDB opens the existing database named by a --db value and a --config
// file, each of which may be empty, with IDEM_DB and IDEM_CONFIG read as
// serve reads them. It never creates a database or migrates one: a command
// pointed at the wrong place says so instead of answering from an empty
// database (storage.OpenExisting).
func openDB(ctx context.Context, db, configFile string, readOnly bool) (driver.Driver, error) {
	d, _, err := openDBConfig(ctx, db, configFile, readOnly)
	return d, err
}

// openDBConfig is openDB with the configuration it loaded.
func openDBConfig(ctx context.Context, db, configFile string, readOnly bool) (driver.Driver, config.Config, error) {
	var args []string
	if db != "" {
		args = append(args, "--db", db)
	}
	if configFile != "" {
		args = append(args, "--config", configFile)
	}
	cfg, err := config.Load("inspect", args, os.Getenv, "db")
	if err != nil {
		return nil, config.Config{}, err
	}
	d, err := storage.OpenExisting(ctx, cfg.DB, readOnly)
	return d, cfg, err
}

// parseInterspersed parses flags that may come after positional arguments
// (idem keys get KEY --tenant acme), returning the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := cli.Parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
