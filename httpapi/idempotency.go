package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/idempotency"
)

// IdempotentReplayedHeader is set ("true") on the answer to a request that was sent again
// with the Idempotency-Key of an earlier one: the answer is the earlier request's.
const IdempotentReplayedHeader = "Idempotent-Replayed"

// keyedInService are the POST routes whose service keeps the Idempotency-Key in the
// request's own transaction and answers a replay itself (200 with the resource as it is
// now): the middleware leaves them to it. The signed provider callbacks are deduplicated by
// the provider's event id instead.
var keyedInService = map[string]bool{
	"/v1/orders": true, "/v1/orders/{id}/refunds": true, "/v1/groups": true, "/v1/groups/{id}/join": true,
	"/v1/wallets/{user_id}/credits": true,
	"/v1/payments/callback":         true, "/v1/channels/{channel}/webhook": true,
}

// maxKeptAnswer bounds the body of an answer that is kept, in bytes; a larger one is not.
const maxKeptAnswer = 1 << 20

// keptTimeout bounds the write of a claim's answer, which runs after the request's deadline.
const keptTimeout = 5 * time.Second

// idempotent makes a POST to route pattern sent with an Idempotency-Key header idempotent
// (package idempotency) unless the route is in keyedInService: the first request runs and
// its answer is kept; the same request sent again gets that answer with
// Idempotent-Replayed: true; another request under the key gets 422
// idempotency-key-reused, and one sent while the first runs 409 idempotency-key-in-flight
// (Retry-After: 1). The key's scope is the method and path. An answer that changed nothing
// (see kept) is not kept. authMiddleware, which has routed the request, calls it.
func (s *Server) idempotent(pattern string, next http.Handler) http.Handler {
	if s.idempotency == nil || keyedInService[pattern] {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(IdempotencyKeyHeader)
		if key == "" || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		if err := validateIdempotencyKey(key); err != nil {
			s.writeError(w, r, err)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, s.maxBody+1))
		if err != nil {
			s.writeError(w, r, invalidf("request body could not be read: %v", err))
			return
		}
		if int64(len(body)) > s.maxBody {
			s.writeProblem(w, r, CodePayloadTooLarge, "request body is larger than the server accepts")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		claim, kept, err := s.idempotency.Begin(r.Context(), r.Method+" "+r.URL.Path, key,
			idempotency.RequestHash(r.Method, r.URL.RequestURI(), body))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if kept != nil {
			replay(w, kept)
			return
		}
		rec := &recorder{ResponseWriter: w}
		defer func() { // also when next panics: the recover middleware answers 500, not kept
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), keptTimeout)
			defer cancel()
			var err error
			if rec.kept() {
				err = claim.Complete(ctx, &idempotency.Answer{Status: rec.status, ContentType: w.Header().Get("Content-Type"),
					Location: w.Header().Get("Location"), Body: rec.body.Bytes()})
			} else {
				err = claim.Release(ctx)
			}
			if err != nil {
				s.logger.WarnContext(r.Context(), "idempotency key's answer not recorded; its claim lapses after the lease",
					"method", r.Method, "path", r.URL.Path, "trace_id", TraceIDFromContext(r.Context()), "error", err)
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

// replayed returns the status of a create on a route in keyedInService: 201, or 200 with
// Idempotent-Replayed: true when its service answered an earlier request's key (replay).
func replayed(w http.ResponseWriter, replay bool) int {
	if !replay {
		return http.StatusCreated
	}
	w.Header().Set(IdempotentReplayedHeader, "true")
	return http.StatusOK
}

// replay writes a kept answer.
func replay(w http.ResponseWriter, a *idempotency.Answer) {
	h := w.Header()
	if a.ContentType != "" {
		h.Set("Content-Type", a.ContentType)
	}
	if a.Location != "" {
		h.Set("Location", a.Location)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(IdempotentReplayedHeader, "true")
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body) //nolint:gosec // G705: the body is this server's own answer, written before with its Content-Type
}

// notKept are the problem codes of answers that changed nothing and may differ when the
// request is sent again: refused input, a concurrent change, a busy or unready server.
var notKept = map[string]bool{
	orderly.EINVALID: true, orderly.ECONFLICT: true, orderly.EUNAVAILABLE: true, orderly.EINTERNAL: true,
	orderly.EIDEMPOTENCYINFLIGHT: true, CodePayloadTooLarge: true, CodeUnsupportedMediaType: true, CodeNotReady: true,
}

// recorder passes an answer through and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
	large  bool
}

// kept reports whether the recorded answer is kept: one was written, it is not a 5xx, its
// body fits maxKeptAnswer, and if it is a problem its code is not in notKept.
func (w *recorder) kept() bool {
	if w.status == 0 || w.status >= http.StatusInternalServerError || w.large {
		return false
	}
	var p Problem
	if w.status < http.StatusBadRequest || json.Unmarshal(w.body.Bytes(), &p) != nil {
		return true
	}
	return !notKept[strings.TrimPrefix(p.Type, ProblemTypeBase)]
}

// WriteHeader implements http.ResponseWriter.
func (w *recorder) WriteHeader(status int) {
	if w.status == 0 && status >= 200 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len()+len(b) > maxKeptAnswer {
		w.large = true
	} else if !w.large {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
