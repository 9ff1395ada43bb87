package store

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
)

// WalletTx holds the queries of wallet accounts, the double-entry ledger and holds
// (package wallet). It is part of Tx.
//
// Lock order: a post or void locks its hold row first; every transaction that moves money
// then inserts its transfer row (the unique idempotency key makes a concurrent duplicate
// wait for it), a refund then changes the refunded transfer, and last come the account rows,
// in account id order, so that two transfers touching the same accounts never wait for
// each other in a cycle.
type WalletTx interface {
	// WalletAccountEnsure creates an account with zero balances when none has its id; an
	// existing account is left as it is.
	WalletAccountEnsure(ctx context.Context, ref orderly.AccountRef, now time.Time) error
	// WalletAccountGet returns an account; ENOTFOUND if there is none.
	WalletAccountGet(ctx context.Context, id string) (*orderly.WalletAccount, error)
	// WalletAccountList returns up to Limit accounts with id > AfterID, by id (keyset
	// pagination); only those of Owner when it is set.
	WalletAccountList(ctx context.Context, params *WalletAccountListParams) ([]*orderly.WalletAccount, error)
	// WalletAccountMove adds Available and Held (minor units, either sign) to an account's
	// balances in one guarded UPDATE: a user account changes only if neither balance goes
	// below zero (a concurrent move that committed first is seen: PostgreSQL re-checks the
	// WHERE clause on the new row version, InnoDB reads the latest committed one, SQLite has
	// one writer). It reports whether the row changed (false: no such account, or not
	// enough money).
	WalletAccountMove(ctx context.Context, params *WalletAccountMoveParams) (bool, error)

	// WalletTransferInsert writes a transfer (not its entries). ECONFLICT when its id or
	// its idempotency key is taken.
	WalletTransferInsert(ctx context.Context, tr *orderly.WalletTransfer) error
	// WalletTransferGet returns a transfer without entries; ENOTFOUND if there is none.
	WalletTransferGet(ctx context.Context, id string) (*orderly.WalletTransfer, error)
	// WalletTransferByKey returns the transfer written under an idempotency key;
	// ENOTFOUND if there is none.
	WalletTransferByKey(ctx context.Context, key string) (*orderly.WalletTransfer, error)
	// WalletTransferAddRefunded adds amount to the refunded part of a debit or post
	// transfer, guarded: refunded stays within 0 … amount. It reports whether the row
	// changed.
	WalletTransferAddRefunded(ctx context.Context, id string, amount int64) (bool, error)
	// WalletEntriesInsert writes the entries of one transfer (their ids are not set).
	WalletEntriesInsert(ctx context.Context, entries []*orderly.WalletEntry) error
	// WalletEntryList returns up to Limit entries of an account with id < BeforeID (0: no
	// bound), newest first, each with its transfer's kind.
	WalletEntryList(ctx context.Context, params *WalletEntryListParams) ([]*orderly.WalletEntry, error)
	// WalletEntrySums returns, for up to Limit accounts having entries with account id >
	// AfterID, by account id, the sums of their entries per bucket.
	WalletEntrySums(ctx context.Context, params *ListParams) ([]*WalletEntrySum, error)
	// WalletTransfersUnbalanced returns up to limit transfers, by id, whose entries do not
	// sum to zero or that have fewer than two entries.
	WalletTransfersUnbalanced(ctx context.Context, limit int) ([]string, error)

	// WalletHoldInsert writes a pending hold: wake_at = expires_at.
	WalletHoldInsert(ctx context.Context, h *orderly.WalletHold) error
	// WalletHoldGet returns a hold; ENOTFOUND if there is none.
	WalletHoldGet(ctx context.Context, id string) (*orderly.WalletHold, error)
	// WalletHoldLock locks a hold's row until the transaction ends (where the dialect has
	// row locks; SQLite has one writer) and returns it; ENOTFOUND if there is none.
	WalletHoldLock(ctx context.Context, id string) (*orderly.WalletHold, error)
	// WalletHoldResolve is the one guarded state change of holds: pending → To, with
	// captured and resolved_at set and wake_at cleared. With ExpiredBy set it changes the
	// hold only if expires_at <= *ExpiredBy (the expiry is never early). It reports whether
	// the row changed.
	WalletHoldResolve(ctx context.Context, params *WalletHoldResolveParams) (bool, error)
	// WalletHoldsDue claims up to limit pending holds whose wake_at <= now, earliest first,
	// locking them where the dialect can (FOR UPDATE SKIP LOCKED).
	WalletHoldsDue(ctx context.Context, now time.Time, limit int) ([]*orderly.WalletHold, error)
	// WalletHoldNextWakeAt returns the earliest wake_at among pending holds; ok=false if
	// none.
	WalletHoldNextWakeAt(ctx context.Context) (wakeAt time.Time, ok bool, err error)
	// WalletHoldsOverdueCount counts pending holds whose wake_at is before before.
	WalletHoldsOverdueCount(ctx context.Context, before time.Time) (int64, error)
	// WalletHoldsOverdue returns up to Limit pending holds whose wake_at (their expiry) is
	// before Before, with id > AfterID, by id (keyset pagination), read through the pending
	// holds' wake_at index: the reconciliation's scan, which must not read resolved holds.
	WalletHoldsOverdue(ctx context.Context, params *WalletHoldsOverdueParams) ([]*orderly.WalletHold, error)
	// WalletHoldList returns up to Limit holds with id > AfterID, by id.
	WalletHoldList(ctx context.Context, params *ListParams) ([]*orderly.WalletHold, error)
	// WalletHoldResolutions returns, for up to Limit holds with id > AfterID that have any,
	// by hold id, the number of transfers that resolved them (post, void, expire): one per
	// resolved hold, none per pending hold.
	WalletHoldResolutions(ctx context.Context, params *ListParams) ([]*WalletHoldResolutions, error)
	// WalletLedgers returns up to Limit accounts with id > AfterID, by id, each beside the
	// sums of its entries per bucket, read in one statement (one snapshot, so a move
	// committing meanwhile cannot make an account disagree with its own entries).
	WalletLedgers(ctx context.Context, params *ListParams) ([]*WalletLedger, error)
}

// WalletLedger is one account's balances beside what its ledger entries give (minor
// units): an account agrees with its ledger when Available = LedgerAvailable and Held =
// LedgerHeld (docs/flows/wallet-checkout.md).
type WalletLedger struct {
	Account         *orderly.WalletAccount
	LedgerAvailable int64
	LedgerHeld      int64
}

// Agrees reports whether the account's balances equal its entries' sums.
func (l *WalletLedger) Agrees() bool {
	return l.Account.Available == l.LedgerAvailable && l.Account.Held == l.LedgerHeld
}

// WalletHoldsOverdueParams is the input of Tx.WalletHoldsOverdue.
type WalletHoldsOverdueParams struct {
	Before  time.Time
	AfterID string
	Limit   int
}

// WalletHoldResolutions counts the transfers that resolved one hold.
type WalletHoldResolutions struct {
	HoldID    string
	Transfers int64
}

// WalletAccountListParams is the input of Tx.WalletAccountList.
type WalletAccountListParams struct {
	Owner   string // "" for every owner
	AfterID string
	Limit   int
}

// WalletAccountMoveParams is the input of Tx.WalletAccountMove.
type WalletAccountMoveParams struct {
	ID        string
	Available int64 // minor units added to available (negative: taken)
	Held      int64 // minor units added to held
	Now       time.Time
}

// WalletEntryListParams is the input of Tx.WalletEntryList.
type WalletEntryListParams struct {
	AccountID string
	BeforeID  int64 // 0: from the newest
	Limit     int
}

// WalletEntrySum is the sum of an account's entries per bucket (minor units).
type WalletEntrySum struct {
	AccountID string
	Available int64
	Held      int64
}

// WalletHoldResolveParams is the input of Tx.WalletHoldResolve.
type WalletHoldResolveParams struct {
	ID       string
	To       orderly.HoldState // posted, voided or expired
	Captured int64
	At       time.Time // resolved_at
	// ExpiredBy, when set, is a guard: only a hold with expires_at <= *ExpiredBy changes.
	ExpiredBy *time.Time
}
