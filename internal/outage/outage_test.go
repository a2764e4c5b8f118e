package outage

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A minute and a half of an outage failing every second, then a success,
// then a second outage: one line when each begins, one for the minute
// between, one when it ends, each a single line.
func TestOutageLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	l := New("database", slog.New(slog.NewTextHandler(&buf, nil)), func() time.Time { return now })
	err := errors.New("failed to connect:\n\t127.0.0.1:5432: dial error: connection refused")
	l.OK()
	for range 90 {
		l.Fail("request", err)
		now = now.Add(time.Second)
	}
	l.OK()
	l.OK()
	l.Fail("relay cycle", err)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=WARN msg="database unavailable" what=request err="failed to connect: 127.0.0.1:5432: dial error: connection refused"`,
		`level=WARN msg="database still unavailable" for=1m0s failures=60 what=request`,
		`level=INFO msg="database available again" after=1m30s failures=90`,
		`level=WARN msg="database unavailable" what="relay cycle"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d %q, want it to hold %q", i, lines[i], w)
		}
	}
}
