package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of orderly's spans.
const TracerName = "github.com/orderlyhq/orderly"

// Propagator is the W3C Trace Context propagator (traceparent, tracestate) used on every
// boundary: incoming HTTP requests, outgoing HTTP calls (gateways, webhooks), NATS message
// headers and the trace_parent column of outbox messages. It is used explicitly rather
// than through otel's global propagator, so that propagation works even when an embedder
// never configured one.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Tracer returns orderly's tracer from the global tracer provider (otel.GetTracerProvider):
// a no-op until a provider is installed (SetupTracing, or the embedder's own), so spans
// cost nothing while tracing is off.
func Tracer() trace.Tracer { return otel.Tracer(TracerName) }

// TraceParent returns the W3C traceparent header value ("00-<32 hex trace id>-<16 hex span
// id>-<2 hex flags>") of the span in ctx, or "" when ctx holds no valid span context.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx carrying the remote span context of a traceparent value (as
// TraceParent returns), so that spans started from it continue that trace. An empty or
// malformed value returns ctx unchanged.
func WithTraceParent(ctx context.Context, traceParent string) context.Context {
	if traceParent == "" {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceParent})
}

// SpanContextOf returns the span context of a traceparent value; invalid when the value is
// empty or malformed.
func SpanContextOf(traceParent string) trace.SpanContext {
	return trace.SpanContextFromContext(WithTraceParent(context.Background(), traceParent))
}

// TraceID returns the trace id of the span in ctx in lower-case hex (32 digits), "" when
// there is none. It is the trace id of the audit trail and of log lines.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// TracingEnabledByEnv reports whether the standard OpenTelemetry variables ask for trace
// export: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with OTEL_TRACES_EXPORTER unset; never when
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Source: the OpenTelemetry SDK
// environment variable specification.
func TracingEnabledByEnv(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))) {
	case "otlp":
		return true
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default: // "none", or an exporter this build does not ship
		return false
	}
}

// SetupTracing installs, when the OTEL_* variables ask for it (TracingEnabledByEnv), a
// global tracer provider exporting spans over OTLP/HTTP (otlptracehttp reads
// OTEL_EXPORTER_OTLP_* itself: endpoint, headers, timeout, compression; the SDK reads
// OTEL_TRACES_SAMPLER and OTEL_BSP_*), with the resource of OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES (service.name defaults to "orderly"). It returns a shutdown
// function that flushes and stops the provider, and whether tracing is on. Off, it installs
// nothing: spans are the global no-op's. Errors: the exporter or the resource could not be
// built from the variables (e.g. a malformed endpoint).
func SetupTracing(ctx context.Context) (shutdown func(context.Context) error, enabled bool, err error) {
	noop := func(context.Context) error { return nil }
	if !TracingEnabledByEnv(os.Getenv) {
		return noop, false, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return noop, false, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("orderly")),
		resource.Environment(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, false, fmt.Errorf("telemetry: trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, true, nil
}
