package inspect_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/inspect"
)

// TestParseMoment is the one rule for `idem ledger balance --as-of` and the
// console's as_of: RFC 3339 with a zone, or without one for UTC.
func TestParseMoment(t *testing.T) {
	t.Parallel()
	at := func(sec, usec int) time.Time {
		return time.Date(2026, 11, 29, 14, 2, sec, usec*1000, time.UTC)
	}
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"2026-11-29T14:02:00Z", at(0, 0)},
		{"2026-11-29T15:02:00+01:00", at(0, 0)},
		{"2026-11-29T14:02:05.123456Z", at(5, 123456)},
		{"2026-11-29T14:02", at(0, 0)},
		{"2026-11-29T14:02:05", at(5, 0)},
		{"2026-11-29T14:02:05.123456", at(5, 123456)},
		{"2026-11-29 14:02", at(0, 0)},
		{"2026-11-29 14:02:05.5", at(5, 500000)},
	} {
		got, err := inspect.ParseMoment(c.in)
		if err != nil || !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("ParseMoment(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "14:02", "yesterday", "2026-11-29", "2026-11-29T14", "29/11/2026 14:02", "2026-11-29T14:02:00 CET"} {
		if got, err := inspect.ParseMoment(in); !errors.Is(err, inspect.ErrMoment) {
			t.Errorf("ParseMoment(%q) = %v, %v; want ErrMoment", in, got, err)
		}
	}
}
