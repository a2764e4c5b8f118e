package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/cli"
	"github.com/idemhq/idem/internal/storage"
)

// migrate applies the pending migrations, or with --print writes their SQL
// (for teams that review DDL before it runs) and with --dry-run lists them;
// neither of those changes the database.
func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("migrate")
	db := fs.String("db", envDefault("IDEM_DB", ""), "database URL (env IDEM_DB; default SQLite in ./idem-data/)")
	print := fs.Bool("print", false, "write the pending migrations' SQL to stdout and apply nothing")
	dryRun := fs.Bool("dry-run", false, "list the pending migrations and apply nothing")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("migrate", "migrate: unexpected argument %q", fs.Arg(0))
	}
	if *print || *dryRun {
		return review(ctx, *db, *print, stdout)
	}
	d, err := storage.Open(ctx, *db)
	if err != nil {
		return err
	}
	defer d.Close()
	// Say what is about to run: on PostgreSQL a migration on busy tables
	// waits up to a minute for requests to let go of them, and a command
	// silent for that long looks hung.
	pending, err := d.PendingMigrations(ctx)
	if err != nil {
		return err
	}
	if n := len(pending); n > 0 {
		names := fileName(pending[0])
		if n > 1 {
			names += " … " + fileName(pending[n-1])
		}
		wait := ""
		if d.Dialect() == "postgres" {
			wait = "; each waits up to a minute for requests to free its tables"
		}
		fmt.Fprintf(stderr, "applying %d pending migration(s) to %s (%s)%s\n", n, d.Dialect(), names, wait)
	}
	if err := d.Migrate(ctx); err != nil {
		return err
	}
	st, err := d.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrated %s: version %d of %d\n", d.Dialect(), st.Applied, st.Latest)
	return nil
}

// fileName is a migration as its file is named: 007_ledger_foreign_keys.
// review writes what idem migrate would apply (--dry-run: a list;
// --print: their SQL) and changes nothing: not even a SQLite file is
// created where there is none (storage.OpenReview).
func review(ctx context.Context, dbURL string, printSQL bool, stdout io.Writer) error {
	d, exists, err := storage.OpenReview(ctx, dbURL)
	if err != nil {
		return err
	}
	defer d.Close()
	st, err := d.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	pending, err := d.PendingMigrations(ctx)
	if err != nil {
		return err
	}
	if printSQL {
		for _, m := range pending {
			fmt.Fprintf(stdout, "-- migration %s (%s; compatible from %d)\n%s\n",
				fileName(m), txMode(m.NoTransaction, d.Dialect()), m.CompatibleFrom, strings.TrimRight(m.SQL, "\n"))
		}
		return nil
	}
	fmt.Fprintf(stdout, "%s at version %d of %d: %d pending\n", d.Dialect(), st.Applied, st.Latest, len(pending))
	if !exists {
		fmt.Fprintln(stdout, "  (no database there yet: idem migrate or idem serve creates it)")
	}
	for _, m := range pending {
		fmt.Fprintf(stdout, "  %s (%s; binaries of migration %d or later run on it)\n",
			fileName(m), txMode(m.NoTransaction, d.Dialect()), m.CompatibleFrom)
	}
	if st.TooNew() {
		return st.Err()
	}
	return nil
}

func fileName(m driver.Migration) string {
	return fmt.Sprintf("%03d_%s", m.Version, m.Name)
}

func txMode(noTx bool, dialect string) string {
	if noTx && dialect == "postgres" {
		return "statements run outside a transaction"
	}
	return "one transaction"
}
