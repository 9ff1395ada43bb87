package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/orderlyhq/orderly"
)

// TraceIDHeader is the response header that carries a request's trace id.
const TraceIDHeader = "Orderly-Trace-Id"

// traceIDKey is the context key of the trace id.
type traceIDKey struct{}

// TraceIDFromContext returns the trace id that the server gave the request, "" if none.
func TraceIDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(traceIDKey{}).(string)
	return id
}

// traceMiddleware gives each request a trace id: the trace-id of a valid W3C traceparent
// header, else 16 random bytes in lower-case hex. It is in the request's context and in
// the Orderly-Trace-Id response header.
func (s *Server) traceMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := parseTraceparent(r.Header.Get("traceparent"))
		if !ok {
			id = newTraceID()
		}
		w.Header().Set(TraceIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), traceIDKey{}, id)))
	})
}

// parseTraceparent returns the trace-id of a W3C Trace Context traceparent header,
// "version-traceid-parentid-flags" with 2, 32, 16 and 2 lower-case hex digits. Version ff
// and all-zero ids are invalid; versions after 00 may append "-…" fields.
func parseTraceparent(h string) (traceID string, ok bool) {
	if len(h) < 55 || (len(h) > 55 && (h[:2] == "00" || h[55] != '-')) {
		return "", false
	}
	if h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return "", false
	}
	version, traceID, parentID, flags := h[:2], h[3:35], h[36:52], h[53:55]
	for _, f := range []string{version, traceID, parentID, flags} {
		if !isLowerHex(f) {
			return "", false
		}
	}
	if version == "ff" || isZeros(traceID) || isZeros(parentID) {
		return "", false
	}
	return traceID, true
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isZeros(s string) bool {
	for i := range len(s) {
		if s[i] != '0' {
			return false
		}
	}
	return true
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
