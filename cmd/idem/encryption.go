package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/cli"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/seal"
)

// openSealer builds the Sealer a serving process hands to what stores
// records at rest (the keeper's answers, the outbox and its relay, the
// inbox, the webhook intake; docs/operations.md, "Encryption at rest"). It
// returns nil without --encryption-key-file: records are stored as they
// are. It refuses a key file that lacks a master key some live data key
// of the database is wrapped under, naming the ids: every record of those
// tenants would fail to open, request after request.
func openSealer(ctx context.Context, cfg config.Config, store seal.Store, log *slog.Logger) (seal.Sealer, error) {
	if cfg.EncryptionKeyFile == "" {
		return nil, nil
	}
	src, err := seal.LoadKeyFile(cfg.EncryptionKeyFile)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.DBTimeout)
	defer cancel()
	if err := seal.CheckSource(ctx, store, src); err != nil {
		return nil, fmt.Errorf("refusing to start with encryption key file %s: %w", cfg.EncryptionKeyFile, err)
	}
	env, err := seal.New(store, src, seal.Config{})
	if err != nil {
		return nil, err
	}
	log.Info("idem encrypts at rest", "key_file", cfg.EncryptionKeyFile, "newest_key", src.Newest(),
		"keys", strings.Join(src.IDs(), ","), "forget_bound", seal.DefaultRecheck.String())
	return env, nil
}

// encryptionMode is how the start-up line names the encryption at rest.
func encryptionMode(s seal.Sealer) string {
	if s == nil {
		return "off"
	}
	return "on"
}

const keysRotateUsage = `Usage:
  idem keys rotate [--check] [--batch N] [--encryption-key-file PATH] [--db URL]

Re-wraps every tenant's data key under the newest master key of the key
file (its first line), in batches of one transaction each, showing
progress. It is resumable: run it again after an interruption and it
continues. Records are not rewritten and serving processes need no
restart. Afterwards the keys below the first line can be removed.

--check changes nothing: it exits 0 when no data key needs a master key
other than the newest, and 1 listing the key ids still in use otherwise.
`

// errRotationPending is keys rotate --check's answer when a data key is
// still wrapped under a master key other than the newest.
var errRotationPending = fmt.Errorf("keys rotate --check: data keys still need an old master key: run idem keys rotate")

func keysRotate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSetUsage("keys rotate", keysRotateUsage+"\nFlags:\n")
	check := fs.Bool("check", false, "change nothing: exit 0 when every data key is wrapped under the newest master key, 1 listing the others")
	batch := fs.Int("batch", 100, "data keys re-wrapped per transaction, 1..10000")
	db := fs.String("db", "", "database: postgres://… or sqlite:PATH (env IDEM_DB; default SQLite in ./idem-data/)")
	keyFile := fs.String("encryption-key-file", "", "file of master keys, the newest first (env IDEM_ENCRYPTION_KEY_FILE)")
	configFile := fs.String("config", "", "YAML configuration file (env IDEM_CONFIG)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("keys rotate", "keys rotate: unexpected argument %q", fs.Arg(0))
	}
	var cargs []string
	for _, f := range [][2]string{{"db", *db}, {"encryption-key-file", *keyFile}, {"config", *configFile}} {
		if f[1] != "" {
			cargs = append(cargs, "--"+f[0], f[1])
		}
	}
	cfg, err := config.Load("keys rotate", cargs, os.Getenv, "db", "encryption-key-file")
	if err != nil {
		return err
	}
	if cfg.EncryptionKeyFile == "" {
		return cli.Usagef("keys rotate", "keys rotate: --encryption-key-file (IDEM_ENCRYPTION_KEY_FILE, YAML encryption_key_file) is required: its first key is the one to rotate to")
	}
	src, err := seal.LoadKeyFile(cfg.EncryptionKeyFile)
	if err != nil {
		return err
	}
	d, err := openDB(ctx, *db, *configFile, *check)
	if err != nil {
		return err
	}
	defer d.Close()
	newest := src.Newest()
	if *check {
		return rotateCheck(ctx, d, newest, stdout)
	}
	if err := seal.CheckSource(ctx, d, src); err != nil {
		return fmt.Errorf("keys rotate: %w", err)
	}
	last := time.Now()
	n, err := seal.Rotate(ctx, d, src, seal.RotateConfig{Batch: *batch, Progress: func(done, total int64) {
		if time.Since(last) >= time.Second || done >= total {
			fmt.Fprintf(stdout, "re-wrapped %d of %d data keys\n", done, total)
			last = time.Now()
		}
	}})
	if err != nil {
		return fmt.Errorf("keys rotate: after %d data keys: %w (run it again to continue)", n, err)
	}
	fmt.Fprintf(stdout, "done: %d data keys re-wrapped under %q\n", n, newest)
	return rotateCheck(ctx, d, newest, stdout)
}

// rotateCheck says which master keys wrap live data keys, and fails when
// one is not the newest.
func rotateCheck(ctx context.Context, store seal.Store, newest string, stdout io.Writer) error {
	used, err := seal.MasterKeysInUse(ctx, store)
	if err != nil {
		return err
	}
	var old []string
	var atNewest int64
	for _, u := range used {
		if u.ID == newest {
			atNewest = u.DataKeys
			continue
		}
		old = append(old, fmt.Sprintf("%s (%d data keys)", u.ID, u.DataKeys))
	}
	if len(old) == 0 {
		fmt.Fprintf(stdout, "ok: every data key (%d) is wrapped under the newest master key %q; no other key is needed\n", atNewest, newest)
		return nil
	}
	fmt.Fprintf(stdout, "master keys other than the newest (%q) still wrap data keys: %s\n", newest, strings.Join(old, ", "))
	return errRotationPending
}

const tenantsUsage = `Usage:
  idem tenants forget [--db URL] TENANT

Destroys TENANT's data keys (crypto-shredding): its stored answers,
outbox payloads, inbox and intake bodies sealed so far can never be read
again, in this database or in backups taken from now on. Serving
processes stop opening them within 10s. Ledger rows (stored in plaintext),
copies already published to a broker, and backups taken before are not
covered. Records the tenant writes afterwards use a new data key.
`

func tenantsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "forget" {
		fmt.Fprint(stderr, tenantsUsage)
		return cli.Usagef("tenants", "tenants: want the subcommand forget")
	}
	fs := cli.NewFlagSetUsage("tenants forget", tenantsUsage+"\nFlags:\n")
	db := fs.String("db", "", "database: postgres://… or sqlite:PATH (env IDEM_DB; default SQLite in ./idem-data/)")
	configFile := fs.String("config", "", "YAML configuration file (env IDEM_CONFIG)")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprint(stderr, tenantsUsage)
		return cli.Usagef("tenants forget", "tenants forget: want exactly one TENANT, got %d arguments", len(pos))
	}
	tenant := pos[0]
	d, err := openDB(ctx, *db, *configFile, false)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	n, err := seal.Forget(ctx, d, tenant, time.Now())
	if err != nil {
		return fmt.Errorf("tenants forget: %w", err)
	}
	fmt.Fprintf(stdout, "forgot tenant %q: %d data keys destroyed; its sealed records are unreadable (serving processes within %s)\n",
		tenant, n, seal.DefaultRecheck)
	return nil
}
