// Package testenv says which tests a `go test` run includes.
package testenv

import (
	"flag"
	"os"
	"strconv"
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

// Parallel sets -test.parallel to n unless the command line set it or the binary runs
// under the race detector; TestMain calls it before m.Run. It is for a package whose tests
// mostly wait (deadlines, fake servers, retries) rather than compute: the default,
// GOMAXPROCS, runs two of them at a time on a 2-core machine and leaves the processors
// idle. Under -race the same tests compute several times longer, and n of them at once
// would push their requests past the deadlines they measure.
func Parallel(n int) {
	flag.Parse()
	set := raceEnabled
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
