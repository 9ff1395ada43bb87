package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"

	"github.com/felixge/httpsnoop"
	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/telemetry"
)

// TraceIDHeader is the response header that carries a request's trace id.
const TraceIDHeader = "Orderly-Trace-Id"

// TraceIDFromContext returns the trace id that the server gave the request (the trace id
// of ctx, telemetry.TraceIDOf), "" if none.
func TraceIDFromContext(ctx context.Context) string { return telemetry.TraceIDOf(ctx) }

// traceMiddleware runs each request in an OpenTelemetry server span (otelhttp; W3C
// traceparent/tracestate extracted with telemetry.Propagator, whatever the global
// propagator), named "<method> <route pattern>" once routed, and gives the request a trace
// id: the span's, which continues a valid incoming traceparent; when tracing is off and no
// traceparent came, 16 random bytes in lower-case hex. The id is in the request's context
// (TraceIDFromContext: the audit trail's trace_id and the logs' trace_id) and in the
// Orderly-Trace-Id response header.
func (s *Server) traceMiddleware(next http.Handler) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := telemetry.TraceID(r.Context())
		if id == "" {
			id = newTraceID()
		}
		w.Header().Set(TraceIDHeader, id)
		next.ServeHTTP(w, r.WithContext(telemetry.WithTraceID(r.Context(), id)))
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			trace.SpanFromContext(r.Context()).SetName(r.Method + " " + rc.RoutePattern())
		}
	})
	opts := []otelhttp.Option{otelhttp.WithPropagators(telemetry.Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method })}
	if s.tracer != nil { // else otelhttp's default, the global provider
		opts = append(opts, otelhttp.WithTracerProvider(s.tracer))
	}
	return otelhttp.NewHandler(inner, "http", opts...)
}

// metricsMiddleware counts each answer in Config.RequestMetrics by method, route pattern
// and status, and observes its duration. The route is a pattern of the router, or
// "unmatched" for a path no route has: made-up paths cannot grow the series without bound.
func (s *Server) metricsMiddleware(next http.Handler) http.Handler {
	if s.requestMetrics == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := httpsnoop.CaptureMetrics(next, w, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		s.requestMetrics.HTTPRequests.WithLabelValues(r.Method, route, strconv.Itoa(m.Code)).Inc()
		s.requestMetrics.HTTPRequestDuration.WithLabelValues(r.Method, route).Observe(m.Duration.Seconds())
	})
}

// newTraceID returns 16 random bytes in hex, the shape of a W3C trace-id.
func newTraceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// recoverMiddleware turns a panic in a handler into a logged 500 problem, so that no input
// can take the server down or leave the client without an answer. http.ErrAbortHandler is
// passed on: it is the way to abort a response on purpose.
func (s *Server) recoverMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &responseWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			s.logger.ErrorContext(r.Context(), "http handler panicked",
				"method", r.Method, "path", r.URL.Path, "trace_id", TraceIDFromContext(r.Context()),
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !rw.wroteHeader {
				s.writeProblem(rw, r, orderly.EINTERNAL, internalDetail)
			}
		}()
		next.ServeHTTP(rw, r)
	})
}

// deadlineMiddleware gives each request a context deadline RequestTimeout from now. Every
// store call takes the request's context, so a lock wait or a busy database cannot hold a
// request past it: the store answers EUNAVAILABLE, which writeError answers 503 with
// Retry-After.
func (s *Server) deadlineMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// queryMiddleware refuses a query string that is malformed (a bad escape, a ";") or names
// a parameter twice: r.URL.Query() would drop the first and keep one of the second
// silently, so "?after=4&after=1" would read a position the client did not mean. 422
// invalid-input; no route takes a parameter twice.
func (s *Server) queryMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			s.writeError(w, r, invalidf("query: malformed: %v", err))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(q)) {
			if n := len(q[k]); n > 1 {
				s.writeError(w, r, invalidf("query: parameter %.64q is given %d times; give it once", k, n))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// responseWriter records whether the response was started.
type responseWriter struct {
	http.ResponseWriter
	wroteHeader bool
}

// WriteHeader implements http.ResponseWriter.
func (w *responseWriter) WriteHeader(status int) {
	if status >= 200 { // 1xx responses are informational; the real one is still to come
		w.wroteHeader = true
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (w *responseWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
