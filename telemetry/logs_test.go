package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/orderlyhq/orderly/telemetry"
)

// TestLogHandlerAddsTraceID: a line logged under a request's trace id, or under a span,
// carries trace_id; one that names its own trace_id keeps it, once; one without either has none.
func TestLogHandlerAddsTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	spanCtx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled}))
	log.InfoContext(telemetry.WithTraceID(context.Background(), "req-trace"), "request")
	log.InfoContext(spanCtx, "span")
	log.InfoContext(telemetry.WithTraceID(context.Background(), "req-trace"), "explicit", "trace_id", "own")
	log.InfoContext(context.Background(), "none")
	want := []string{"req-trace", "4bf92f3577b34da6a3ce929d0e0e4736", "own", ""}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %s", len(lines), len(want), buf.String())
	}
	for i, line := range lines {
		if n := strings.Count(line, `"trace_id"`); n > 1 {
			t.Errorf("line %d has trace_id %d times: %s", i, n, line)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatal(err)
		}
		if got, _ := v["trace_id"].(string); got != want[i] || v["component"] != "test" {
			t.Errorf("line %d: trace_id %q, component %v; want %q, test: %s", i, got, v["component"], want[i], line)
		}
	}
}
