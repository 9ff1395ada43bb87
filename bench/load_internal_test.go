package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

// TestErrorLogCountsOverloadApart: a request that timed out or was shed (503) is a figure
// of an overloaded run (steady at a rate the server cannot take), counted apart; any other
// failure is the bench's error. A steady run at 1 000/s on a saturated PostgreSQL ended
// with "253 requests failed" and no figures at all.
func TestErrorLogCountsOverloadApart(t *testing.T) {
	var e errorLog
	e.add(fmt.Errorf("create: %w", context.DeadlineExceeded))
	e.add(&apiError{Status: http.StatusServiceUnavailable, Type: "https://orderly.dev/problems/unavailable"})
	if err := e.err(); err != nil || e.overload() != 2 {
		t.Fatalf("after a timeout and a 503: err %v, overload %d; want nil and 2", err, e.overload())
	}
	e.add(&apiError{Status: http.StatusInternalServerError, Type: "https://orderly.dev/problems/internal"})
	e.add(errors.New("connection refused"))
	if err := e.err(); err == nil || e.overload() != 2 {
		t.Fatalf("after a 500 and a refused connection: err %v, overload %d; want an error and 2", err, e.overload())
	}
}
