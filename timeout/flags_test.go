package timeout_test

import (
	"os"
	"strconv"
)

// burstSize is the number of orders due at once in BenchmarkBurstClose: 10 000, or
// ORDERLY_BENCH_BURST (the design's figure is 100 000).
var burstSize = func() *int {
	n, err := strconv.Atoi(os.Getenv("ORDERLY_BENCH_BURST"))
	if err != nil || n <= 0 {
		n = 10_000
	}
	return &n
}()
