package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkSpanOff is what one of idem's spans costs when the program set
// no TracerProvider: the global provider's no-op Start, IsRecording, End,
// and the trace context an outbox row would store (none).
func BenchmarkSpanOff(b *testing.B) {
	tracer := otel.GetTracerProvider().Tracer(Module)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sctx, span := tracer.Start(ctx, "idem.Do")
		if span.IsRecording() {
			b.Fatal("recording without a provider")
		}
		if p, _ := Format(sctx); p != "" {
			b.Fatal("a trace context without a span")
		}
		span.End()
	}
}

// BenchmarkFormatOff: the check Enqueue makes when ctx holds no span.
func BenchmarkFormatOff(b *testing.B) {
	ctx := trace.ContextWithSpan(context.Background(), trace.SpanFromContext(context.Background()))
	b.ReportAllocs()
	for b.Loop() {
		if p, _ := Format(ctx); p != "" {
			b.Fatal("a trace context without a span")
		}
	}
}
