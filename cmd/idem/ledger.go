package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/ledger"
)

const ledgerUsage = `Usage:
  idem ledger balance [--tenant T] [--as-of TIME] [--json] [--db URL] ACCOUNT
  idem ledger verify  [--json] [--db URL]

balance shows an account's debits, credits and balance as the ledger
believed them at --as-of (default now): RFC 3339 such as
2026-11-29T14:02:00Z, or without a zone (2026-11-29T14:02) for UTC.
verify recomputes the whole ledger from its entries and exits non-zero
when any invariant is broken.
`

func ledgerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, ledgerUsage)
		return errors.New("ledger: want the subcommand balance or verify")
	}
	switch args[0] {
	case "balance":
		return ledgerBalance(ctx, args[1:], stdout, stderr)
	case "verify":
		return ledgerVerify(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprint(stderr, ledgerUsage)
		return fmt.Errorf("ledger: unknown subcommand %q", args[0])
	}
}

func ledgerBalance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, common := inspectFlags("ledger balance", stderr)
	asOfText := fs.String("as-of", "", "the moment: RFC 3339 such as 2026-11-29T14:02:00Z, or without a zone for UTC (default now)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprint(stderr, ledgerUsage)
		return fmt.Errorf("ledger balance: want exactly one ACCOUNT, got %d arguments", len(pos))
	}
	var asOf time.Time
	if *asOfText != "" {
		if asOf, err = inspect.ParseMoment(*asOfText); err != nil {
			return fmt.Errorf("--as-of %q: %w", *asOfText, err)
		}
	}
	d, err := common.open(ctx)
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
	return inspect.WriteBalance(stdout, b)
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
		return fmt.Errorf("ledger verify: unexpected argument %q", pos[0])
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
