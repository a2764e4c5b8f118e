package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem/internal/money"
	"github.com/idemhq/idem/ledger"
)

// WriteJSON writes v as indented JSON, for scripts (--json).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// Time formats a time the way every table shows it: RFC 3339 in UTC with
// microseconds, the ledger's resolution, so it can be pasted into --as-of.
func Time(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

// WriteKeys writes key records as one block of fields per record, or a line
// saying there are none.
func WriteKeys(w io.Writer, tenant, key string, recs []KeyRecord, now time.Time) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintf(w, "no record of key %q in tenant %q (never seen, or deleted after it expired)\n", key, tenant)
		return err
	}
	tw := table(w)
	for i, r := range recs {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		state := "live"
		if r.Expired {
			state = "expired (a new request with this key would run again)"
		}
		fmt.Fprintf(tw, "tenant\t%s\n", r.Tenant)
		fmt.Fprintf(tw, "operation\t%s\n", r.Operation)
		fmt.Fprintf(tw, "key\t%s\n", r.Key)
		fmt.Fprintf(tw, "state\t%s\n", state)
		fmt.Fprintf(tw, "first seen\t%s (%s ago)\n", Time(r.FirstSeen), now.Sub(r.FirstSeen).Round(time.Second))
		fmt.Fprintf(tw, "expires\t%s\n", Time(r.ExpiresAt))
		fmt.Fprintf(tw, "fingerprint\t%s\n", r.Fingerprint)
		fmt.Fprintf(tw, "status\t%d\n", r.Status)
		body := r.BodyText()
		if len(body) > MaxBodyPreviewBytes {
			body = body[:MaxBodyPreviewBytes] + fmt.Sprintf("… (%d bytes; --json shows all)", len(body))
		}
		fmt.Fprintf(tw, "body\t%s\n", strings.TrimRight(body, "\n"))
	}
	return tw.Flush()
}

// WriteBalance writes an account's balance as believed at a moment, each
// amount in major units with the stored integer beside it ("12.50 EUR
// (1250)"), by the exponents of cur (nil: ISO 4217's).
func WriteBalance(w io.Writer, b Balance, cur *money.Currencies) error {
	tw := table(w)
	c := b.Account.Currency
	fmt.Fprintf(tw, "tenant\t%s\n", b.Tenant)
	fmt.Fprintf(tw, "account\t%s\n", b.Account.ID)
	fmt.Fprintf(tw, "currency\t%s\n", c)
	fmt.Fprintf(tw, "as of\t%s\n", Time(b.Believed.AsOf))
	fmt.Fprintf(tw, "debits posted\t%s\n", cur.Format(b.Believed.DebitsPosted, c))
	fmt.Fprintf(tw, "credits posted\t%s\n", cur.Format(b.Believed.CreditsPosted, c))
	fmt.Fprintf(tw, "balance\t%s\n", cur.Format(b.Believed.Balance, c))
	return tw.Flush()
}

// VerifyReport is `idem ledger verify --json`'s answer.
type VerifyReport struct {
	OK         bool     `json:"ok"`
	Violations []string `json:"violations"`
	// More counts violations found beyond those listed.
	More int `json:"more,omitempty"`
}

// NewVerifyReport turns Verify's result into a report; an error that is
// not a *ledger.VerifyError (the database failed) is returned as is.
func NewVerifyReport(err error) (VerifyReport, error) {
	if err == nil {
		return VerifyReport{OK: true, Violations: []string{}}, nil
	}
	var ve *ledger.VerifyError
	if !errors.As(err, &ve) {
		return VerifyReport{}, err
	}
	return VerifyReport{Violations: ve.Violations, More: ve.More}, nil
}

// WriteVerify writes a verify report for people.
func WriteVerify(w io.Writer, r VerifyReport) error {
	if r.OK {
		_, err := fmt.Fprintln(w, "ledger OK: every invariant holds")
		return err
	}
	fmt.Fprintf(w, "ledger BROKEN: %d violation(s)\n", len(r.Violations)+r.More)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  - %s\n", v)
	}
	if r.More > 0 {
		fmt.Fprintf(w, "  … and %d more\n", r.More)
	}
	return nil
}

// WriteOutboxStats writes the outbox's backlog.
func WriteOutboxStats(w io.Writer, s OutboxStats, now time.Time) error {
	tw := table(w)
	fmt.Fprintf(tw, "pending\t%d\n", s.Pending)
	if s.OldestPendingAt.IsZero() {
		fmt.Fprintf(tw, "oldest pending\t-\n")
	} else {
		fmt.Fprintf(tw, "oldest pending\t%s (%s old)\n", Time(s.OldestPendingAt), s.OldestAge(now).Round(time.Second))
	}
	fmt.Fprintf(tw, "dead letters\t%d\n", s.Dead)
	return tw.Flush()
}

// WriteDeadLetters writes dead letters as a table, one per line.
func WriteDeadLetters(w io.Writer, dead []DeadLetter) error {
	if len(dead) == 0 {
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tTENANT\tTYPE\tATTEMPTS\tDEAD AT\tLAST ERROR")
	for _, d := range dead {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.Tenant, d.Type, d.Attempts, Time(d.DeadAt), oneLine(d.LastError))
	}
	return tw.Flush()
}

// oneLine keeps a table row one line: an error text may hold newlines or
// tabs that would break the columns.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
