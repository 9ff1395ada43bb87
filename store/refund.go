package store

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
)

// RefundTx holds the queries of refunds (orderly.Refund) and of the order and stock
// figures that refunds move. It is part of Tx.
type RefundTx interface {
	// RefundInsert writes a refund in state requested. ECONFLICT when the order already
	// has a refund with the same idempotency key (or the id exists).
	RefundInsert(ctx context.Context, params *RefundInsertParams) error
	// RefundGet returns a refund; ENOTFOUND if there is none.
	RefundGet(ctx context.Context, id string) (*orderly.Refund, error)
	// RefundGetByProviderRef returns the refund whose provider's refund id is ref (the
	// first by id should two channels share one); ENOTFOUND if there is none or ref is "".
	RefundGetByProviderRef(ctx context.Context, ref string) (*orderly.Refund, error)
	// RefundGetByIdempotencyKey returns the refund of an order made with key and the hash
	// of that request; ENOTFOUND if there is none.
	RefundGetByIdempotencyKey(ctx context.Context, orderID, key string) (*orderly.Refund, string, error)
	// RefundList returns the refunds of one order ("" for all), by order, oldest first.
	RefundList(ctx context.Context, orderID string) ([]*orderly.Refund, error)
	// RefundSetState is the guarded state change of a refund (requested → succeeded or
	// failed); it sets completed_at and reports whether the row changed.
	RefundSetState(ctx context.Context, params *RefundSetStateParams) (bool, error)
	// RefundSetProvider records the provider's refund id, whatever the refund's state, and,
	// while it is requested, the provider's non-final state ("pending", "PROCESSING"); false
	// when no refund has id. RefundSetState clears the state.
	RefundSetProvider(ctx context.Context, id, providerRef, providerStatus string) (bool, error)
	// OrderAddRefunded adds Delta (negative to give back a failed refund's amount) to an
	// order's refunded_amount, guarded: only when the order is in one of States and the
	// new total stays within 0 … amount. It reports whether the row changed; the guard
	// re-checks the row as committed by a concurrent refund, so two refunds that together
	// exceed the amount never both pass.
	OrderAddRefunded(ctx context.Context, params *OrderAddRefundedParams) (bool, error)
	// ReservationRefund counts units of an order's sold (committed) reservation of SKU as
	// refunded (Refunded, negative to give them back) and moves Restock units from sold
	// to available stock (negative: from available back to sold, guarded by the units
	// available), guarded: 0 <= restocked <= refunded <= quantity, so no unit is restocked
	// without a refund counting it. It reports whether it changed anything: false leaves
	// the reservation and the stock as they were.
	ReservationRefund(ctx context.Context, params *ReservationRefundParams) (bool, error)
	// RefundOrderIDs returns up to limit ids of orders that have refunds, > afterOrderID,
	// by id (the keyset of reconciliation's refund check).
	RefundOrderIDs(ctx context.Context, afterOrderID string, limit int) ([]string, error)
}

// RefundInsertParams is the input of Tx.RefundInsert.
type RefundInsertParams struct {
	Refund         *orderly.Refund
	IdempotencyKey string // "" for none
	RequestHash    string // hash of the request, for EIDEMPOTENCY
}

// RefundSetStateParams is the input of Tx.RefundSetState.
type RefundSetStateParams struct {
	ID          string
	From        orderly.RefundState // guard
	To          orderly.RefundState
	FailReason  string
	CompletedAt time.Time
}

// OrderAddRefundedParams is the input of Tx.OrderAddRefunded.
type OrderAddRefundedParams struct {
	ID     string
	Delta  int64           // minor units
	States []orderly.State // guard: the order's state is one of these
}

// ReservationRefundParams is the input of Tx.ReservationRefund.
type ReservationRefundParams struct {
	OrderID  string
	SKU      string
	Refunded int64 // units to count as refunded; negative gives them back
	Restock  int64 // units to move from sold to available; negative takes them back
}
