// Package wallet keeps user balances in minor units over a double-entry ledger and holds
// (two-phase money) on them (docs/flows/wallet-checkout.md).
//
// Every movement is one transfer: two or more entries, each an amount of one account's
// bucket (available or held), summing to zero, written in the same transaction as the
// balance columns they change. Balances are columns for speed, and equal the sums of the
// entries at every commit (package verify recomputes them). A user account never goes
// below zero: each change is one guarded UPDATE (… WHERE available + delta >= 0), so of
// concurrent debits exactly those the balance covers succeed, on every dialect. System
// accounts (orderly.SystemPlatform, orderly.SystemExternal) are the other side of
// payments and top-ups and may read negative.
//
// Every operation carries an idempotency key, unique across the ledger: the same key sent
// again returns the first transfer and moves nothing (a retried capture never captures
// twice). A hold is pending until it is posted (≤ its amount; the rest released in the
// same transfer), voided, or expired; a post or void at or after its expires_at (database
// clock) is refused even before the expiry ran, and the expiry is a timed state of the
// closer (Expiries), like an unpaid order's close.
package wallet
