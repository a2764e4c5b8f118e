package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/idemhq/idem/internal/storage"
)

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", envDefault("IDEM_DB", ""), "database URL (env IDEM_DB; default SQLite in ./idem-data/)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	d, err := storage.Open(ctx, *db)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		return err
	}
	applied, latest, err := d.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrated %s: version %d of %d\n", d.Dialect(), applied, latest)
	return nil
}
