package server

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/internal/drivertest"
)

// BenchmarkFirstArrivalStages is BenchmarkServerFirstArrival at 16 clients
// with every span recorded, and reports where a first arrival's wall time
// goes, in µs a request on average (docs/architecture.md, "Where a first
// arrival's time goes"):
//
//   - handler: the server span's start to idem.Do's (the tenant, the
//     body's reading, decoding and fingerprint);
//   - to-batch: idem.Do's start to its batch's, less its time queued (the
//     read of a stored answer, the Batcher's admission, a join);
//   - queued: its idem.queue span, when it waited for a batch;
//   - begin: its batch's start to its first idem.claim (the tenant gate,
//     a connection from the pool);
//   - claim, ledger, outbox: its batch's idem.claim (BEGIN and the
//     claims, one round trip), ledger.Apply and outbox.Enqueue spans;
//   - between: the rest of the batch before its last such span ended;
//   - commit: the batch's last span's end to the batch's end (the writes
//     that wait for COMMIT's pipeline, the outcomes' statement, COMMIT);
//   - answer: its batch's end to idem.Do's (the hand-back) and idem.Do's
//     end to the server span's (the response written).
//
// The spans cost CPU of their own: the total is above an untraced run's.
func BenchmarkFirstArrivalStages(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			// The process's one recording provider (the server's tracer
			// delegates to the first provider set).
			exp := traceSpans(b)
			ts := newBenchServerWith(b, dialect, otel.GetTracerProvider())
			var seq atomic.Int64
			b.SetParallelism(8) // 16 clients on 2 cores
			exp.Reset()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchPost(b, ts.URL+"/v1/transfers", fmt.Sprint("stage-", seq.Add(1)), benchTransfer)
				}
			})
			b.StopTimer()
			stages, n := firstArrivalStages(exp.GetSpans())
			if n == 0 {
				b.Fatal("no first arrival's spans recorded")
			}
			for _, s := range stages {
				b.ReportMetric(float64(s.total.Microseconds())/float64(n), s.name+"-µs")
			}
		})
	}
}

type stage struct {
	name  string
	total time.Duration
}

// firstArrivalStages sums the stages of every request whose idem.Do ran
// in a batch, and returns them with the number of requests.
func firstArrivalStages(spans tracetest.SpanStubs) ([]stage, int) {
	byID := map[trace.SpanID]tracetest.SpanStub{}
	children := map[trace.SpanID][]tracetest.SpanStub{}
	batchOf := map[trace.SpanID]tracetest.SpanStub{} // idem.Do → its batch
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		if s.Name == "idem.batch" {
			for _, l := range s.Links {
				batchOf[l.SpanContext.SpanID()] = s
			}
		}
	}
	names := []string{"handler", "to-batch", "queued", "begin", "claim", "ledger", "outbox", "between", "commit", "answer"}
	sums := make([]time.Duration, len(names))
	n := 0
	for _, do := range spans {
		req, ok := byID[do.Parent.SpanID()]
		if do.Name != "idem.Do" || !ok || req.SpanKind != trace.SpanKindServer {
			continue
		}
		batch, ok := batchOf[do.SpanContext.SpanID()]
		if !ok {
			continue
		}
		var queued time.Duration
		for _, c := range children[do.SpanContext.SpanID()] {
			if c.Name == "idem.queue" {
				queued += c.EndTime.Sub(c.StartTime)
			}
		}
		within := map[string]time.Duration{}
		var firstClaim, lastEnd time.Time
		var walk func(id trace.SpanID)
		walk = func(id trace.SpanID) {
			for _, c := range children[id] {
				switch {
				case c.Name == "idem.claim", strings.HasPrefix(c.Name, "ledger."), c.Name == "outbox.Enqueue":
					within[c.Name] += c.EndTime.Sub(c.StartTime)
					if c.Name == "idem.claim" && (firstClaim.IsZero() || c.StartTime.Before(firstClaim)) {
						firstClaim = c.StartTime
					}
					if c.EndTime.After(lastEnd) {
						lastEnd = c.EndTime
					}
				default:
					walk(c.SpanContext.SpanID())
				}
			}
		}
		walk(batch.SpanContext.SpanID())
		if firstClaim.IsZero() {
			continue
		}
		begin := firstClaim.Sub(batch.StartTime)
		commit := batch.EndTime.Sub(lastEnd)
		claim, ledger, outbox := within["idem.claim"], within["ledger.Apply"], within["outbox.Enqueue"]
		parts := []time.Duration{
			do.StartTime.Sub(req.StartTime),
			batch.StartTime.Sub(do.StartTime) - queued,
			queued,
			begin,
			claim,
			ledger,
			outbox,
			batch.EndTime.Sub(batch.StartTime) - begin - claim - ledger - outbox - commit,
			commit,
			do.EndTime.Sub(batch.EndTime) + req.EndTime.Sub(do.EndTime),
		}
		for j, d := range parts {
			sums[j] += d
		}
		n++
	}
	out := make([]stage, len(names))
	for j := range names {
		out[j] = stage{names[j], sums[j]}
	}
	return out, n
}
