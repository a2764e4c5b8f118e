package server

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemhq/idem/internal/tracing"
)

var tracer = otel.GetTracerProvider().Tracer(tracing.Module + "/internal/server")

// startSpan begins the request's server span, named by its route pattern
// ("POST /v1/transfers"), a child of the client's trace when the request
// carries a W3C traceparent. With tracing off (the global provider is the
// API's no-op) the span records nothing, and a client's traceparent still
// reaches the outbox rows through the request's context.
func startSpan(r *http.Request) (*http.Request, trace.Span) {
	ctx := r.Context()
	if r.Header.Get(tracing.HeaderParent) != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	// With the no-op provider (serve without an exporter) and no
	// recording span in ctx, the no-op tracer would return ctx's own span
	// in a context of its own: the same answer without a context and a
	// request made per request.
	if _, off := otel.GetTracerProvider().(tracenoop.TracerProvider); off {
		if span := trace.SpanFromContext(ctx); !span.IsRecording() {
			if ctx != r.Context() {
				r = r.WithContext(ctx)
			}
			return r, span
		}
	}
	name := r.Pattern
	if name == "" || name == "/" {
		name = r.Method // semantic conventions: no route, the method alone
	}
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.request.method", r.Method),
			attribute.String("url.path", r.URL.Path))
		if _, route, ok := strings.Cut(r.Pattern, " "); ok {
			span.SetAttributes(attribute.String("http.route", route))
		}
	}
	return r.WithContext(ctx), span
}

// endSpan records the status code; a 5xx marks the span failed (a 4xx is
// the client's, not the server's, error).
func endSpan(span trace.Span, status int) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End()
}
