package run

import (
	"slices"
	"time"
)

// maxTimeline bounds the attempts a run keeps for the fault figures
// (24 bytes each): a run longer than that measures its first faults only.
const maxTimeline = 2_000_000

// mark is one attempt of a Send: when it began and ended, and whether it
// failed for want of the service (a transport error, 429 or 5xx). An
// attempt answered 409 (a twin in flight) is neither failed nor served
// and is not kept.
type mark struct {
	start, end time.Time
	failed     bool
}

// FaultWindow is one fault a run went through: its kind and when the
// command that caused it ran.
type FaultWindow struct {
	Kind       string
	Start, End time.Time
}

// Fault is what one fault cost the clients, measured on the run's own
// requests (every attempt, retries included). With FailedRequests 0 the
// fault failed no request and the other figures are 0.
type Fault struct {
	// Kind is the fault: "failover" or "db_restart".
	Kind string `json:"kind"`
	// AtSeconds is when its command started, from the run's start.
	AtSeconds float64 `json:"at_seconds"`
	// CommandMS is how long the command ran.
	CommandMS float64 `json:"command_ms"`
	// FirstFailureMS is from the command's start to the end of the first
	// attempt that failed after it.
	FirstFailureMS float64 `json:"first_failure_ms"`
	// RecoveredMS is from the command's start to the end of the first
	// attempt that succeeded having begun after that first failure.
	RecoveredMS float64 `json:"recovered_ms"`
	// Recovered is false when no attempt succeeded before the next fault
	// or the run's end.
	Recovered bool `json:"recovered"`
	// FailedRequests counts the attempts that failed from the command's
	// start to the recovery.
	FailedRequests int `json:"failed_requests"`
}

// mark records one attempt for the fault figures.
func (s *Stats) mark(start, end time.Time, failed bool) {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if len(s.timeline) < maxTimeline {
		s.timeline = append(s.timeline, mark{start: start, end: end, failed: failed})
	}
}

// Figures measures each fault on the attempts recorded: the window of a
// fault runs from its command's start to the next fault's start (or end,
// the run's end). runStart is what AtSeconds counts from.
func (s *Stats) Figures(faults []FaultWindow, runStart, end time.Time) []Fault {
	s.tmu.Lock()
	marks := slices.Clone(s.timeline)
	s.tmu.Unlock()
	slices.SortFunc(marks, func(a, b mark) int { return a.end.Compare(b.end) })
	faults = slices.Clone(faults)
	slices.SortFunc(faults, func(a, b FaultWindow) int { return a.Start.Compare(b.Start) })
	out := make([]Fault, 0, len(faults))
	for i, f := range faults {
		until := end
		if i+1 < len(faults) {
			until = faults[i+1].Start
		}
		fig := Fault{Kind: f.Kind, AtSeconds: f.Start.Sub(runStart).Seconds(), CommandMS: ms(f.End.Sub(f.Start))}
		var first *mark
		for j := range marks {
			m := &marks[j]
			if m.end.Before(f.Start) {
				continue
			}
			if !m.end.Before(until) {
				break
			}
			switch {
			case first == nil && m.failed:
				first = m
				fig.FirstFailureMS = ms(m.end.Sub(f.Start))
				fig.FailedRequests++
			case first == nil:
			case m.failed:
				fig.FailedRequests++
			case !m.start.Before(first.end):
				fig.RecoveredMS, fig.Recovered = ms(m.end.Sub(f.Start)), true
			}
			if fig.Recovered {
				break
			}
		}
		if first == nil {
			fig.Recovered = true
		}
		out = append(out, fig)
	}
	return out
}
