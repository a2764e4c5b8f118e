package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/idemhq/idem/internal/cli"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/internal/money"
	"github.com/idemhq/idem/ledger"
)

const ledgerUsage = `Usage:
  idem ledger balance [--tenant T] [--as-of TIME] [--json] [--db URL]
                      [--currency-exponents CODE=N,…] ACCOUNT
  idem ledger verify  [--json] [--db URL]

balance shows an account's debits, credits and balance as the ledger
believed them at --as-of (default now): RFC 3339 such as
2026-11-29T14:02:00Z, or without a zone (2026-11-29T14:02) for UTC. It
shows them in major units by the currency's ISO 4217 exponent
(--currency-exponents for other codes) with the stored integer beside
them; --json gives the integers. verify recomputes the whole ledger from
its entries and exits non-zero when any invariant is broken.
`

func ledgerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, ledgerUsage)
		return cli.Usagef("ledger", "ledger: want the subcommand balance or verify")
	}
	switch args[0] {
	case "balance":
		return ledgerBalance(ctx, args[1:], stdout, stderr)
	case "verify":
		return ledgerVerify(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprint(stderr, ledgerUsage)
		return cli.Usagef("ledger", "ledger: unknown subcommand %q", args[0])
	}
}

func ledgerBalance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, common := inspectFlags("ledger balance", stderr)
	asOfText := fs.String("as-of", "", "the moment: RFC 3339 such as 2026-11-29T14:02:00Z, or without a zone for UTC (default now)")
	exponents := fs.String("currency-exponents", "", "CODE=N,… minor-unit exponents of currencies beyond ISO 4217 (env IDEM_CURRENCY_EXPONENTS)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprint(stderr, ledgerUsage)
		return cli.Usagef("ledger balance", "ledger balance: want exactly one ACCOUNT, got %d arguments", len(pos))
	}
	var asOf *time.Time // nil: now
	if *asOfText != "" {
		t, err := inspect.ParseMoment(*asOfText)
		if err != nil {
			return cli.Usagef("ledger balance", "--as-of %q: %w", *asOfText, err)
		}
		asOf = &t
	}
	cur, err := currencies(*exponents, common.configFile)
	if err != nil {
		return err
	}
	// Not read-only: a balance as of a recent moment waits for the
	// account's writers still committing, in a read-write transaction that
	// writes nothing and is rolled back (docs/ledger.md). It still never
	// creates or migrates a database.
	d, err := openDB(ctx, common.db, common.configFile, false)
	if err != nil {
		return err
	}
	defer d.Close()
	l, err := ledger.New(d, ledger.Config{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	b, err := inspect.AccountBalance(ctx, d, l, common.tenant, pos[0], asOf)
	if errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("ledger balance: tenant %q has no account %q", common.tenant, pos[0])
	}
	if err != nil {
		return err
	}
	if common.json {
		return inspect.WriteJSON(stdout, b)
	}
	return inspect.WriteBalance(stdout, b, cur)
}

// currencies reads the currency exponents as serve does: the flag, else
// IDEM_CURRENCY_EXPONENTS, else the configuration file's.
func currencies(exponents, configFile string) (*money.Currencies, error) {
	var args []string
	if exponents != "" {
		args = append(args, "--currency-exponents", exponents)
	}
	if configFile != "" {
		args = append(args, "--config", configFile)
	}
	cfg, err := config.Load("inspect", args, os.Getenv, "currency-exponents")
	if err != nil {
		return nil, err
	}
	return money.New(cfg.CurrencyExponents)
}

// errLedgerBroken is verify's answer when an invariant is broken; the
// report on stdout says which.
var errLedgerBroken = errors.New("ledger verify: the ledger violates its invariants")

func ledgerVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, common := inspectFlags("ledger verify", stderr)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return cli.Usagef("ledger verify", "ledger verify: unexpected argument %q", pos[0])
	}
	d, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer d.Close()
	// No timeout: verify reads the whole ledger once, which takes as long
	// as the ledger is big; Ctrl-C stops it.
	report, err := inspect.NewVerifyReport(inspect.Verify(ctx, d))
	if err != nil {
		return err
	}
	if common.json {
		err = inspect.WriteJSON(stdout, report)
	} else {
		err = inspect.WriteVerify(stdout, report)
	}
	if err != nil {
		return err
	}
	if !report.OK {
		return errLedgerBroken
	}
	return nil
}
