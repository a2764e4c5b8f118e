package inspect

import (
	"errors"
	"time"
)

// ErrMoment is ParseMoment's refusal; its text says what is accepted.
var ErrMoment = errors.New("want a time such as 2026-11-29T14:02:00Z (RFC 3339; without a zone it is UTC)")

// momentLayouts are the forms ParseMoment accepts. Go's parser also takes a
// fraction of a second after the seconds of any of them.
var momentLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05", "2006-01-02T15:04",
	"2006-01-02 15:04:05", "2006-01-02 15:04",
}

// ParseMoment reads the moment an operator asks about, the one rule for
// `idem ledger balance --as-of` and the console's as_of: RFC 3339 with a
// zone (2026-11-29T14:02:00Z, 2026-11-29T15:02:00+01:00), or the same
// without a zone, seconds and fraction optional and a space allowed for
// the T (2026-11-29T14:02, what a browser's date-time field sends), taken
// as UTC, the zone every time idem prints is in. The result is in UTC.
// The HTTP API's as_of is RFC 3339 only and does not use it.
func ParseMoment(s string) (time.Time, error) {
	for _, layout := range momentLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, ErrMoment
}
