package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/orderlyhq/orderly"
)

// ProblemTypeBase is the prefix of every problem `type` URI; the rest is the error code,
// e.g. "https://orderly.dev/problems/out-of-stock".
const ProblemTypeBase = "https://orderly.dev/problems/"

// ProblemContentType is the media type of error responses (RFC 9457).
const ProblemContentType = "application/problem+json"

// Error codes of the HTTP layer itself, next to the domain codes of package orderly. Like
// those, they are stable and form the last segment of a problem `type` URI.
const (
	CodePayloadTooLarge      = "payload-too-large"      // the request body is over the limit (413)
	CodeUnsupportedMediaType = "unsupported-media-type" // the request body is not JSON (415)
	CodeRouteNotFound        = "route-not-found"        // no route has this path (404)
	CodeMethodNotAllowed     = "method-not-allowed"     // the path has no route for this method (405)
	CodeNotReady             = "not-ready"              // a readiness check failed (503)
)

// Problem is an RFC 9457 problem details object, the body of every error response.
type Problem struct {
	Type     string `json:"type"`     // ProblemTypeBase + error code
	Title    string `json:"title"`    // short summary of the code, the same for every occurrence
	Status   int    `json:"status"`   // the HTTP status code
	Detail   string `json:"detail"`   // what went wrong in this occurrence, safe to show
	Instance string `json:"instance"` // the request path
}

// problemKind is one row of the error table.
type problemKind struct {
	status int
	title  string
}

// problemKinds is the one table that maps error codes to HTTP statuses and titles. A code
// that is not here is answered as EINTERNAL.
var problemKinds = map[string]problemKind{
	orderly.EINVALID:             {http.StatusUnprocessableEntity, "Invalid input"},
	orderly.ENOTFOUND:            {http.StatusNotFound, "Not found"},
	orderly.EOUTOFSTOCK:          {http.StatusConflict, "Out of stock"},
	orderly.ECOUPONUNAVAIL:       {http.StatusConflict, "Coupon unavailable"},
	orderly.EIDEMPOTENCY:         {http.StatusUnprocessableEntity, "Idempotency key reused"},
	orderly.EIDEMPOTENCYINFLIGHT: {http.StatusConflict, "Idempotency key in flight"},
	orderly.EILLEGAL:             {http.StatusConflict, "Illegal transition"},
	orderly.ENOTPAYABLE:          {http.StatusConflict, "Order not payable"},
	orderly.ECONFLICT:            {http.StatusConflict, "Conflict"},
	orderly.EPAYMENTRACE:         {http.StatusConflict, "Payment started concurrently"},
	orderly.EWRONGFLOW:           {http.StatusConflict, "Wrong flow"},
	orderly.EUNAUTHORIZED:        {http.StatusUnauthorized, "Unauthorized"},
	orderly.EAMOUNTMISMATCH:      {http.StatusUnprocessableEntity, "Amount mismatch"},
	orderly.EORDERMISMATCH:       {http.StatusUnprocessableEntity, "Payment of another order"},
	orderly.ECHANNELTXN:          {http.StatusConflict, "Channel transaction conflict"},
	orderly.EUNAVAILABLE:         {http.StatusServiceUnavailable, "Service unavailable"},
	orderly.EREFUNDEXCEEDS:       {http.StatusConflict, "Refund exceeds captured amount"},
	orderly.EREFUNDITEMS:         {http.StatusConflict, "Refund exceeds items bought"},
	orderly.EGROUPFULL:           {http.StatusConflict, "Group full"},
	orderly.EGROUPNOTFORMING:     {http.StatusConflict, "Group not forming"},
	orderly.EGROUPEXPIRED:        {http.StatusConflict, "Group expired"},
	orderly.EALREADYMEMBER:       {http.StatusConflict, "Already a member"},
	orderly.EINSUFFICIENT:        {http.StatusConflict, "Insufficient funds"},
	orderly.EHOLDEXPIRED:         {http.StatusConflict, "Hold expired"},
	orderly.EHOLDEXCEEDED:        {http.StatusConflict, "Hold exceeded"},
	orderly.EHOLDNOTPENDING:      {http.StatusConflict, "Hold not pending"},
	orderly.ESAGANOTSTUCK:        {http.StatusConflict, "Saga not stuck"},
	orderly.EINTERNAL:            {http.StatusInternalServerError, "Internal error"},
	CodePayloadTooLarge:          {http.StatusRequestEntityTooLarge, "Payload too large"},
	CodeUnsupportedMediaType:     {http.StatusUnsupportedMediaType, "Unsupported media type"},
	CodeRouteNotFound:            {http.StatusNotFound, "Route not found"},
	CodeMethodNotAllowed:         {http.StatusMethodNotAllowed, "Method not allowed"},
	CodeNotReady:                 {http.StatusServiceUnavailable, "Not ready"},
	CodeForbidden:                {http.StatusForbidden, "Forbidden"},
}

// internalDetail is the only detail an internal error shows; the error itself is logged.
const internalDetail = "Internal error."

// RetryAfterSeconds is the Retry-After header (RFC 9110 §10.2.3) of every 503 answer: a
// request refused for a lock wait, a busy database or its expired deadline changed nothing
// and may be sent again after this many seconds.
const RetryAfterSeconds = 1

// unavailableDetail is the detail of a request whose deadline expired outside the store.
const unavailableDetail = "the request could not be served in time; nothing was changed, retry later"

// writeError answers err as a problem. Errors that are not *orderly.Error, carry EINTERNAL
// or a code missing from the table are logged and answered with a generic 500.
//
// An internal error caused by the request's own deadline (RequestTimeout) is answered as
// EUNAVAILABLE: what timed out was rolled back, and the client should retry. EUNAVAILABLE
// answers are logged at warn: lock waits, an overloaded database, or work in progress (a
// wallet checkout waiting for its retry).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := orderly.ErrorCode(err)
	if code == orderly.EINTERNAL && errors.Is(err, context.DeadlineExceeded) &&
		errors.Is(r.Context().Err(), context.DeadlineExceeded) {
		err, code = fmt.Errorf("%w: %w", orderly.Errorf(orderly.EUNAVAILABLE, unavailableDetail), err), orderly.EUNAVAILABLE
	}
	if code == orderly.EUNAVAILABLE {
		s.logger.WarnContext(r.Context(), "http request answered 503 unavailable (retry later)",
			"method", r.Method, "path", r.URL.Path, "trace_id", TraceIDFromContext(r.Context()), "error", err)
	}
	if _, ok := problemKinds[code]; !ok || code == orderly.EINTERNAL {
		level := slog.LevelError
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			level = slog.LevelDebug // the client went away; nothing is wrong here
		}
		s.logger.Log(r.Context(), level, "http request failed",
			"method", r.Method, "path", r.URL.Path, "trace_id", TraceIDFromContext(r.Context()), "err", err)
		s.writeProblem(w, r, orderly.EINTERNAL, internalDetail)
		return
	}
	s.writeProblem(w, r, code, orderly.ErrorMessage(err))
}

// writeProblem answers with the problem for code (which must be in problemKinds) and detail.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, code, detail string) {
	kind, ok := problemKinds[code]
	if !ok {
		code, kind = orderly.EINTERNAL, problemKinds[orderly.EINTERNAL]
	}
	body, err := json.Marshal(&Problem{
		Type:     ProblemTypeBase + code,
		Title:    kind.title,
		Status:   kind.status,
		Detail:   detail,
		Instance: r.URL.Path,
	})
	if err != nil { // cannot happen: every field is a string or an int
		http.Error(w, internalDetail, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ProblemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if kind.status == http.StatusServiceUnavailable || code == orderly.EIDEMPOTENCYINFLIGHT {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	w.WriteHeader(kind.status)
	_, _ = w.Write(append(body, '\n'))
}

// invalidf returns an EINVALID error; its message is the problem's detail.
func invalidf(format string, args ...any) error {
	return orderly.Errorf(orderly.EINVALID, format, args...)
}
