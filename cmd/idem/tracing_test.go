package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Without an exporter the global provider is the no-op one, whose spans
// allocate nothing; a bad exporter name is refused.
func TestSetupTracingWithoutExporter(t *testing.T) {
	saved := otel.GetTracerProvider()
	defer otel.SetTracerProvider(saved)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, env := range []map[string]string{{}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_SDK_DISABLED": "true"}} {
		otel.SetTracerProvider(saved)
		shutdown, err := setupTracing(context.Background(), func(k string) string { return env[k] }, log)
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		shutdown()
		if _, ok := otel.GetTracerProvider().(tracenoop.TracerProvider); !ok {
			t.Fatalf("%v: the global provider is %T, want the no-op provider", env, otel.GetTracerProvider())
		}
		ctx := context.Background()
		if n := testing.AllocsPerRun(100, func() {
			_, span := otel.Tracer("idem").Start(ctx, "x")
			span.End()
		}); n > 1 {
			t.Fatalf("%v: a span costs %v allocations, want at most the context's one", env, n)
		}
	}
	if _, err := setupTracing(context.Background(), func(k string) string {
		return map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}[k]
	}, log); err == nil {
		t.Fatal("an unknown exporter was accepted")
	}
}
