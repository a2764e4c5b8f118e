// Package outage logs a dependency's outages as an operator wants to read
// them: one line when it goes away, then at most one a minute with the
// failures counted since, and one when it comes back; never a line per
// failed request or per retry.
package outage

import (
	"log/slog"
	"strings"
	"sync"
	"time"
)

// ReportEvery is the most often a continuing outage is logged.
const ReportEvery = time.Minute

// Words are what a Log says of its dependency after its name: when it
// goes away, while it stays away, and when it is back.
type Words struct {
	Down, Still, Up string
}

// unavailable is the words of a dependency that answers no longer.
var unavailable = Words{Down: " unavailable", Still: " still unavailable", Up: " available again"}

// Log tracks one dependency. Its methods are safe for concurrent use.
type Log struct {
	name  string // what is unavailable: "database", "broker"
	words Words
	log   *slog.Logger
	clock func() time.Time

	mu         sync.Mutex
	down       bool
	since      time.Time // when the outage began
	reportedAt time.Time // when it was last logged
	failures   int64     // since reportedAt
	total      int64     // since the outage began
}

// New returns a Log of the dependency name, writing to log; clock nil is
// time.Now.
func New(name string, log *slog.Logger, clock func() time.Time) *Log {
	return NewWords(name, unavailable, log, clock)
}

// NewWords is New for a dependency that fails otherwise than by going
// away (a database whose commits are not confirmed replicated): words say
// what its lines say after name.
func NewWords(name string, words Words, log *slog.Logger, clock func() time.Time) *Log {
	if clock == nil {
		clock = time.Now
	}
	return &Log{name: name, words: words, log: log, clock: clock}
}

// Down reports whether an outage is going on, and since when.
func (l *Log) Down() (since time.Time, down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since, l.down
}

// Fail records a failure caused by the dependency being unavailable. The
// first of an outage is logged (WARN, with err on one line); the following
// ones are counted and logged at most once every ReportEvery.
func (l *Log) Fail(what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	l.failures++
	l.total++
	switch {
	case !l.down:
		l.down, l.since, l.reportedAt, l.failures = true, now, now, 0
		l.log.Warn(l.name+l.words.Down, "what", what, "err", oneLine(err))
	case now.Sub(l.reportedAt) >= ReportEvery:
		l.log.Warn(l.name+l.words.Still, "for", now.Sub(l.since).Round(time.Second).String(),
			"failures", l.failures, "what", what, "err", oneLine(err))
		l.reportedAt, l.failures = now, 0
	}
}

// OK records a success: after an outage, one line says it is over.
func (l *Log) OK() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.down {
		return
	}
	now := l.clock()
	l.log.Info(l.name+l.words.Up, "after", now.Sub(l.since).Round(time.Second).String(), "failures", l.total)
	l.down, l.failures, l.total = false, 0, 0
}

// oneLine is err's message on one line: a log line per event, whatever
// the error's own layout (pgx lists connection attempts on lines of
// their own).
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
