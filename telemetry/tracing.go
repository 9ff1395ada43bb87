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

// TracerOf returns orderly's tracer from tp; nil tp means the global provider
// (otel.GetTracerProvider), which is a no-op until the program installs one.
func TracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// TracerFrom returns orderly's tracer from the provider of the span in ctx: a span started
// under a request's or a close batch's span goes to the provider that span came from (the
// engine's, see engine.Config.TracerProvider). Without a recording span in ctx it is a
// no-op tracer, so that spans cost nothing while tracing is off.
func TracerFrom(ctx context.Context) trace.Tracer {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(TracerName)
}

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

// NewTracerProviderFromEnv returns, when the OTEL_* variables ask for it
// (TracingEnabledByEnv), a tracer provider exporting spans over OTLP/HTTP (otlptracehttp
// reads OTEL_EXPORTER_OTLP_* itself: endpoint, headers, timeout, compression; the SDK reads
// OTEL_TRACES_SAMPLER and OTEL_BSP_*), with the resource of OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES (service.name defaults to "orderly"), and its shutdown, which
// flushes and stops it. It installs nothing globally: an embedding program keeps its own
// global provider. Off, it returns nil and a no-op shutdown. Errors: the exporter or the
// resource could not be built from the variables (e.g. a malformed endpoint).
func NewTracerProviderFromEnv(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if !TracingEnabledByEnv(os.Getenv) {
		return nil, noop, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, noop, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("orderly")),
		resource.Environment(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, noop, fmt.Errorf("telemetry: trace resource: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, nil
}
