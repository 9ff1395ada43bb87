// Package orderly is the domain of the orderly order-lifecycle engine: orders and their
// items, states and pay statuses, the table-driven flows (state machines) that are the only
// way to change an order's state, payments, stock, coupons, outbox messages, the stable
// error codes, and the service interfaces that adapters (HTTP, CLI, simulation) call.
//
// The package uses only the standard library and imports no adapter. Storage lives in
// package store (one implementation per SQL dialect), the close path in package closer,
// the transactional outbox relay in package outbox, payments in package payment and the
// HTTP API in package httpapi. See docs/getting-started.md ("What they check") for the invariants I1–I8 that
// every part keeps.
//
// Conventions: money is int64 minor currency units (cents) with an ISO 4217 currency code;
// every time is UTC with millisecond precision (the store keeps unix milliseconds).
package orderly
