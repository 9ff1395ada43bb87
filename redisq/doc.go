// Package redisq implements closer.DelayQueue on a Redis sorted set (docs/concepts/deadlines-and-closing.md,
// "Redis delay queue (optional)").
//
// Each open order is one member of the sorted set returned by dueKey: the member is the
// order id and the score is the order's close_at in unix milliseconds. The closer adds an
// order after it commits, claims due ids with one Lua script (ZRANGEBYSCORE + ZREM, bounded
// by the claim limit, so two closers never claim the same id), removes orders that left
// pending_payment, and the deep check compares the scores with the database's close_at and
// repairs drift.
//
// The queue is only a wake-up hint. The database's guarded update (state =
// 'pending_payment' AND close_at <= <db now>) stays the single source of truth for what
// closes and when, so an id claimed too early, claimed twice or never added cannot close an
// order early or twice. Losing Redis data (restart without persistence, failover, FLUSHALL)
// therefore only delays closes, by at most one sweep interval: the periodic sweep scans the
// database independently of the queue.
//
// All keys of a queue are built by key builder functions and carry the hash tag {delay},
// so they live in one Redis Cluster slot and the Lua script may touch all of them.
package redisq
