package store

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
)

// SimHold is a card hold of the simulated gateway (payment.SimGateway), in minor units:
// Amount authorised until ExpiresAt; once resolved, Captured (≤ Amount) and Released
// (Amount − Captured), of which Refunded (≤ Captured) was given back.
type SimHold struct {
	ID         string
	Amount     int64
	Captured   int64
	Released   int64
	Refunded   int64
	State      orderly.HoldState
	ExpiresAt  time.Time
	CreatedAt  time.Time
	ResolvedAt *time.Time // nil while pending
}

// SimHoldKey is what one idempotency key of the simulated gateway applied: an operation
// ("capture_hold", "void_hold", "refund") of Amount minor units (0 for a void) on a hold.
type SimHoldKey struct {
	Key       string
	HoldID    string
	Op        string
	Amount    int64
	CreatedAt time.Time
}

// SimHoldTx holds the queries of the simulated gateway's card holds (tables sim_holds,
// sim_hold_keys and sim_gateway_faults, migration 00016), so that every instance sees the
// holds any of them placed. It is part of Tx.
type SimHoldTx interface {
	// SimHoldInsert writes a new hold as given; ECONFLICT when its id exists.
	SimHoldInsert(ctx context.Context, h *SimHold) error
	// SimHoldGet returns a hold; ENOTFOUND if there is none.
	SimHoldGet(ctx context.Context, id string) (*SimHold, error)
	// SimHoldLock is SimHoldGet that also locks the hold's row until the transaction ends
	// (where the dialect has row locks; SQLite has one writer).
	SimHoldLock(ctx context.Context, id string) (*SimHold, error)
	// SimHoldResolve is the one state change of a hold: pending → h.State (posted, voided,
	// expired) with h.Captured, h.Released and h.ResolvedAt. It reports false, changing
	// nothing, when the hold is not pending.
	SimHoldResolve(ctx context.Context, h *SimHold) (bool, error)
	// SimHoldRefund adds amount (> 0) to the hold's refunded, only while refunded + amount ≤
	// captured; it reports false, changing nothing, otherwise.
	SimHoldRefund(ctx context.Context, id string, amount int64) (bool, error)
	// SimHoldKeyInsert records what a key applied; ECONFLICT when the key exists.
	SimHoldKeyInsert(ctx context.Context, k *SimHoldKey) error
	// SimHoldKeyGet returns what a key applied; ENOTFOUND if it applied nothing.
	SimHoldKeyGet(ctx context.Context, key string) (*SimHoldKey, error)
	// SimHoldKeys returns the keys that applied something to a hold, oldest first.
	SimHoldKeys(ctx context.Context, holdID string) ([]*SimHoldKey, error)
	// SimHoldList returns up to Limit holds with id > AfterID, by id.
	SimHoldList(ctx context.Context, params *ListParams) ([]*SimHold, error)
	// SimHoldKeyList returns up to Limit keys with key > AfterID, by key.
	SimHoldKeyList(ctx context.Context, params *ListParams) ([]*SimHoldKey, error)
	// SimGatewayFaultArm sets how many of the next calls of op apply and then answer a
	// timeout (n ≤ 0 disarms it).
	SimGatewayFaultArm(ctx context.Context, op string, n int) error
	// SimGatewayFaultTake consumes one armed fault of op and reports whether there was one.
	SimGatewayFaultTake(ctx context.Context, op string) (bool, error)
}
