// Package payment starts payment attempts through a Gateway, verifies and applies signed
// callbacks at most once, inspects in-flight payments when their order is due to close, and
// refunds payments that arrive for orders that no longer take them (DESIGN.md §4–§5).
package payment
