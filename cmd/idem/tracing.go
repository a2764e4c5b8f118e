package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// tracingFlushTimeout bounds the export of the spans still buffered when
// the process stops.
const tracingFlushTimeout = 5 * time.Second

// setupTracing installs an OpenTelemetry SDK as the global TracerProvider
// when the standard variables ask for OTLP: OTEL_TRACES_EXPORTER=otlp, or
// an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with OTEL_TRACES_EXPORTER unset.
// The SDK reads the rest (sampler, endpoint, headers, batching, resource
// attributes) from its own OTEL_* variables; service.name defaults to
// "idem". Otherwise the global provider is the API's no-op provider
// (trace/noop), whose spans allocate nothing of their own: the API's
// default, a delegate kept for an SDK installed later, makes one for
// every span idem's packages start.
// shutdown flushes the buffered spans, bounded by tracingFlushTimeout.
func setupTracing(ctx context.Context, getenv func(string) string, log *slog.Logger) (shutdown func(), err error) {
	noop := func() {}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
		return noop, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	if exporter == "" && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		exporter = "otlp"
	}
	switch exporter {
	case "", "none":
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
		return noop, nil
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER %q: idem exports traces with otlp, or none", exporter)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: idem exports OTLP over HTTP (http/protobuf) only", protocol)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the default name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "idem")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log.Info("idem tracing", "exporter", "otlp")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("idem tracing: flush on shutdown", "err", err)
		}
	}, nil
}
