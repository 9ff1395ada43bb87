package telemetry

import (
	"context"
	"log/slog"
)

// traceIDKey is the context key of WithTraceID.
type traceIDKey struct{}

// WithTraceID returns ctx carrying id as the trace id of what is done under it: the HTTP
// server's id of a request (its span's trace id, or a random one when tracing is off).
func WithTraceID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, traceIDKey{}, id)
}

// TraceIDOf returns the trace id of ctx: the one WithTraceID set, else that of its span
// (TraceID), else "".
func TraceIDOf(ctx context.Context) string {
	if id, _ := ctx.Value(traceIDKey{}).(string); id != "" {
		return id
	}
	return TraceID(ctx)
}

// LogKeyTraceID is the attribute of a log line that carries its trace id.
const LogKeyTraceID = "trace_id"

// NewLogHandler returns h adding the attribute trace_id to every record logged with a
// context that has a trace id (TraceIDOf) and that does not carry one already: a line
// logged while serving a request, closing an order or delivering a message can be found
// from the trace, and the other way round.
func NewLogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h}
}

type logHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := TraceIDOf(ctx); id != "" && !hasAttr(r, LogKeyTraceID) {
		r = r.Clone()
		r.AddAttrs(slog.String(LogKeyTraceID, id))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h logHandler) WithGroup(name string) slog.Handler { return logHandler{h.Handler.WithGroup(name)} }

func hasAttr(r slog.Record, key string) (found bool) {
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == key
		return !found
	})
	return found
}
