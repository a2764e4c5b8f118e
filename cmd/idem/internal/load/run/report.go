package run

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Outcomes of one HTTP exchange, the rows of the latency table.
const (
	outcomeFirst       = "first"       // 2xx, done now
	outcomeReplayed    = "replayed"    // Idempotent-Replayed: true
	outcomeRefused     = "refused"     // 4xx final answer, not a replay
	outcomeInFlight    = "in_flight"   // 409: a twin still runs; retried
	outcomeUnavailable = "unavailable" // 429 or 5xx; retried
	outcomeError       = "error"       // timeout or connection error; retried
)

var outcomes = []string{outcomeFirst, outcomeReplayed, outcomeRefused, outcomeInFlight, outcomeUnavailable, outcomeError}

// Violation is one broken promise.
type Violation struct {
	// Check names the promise: replay_differs, acknowledged_lost,
	// applied_twice, …; docs/load.md lists them.
	Check  string `json:"check"`
	Key    string `json:"key,omitempty"`
	ID     string `json:"id,omitempty"`
	Detail string `json:"detail"`
}

// Latency is one outcome's latency percentiles.
type Latency struct {
	Count   int64   `json:"count"`
	P50MS   float64 `json:"p50_ms"`
	P99MS   float64 `json:"p99_ms"`
	MaxMS   float64 `json:"max_ms"`
	samples []time.Duration
}

// Report is a run's (or a verification's) summary. Violations is the count
// of every violation found; Details lists the first of them.
type Report struct {
	RunID          string       `json:"run_id"`
	Targets        []string     `json:"targets"`
	ElapsedSeconds float64      `json:"elapsed_seconds"`
	Operations     map[Kind]int `json:"operations"`
	Acknowledged   int          `json:"acknowledged"`
	Applied        int          `json:"applied"`
	Refused        int          `json:"refused"`
	Unresolved     int          `json:"unresolved"`
	Requests       int64        `json:"requests"`
	Duplicates     int64        `json:"duplicates_sent"`
	Replays        int64        `json:"replays_served"`
	Retries        int64        `json:"retries"`
	Probes         int          `json:"probes"`
	Restarts       int          `json:"restarts"`
	DBRestarts     int          `json:"db_restarts"`
	Failovers      int          `json:"db_failovers"`
	NATSKills      int          `json:"nats_node_kills"`
	EventsChecked  int          `json:"events_checked"`
	WebhookEvents  int          `json:"webhook_events"`
	// Holds counts the run's holds that exist by how the ledger left them
	// (posted, voided, expired, pending) and those a post and a void raced
	// for (raced).
	Holds      map[string]int     `json:"holds,omitempty"`
	Latency    map[string]Latency `json:"latency"`
	Violations int                `json:"violations"`
	Details    []Violation        `json:"violation_details"`

	// Lost counts the acknowledged operations the service no longer
	// holds as acknowledged: missing, or (with ExpectLoss) done again by a
	// later copy after being lost. The recovery point: 0 unless the
	// database lost commits (a failover of asynchronous replication).
	Lost int `json:"acknowledged_lost"`
	// LostKeys are the first of their Idempotency-Keys.
	LostKeys []string `json:"lost_keys,omitempty"`
	// Faults measures each database fault of a chaos run.
	Faults []Fault `json:"faults,omitempty"`
	// LoadSeconds is the time from the run's start to the end of its
	// settle phase (0 for a verification of a journal); VerifySeconds the
	// verification's.
	LoadSeconds   float64 `json:"load_seconds"`
	VerifySeconds float64 `json:"verify_seconds"`
}

// Stats counts what a run sends and receives. Safe for concurrent use.
type Stats struct {
	Requests, Duplicates, Replays, Retries atomic.Int64
	Done                                   atomic.Int64 // unique operations acknowledged
	Checked                                atomic.Int64 // operations the verifier has checked
	Listed                                 atomic.Int64 // rows the verifier has read by listing

	mu  sync.Mutex
	lat map[string]*Latency
	rnd *rand.Rand

	vmu        sync.Mutex
	violations int
	details    []Violation

	tmu      sync.Mutex
	timeline []mark // the attempts, for the fault figures

	lmu  sync.Mutex
	lost map[string]bool // the keys of the operations found lost
}

// MarkLost notes that the operation under key was acknowledged and lost.
func (s *Stats) MarkLost(key string) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.lost == nil {
		s.lost = map[string]bool{}
	}
	s.lost[key] = true
}

// Lost reports whether the operation under key was found lost.
func (s *Stats) Lost(key string) bool {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.lost[key]
}

// NewStats returns empty counters; seed drives the latency sampling.
func NewStats(seed uint64) *Stats {
	s := &Stats{lat: map[string]*Latency{}, rnd: rand.New(rand.NewPCG(seed, 7))}
	for _, o := range outcomes {
		s.lat[o] = &Latency{}
	}
	return s
}

// observe records one exchange's latency under its outcome, keeping a
// bounded reservoir sample.
func (s *Stats) observe(outcome string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lat[outcome]
	l.Count++
	if len(l.samples) < maxLatencySamples {
		l.samples = append(l.samples, d)
	} else if i := s.rnd.Int64N(l.Count); i < maxLatencySamples {
		l.samples[i] = d
	}
}

// Violate records a violation, in detail for the first maxDetails.
func (s *Stats) Violate(v Violation) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.violations++
	if len(s.details) < maxDetails {
		s.details = append(s.details, v)
	}
}

// Violations returns the violations recorded in detail.
func (s *Stats) Violations() []Violation {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	return slices.Clone(s.details)
}

// ViolationCount is how many violations were recorded.
func (s *Stats) ViolationCount() int {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	return s.violations
}

// Fill copies the counters and percentiles into r.
func (s *Stats) Fill(r *Report) {
	r.Requests, r.Duplicates = s.Requests.Load(), s.Duplicates.Load()
	r.Replays, r.Retries = s.Replays.Load(), s.Retries.Load()
	s.mu.Lock()
	r.Latency = map[string]Latency{}
	for name, l := range s.lat {
		if l.Count == 0 {
			continue
		}
		sorted := slices.Clone(l.samples)
		slices.Sort(sorted)
		r.Latency[name] = Latency{Count: l.Count, P50MS: ms(quantile(sorted, 0.50)),
			P99MS: ms(quantile(sorted, 0.99)), MaxMS: ms(sorted[len(sorted)-1])}
	}
	s.mu.Unlock()
	s.vmu.Lock()
	r.Violations, r.Details = s.violations, slices.Clone(s.details)
	s.vmu.Unlock()
	if r.Details == nil {
		r.Details = []Violation{}
	}
}

// rate is n operations in seconds, per second.
func rate(n int, seconds float64) string {
	return fmt.Sprintf("%.0f ops/s", float64(n)/seconds)
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteTable writes the human summary: counts, latency by outcome, and the
// violations found.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\n", r.RunID)
	kinds := make([]string, 0, len(r.Operations))
	total := 0
	for k, n := range r.Operations {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	fmt.Fprintf(tw, "elapsed\t%.1fs\n", r.ElapsedSeconds)
	if r.LoadSeconds > 0 {
		fmt.Fprintf(tw, "load\t%.1fs\t%s\n", r.LoadSeconds, rate(total, r.LoadSeconds))
	}
	if r.VerifySeconds > 0 {
		fmt.Fprintf(tw, "verify\t%.1fs\t%s\n", r.VerifySeconds, rate(total, r.VerifySeconds))
	}
	fmt.Fprintf(tw, "operations\t%d\t%v\n", total, kinds)
	fmt.Fprintf(tw, "acknowledged\t%d\tapplied %d, refused %d, unresolved %d\n", r.Acknowledged, r.Applied, r.Refused, r.Unresolved)
	fmt.Fprintf(tw, "requests\t%d\n", r.Requests)
	fmt.Fprintf(tw, "duplicates sent\t%d\n", r.Duplicates)
	fmt.Fprintf(tw, "replays served\t%d\n", r.Replays)
	fmt.Fprintf(tw, "retries\t%d\n", r.Retries)
	if r.Restarts > 0 {
		fmt.Fprintf(tw, "server kills\t%d\n", r.Restarts)
	}
	if r.DBRestarts > 0 {
		fmt.Fprintf(tw, "db restarts\t%d\n", r.DBRestarts)
	}
	if r.Failovers > 0 {
		fmt.Fprintf(tw, "db failovers\t%d\n", r.Failovers)
	}
	if r.NATSKills > 0 {
		fmt.Fprintf(tw, "nats node kills\t%d\n", r.NATSKills)
	}
	fmt.Fprintf(tw, "replay probes\t%d\n", r.Probes)
	if r.Lost > 0 {
		fmt.Fprintf(tw, "acknowledged lost\t%d\n", r.Lost)
	}
	if r.EventsChecked > 0 {
		fmt.Fprintf(tw, "events checked\t%d\n", r.EventsChecked)
	}
	if r.WebhookEvents > 0 {
		fmt.Fprintf(tw, "webhook events\t%d\n", r.WebhookEvents)
	}
	if len(r.Holds) > 0 {
		fmt.Fprintf(tw, "holds\tposted %d, voided %d, expired %d, pending %d; raced %d\n",
			r.Holds["posted"], r.Holds["voided"], r.Holds["expired"], r.Holds["pending"], r.Holds["raced"])
	}
	tw.Flush()
	if len(r.Latency) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "outcome\tcount\tp50 ms\tp99 ms\tmax ms\t")
		for _, o := range outcomes {
			if l, ok := r.Latency[o]; ok {
				fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t\n", o, l.Count, l.P50MS, l.P99MS, l.MaxMS)
			}
		}
		tw.Flush()
	}
	if len(r.Faults) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "fault\tat s\tcommand ms\tfirst failure ms\trecovered ms\tfailed requests\t")
		for _, f := range r.Faults {
			rec := fmt.Sprintf("%.0f", f.RecoveredMS)
			if !f.Recovered {
				rec = "not"
			}
			fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%s\t%d\t\n", f.Kind, f.AtSeconds, f.CommandMS, f.FirstFailureMS, rec, f.FailedRequests)
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "violations: %d\n", r.Violations)
	for i, v := range r.Details {
		if i == 20 {
			fmt.Fprintf(w, "  … %d more (see --json)\n", len(r.Details)-20)
			break
		}
		fmt.Fprintf(w, "  %s %s %s: %s\n", v.Check, v.Key, v.ID, v.Detail)
	}
}
