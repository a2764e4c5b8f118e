package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
)

// newBenchServer is the service on a fresh database of the dialect, behind
// a real loopback HTTP server.
func newBenchServer(b *testing.B, dialect string) *httptest.Server {
	// As serve without a trace exporter (cmd/idem/tracing.go).
	return newBenchServerWith(b, dialect, tracenoop.NewTracerProvider())
}

// newBenchServerWith is newBenchServer with tp as the process's tracer
// provider while b runs.
func newBenchServerWith(b *testing.B, dialect string, tp trace.TracerProvider) *httptest.Server {
	b.Helper()
	cfg := config.Default()
	cfg.Relay = false // measured apart (outbox benchmarks)
	saved := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	b.Cleanup(func() { otel.SetTracerProvider(saved) })
	s, err := New(context.Background(), cfg, drivertest.Open(b, dialect), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	b.Cleanup(ts.Close)
	for _, id := range []string{"a", "b"} {
		benchPost(b, ts.URL+"/v1/accounts", "acct-"+id, fmt.Sprintf(`{"id":%q,"currency":"EUR"}`, id))
	}
	return ts
}

func benchPost(b *testing.B, url, key, body string) *http.Response {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
	return resp
}

const benchTransfer = `{"debit_account_id":"a","credit_account_id":"b","amount":100,"currency":"EUR"}`

// BenchmarkServerFirstArrival posts a new transfer per request.
func BenchmarkServerFirstArrival(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			ts := newBenchServer(b, dialect)
			var seq atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchPost(b, ts.URL+"/v1/transfers", fmt.Sprint("first-", seq.Add(1)), benchTransfer)
				}
			})
		})
	}
}

// BenchmarkServerReplay repeats one completed transfer.
func BenchmarkServerReplay(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			ts := newBenchServer(b, dialect)
			benchPost(b, ts.URL+"/v1/transfers", "replay", benchTransfer)
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if r := benchPost(b, ts.URL+"/v1/transfers", "replay", benchTransfer); r.Header.Get("Idempotent-Replayed") != "true" {
						b.Fatal("not a replay")
					}
				}
			})
		})
	}
}

// BenchmarkHandlerFirstArrival is BenchmarkServerFirstArrival without the
// network: the service's handler called in process, so that -benchmem
// counts idem's own allocations per first arrival, not net/http's.
func BenchmarkHandlerFirstArrival(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			ts := newBenchServer(b, dialect)
			h := ts.Config.Handler
			var seq atomic.Int64
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/transfers", strings.NewReader(benchTransfer))
					r.Header.Set("Idempotency-Key", fmt.Sprint("first-", seq.Add(1)))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != http.StatusCreated {
						b.Fatalf("POST /v1/transfers: %d %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}
