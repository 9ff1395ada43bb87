// Package bench runs the named scenarios of `orderly bench` (steady, burst, flash-sale,
// history, pending, notify) against `orderly serve` child processes on SQLite or
// PostgreSQL, and measures them the way a user would: orders created over HTTP from
// 127.0.0.1, lateness (closed_at − close_at) read from the database on the database's
// clock, the servers' CPU seconds and peak RSS from /proc. Bulk data (a burst's orders, a
// history of closed orders, pending orders at rest) is loaded directly in SQL, not through
// the API. The load generator is bounded in count and time and stops by itself.
//
// The peers (River, asynq, a periodic scan) live in their own Go module, bench/peers, so
// that orderly's go.mod does not carry them; they reuse this package's databases, loads and
// figures, and print theirs beside orderly's (Result.Peers).
package bench
