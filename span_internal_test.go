package idem

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// With the no-op TracerProvider a keeper's span makes nothing, and answers
// what the no-op tracer answers; a recording parent still gets the
// tracer's own child.
// Not parallel: AllocsPerRun counts the whole process's allocations.
func TestKeeperSpanNoop(t *testing.T) {
	tp := tracenoop.NewTracerProvider()
	k := &Keeper{tracer: tp.Tracer("t"), spansOff: true}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, s := k.span(ctx, "idem.Do")
		s.End()
	}); n != 0 {
		t.Errorf("a span with the no-op provider made %v allocations", n)
	}

	remote := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true}))
	for _, parent := range []context.Context{ctx, remote} {
		gotCtx, got := k.span(parent, "idem.Do")
		wantCtx, want := tp.Tracer("t").Start(parent, "idem.Do")
		if got.IsRecording() || !got.SpanContext().Equal(want.SpanContext()) ||
			!trace.SpanContextFromContext(gotCtx).Equal(trace.SpanContextFromContext(wantCtx)) {
			t.Errorf("span %v in %v; the no-op tracer's %v in %v", got.SpanContext(), trace.SpanContextFromContext(gotCtx),
				want.SpanContext(), trace.SpanContextFromContext(wantCtx))
		}
	}

	sdk := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	pctx, parent := sdk.Tracer("p").Start(ctx, "parent")
	defer parent.End()
	gotCtx, got := k.span(pctx, "idem.Do")
	if got.IsRecording() || trace.SpanFromContext(gotCtx).IsRecording() || !got.SpanContext().Equal(parent.SpanContext()) {
		t.Error("under a recording parent the span is not the no-op tracer's child")
	}
}
