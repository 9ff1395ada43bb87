// Package testenv says which tests a `go test` run includes.
package testenv

import (
	"os"
	"testing"
)

// LongVar is the variable that runs the long tests: CI sets it to 1.
const LongVar = "ORDERLY_TEST_LONG"

// Long skips t unless ORDERLY_TEST_LONG=1. A long test spends many seconds of wall time
// (whole simulate or bench runs, several processes, leases left to expire): it stays out
// of a developer's `go test ./...`, which must stay fast, and CI runs it every time.
func Long(t testing.TB) {
	t.Helper()
	if os.Getenv(LongVar) != "1" {
		t.Skipf("a long test: %s=1 runs it (CI does)", LongVar)
	}
}
