package orderly

import (
	"context"
	"time"
)

// RefundState is the state of one refund. The store keeps a CHECK constraint with the same
// list.
type RefundState string

// Refund states: requested → succeeded | failed, each change guarded and made once; a
// provider that fails a refund after confirming it moves it succeeded → failed, once
// (payment.Service.HandleNotification).
const (
	RefundRequested RefundState = "requested" // written with its outbox message; the gateway has not confirmed yet
	RefundSucceeded RefundState = "succeeded" // the gateway confirmed: the money went back to the payer
	RefundFailed    RefundState = "failed"    // the gateway refused it, or failed it after confirming it (reversed); its amount and items are refundable again
)

// RefundItem is a line of a refund: Quantity units of SKU given back (or price-adjusted).
type RefundItem struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// Refund is money returned to the buyer of a paid order: in full or in part, from paid,
// shipped or completed, several per order up to the captured amount and never beyond it
// (I4). Amount is in minor units of Currency. Items say which units it covers (optional:
// a price adjustment names none); when Restock is true those units go back to available
// stock (sold → available) when the gateway confirms the refund. Each refund is one gateway refund, made through the outbox
// with the refund id as the gateway's idempotency key, so a redelivered message never
// refunds twice.
type Refund struct {
	ID          string       `json:"id"`
	OrderID     string       `json:"order_id"`
	PaymentID   string       `json:"payment_id"` // the order's captured payment that is refunded
	Amount      int64        `json:"amount"`
	Currency    string       `json:"currency"`
	Items       []RefundItem `json:"items"`
	Restock     bool         `json:"restock"`
	Reason      string       `json:"reason,omitempty"`
	State       RefundState  `json:"state"`
	FailReason  string       `json:"fail_reason,omitempty"`
	CreatedAt   time.Time    `json:"created_at"`
	CompletedAt *time.Time   `json:"completed_at,omitempty"` // when it succeeded or failed
	// ProviderRef is the provider's id of the refund ("re_…", WeChat refund_id), once known.
	ProviderRef string `json:"provider_ref,omitempty"`
	// ProviderStatus is the provider's last non-final answer while the refund is requested
	// ("pending", "PROCESSING", "ABNORMAL"): accepted, not confirmed. "" before the provider
	// answered and once the refund is final.
	ProviderStatus string `json:"provider_status,omitempty"`
	// Metadata is the merchant's own data (set at create, changed by PATCH).
	Metadata Metadata `json:"metadata,omitempty"`
}

// CreateRefundParams is the input of RefundService.CreateRefund.
type CreateRefundParams struct {
	OrderID string       `json:"-"`
	Amount  int64        `json:"amount"`          // minor units, 1 … captured − already refunded
	Items   []RefundItem `json:"items,omitempty"` // units covered; each SKU once, at most what was bought
	Restock bool         `json:"restock,omitempty"`
	Reason  string       `json:"reason,omitempty"` // free text, at most 512 bytes
	// Metadata is the refund's own data (Metadata's bounds, else EINVALID).
	Metadata Metadata `json:"metadata,omitempty"`
	// IdempotencyKey, when set, makes the call idempotent per order: the same key with the
	// same parameters returns the first refund; with different parameters EIDEMPOTENCY.
	IdempotencyKey string `json:"-"`
	Actor          string `json:"-"`
	TraceID        string `json:"-"`
}

// RefundService refunds paid orders, in full or in part.
type RefundService interface {
	// CreateRefund records a refund of a paid, shipped or completed order and, in the same
	// transaction, reserves its amount against the captured amount, counts its items
	// against those bought (restocked, when asked, once the gateway confirms the refund),
	// and writes its gateway refund to the outbox. A refund that brings the refunded total to the captured amount moves the
	// order to refunding (refunded when the gateway confirms every refund); a partial
	// refund keeps the order's state. It returns created=false for a replay of an
	// idempotency key. Errors: ENOTFOUND, EINVALID, EILLEGAL (the order is not paid,
	// shipped or completed), EREFUNDEXCEEDS (amount beyond what is left to refund),
	// EREFUNDITEMS (more units than bought and not yet refunded), EIDEMPOTENCY.
	CreateRefund(ctx context.Context, params *CreateRefundParams) (refund *Refund, created bool, err error)
	// OrderRefunds returns an order's refunds, oldest first. Errors: ENOTFOUND.
	OrderRefunds(ctx context.Context, orderID string) ([]*Refund, error)
	// Refund returns one refund. Errors: ENOTFOUND.
	Refund(ctx context.Context, id string) (*Refund, error)
}

// RefundRef is the payload of refund.* messages: the refund.execute command and the
// refund.succeeded and refund.failed events.
type RefundRef struct {
	RefundID  string `json:"refund_id"`
	OrderID   string `json:"order_id"`
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount"` // minor currency units
	Currency  string `json:"currency"`
	// Sequence is the event's per-order sequence on refund.succeeded and refund.failed (see
	// OrderEvent); absent on refund.execute.
	Sequence int64 `json:"sequence,omitempty"`
	// Metadata is the refund's, on the refund.* events.
	Metadata Metadata `json:"metadata,omitempty"`
}

// SetSequence implements Sequenced.
func (r *RefundRef) SetSequence(seq int64) { r.Sequence = seq }

// GatewayRefund is one refund asked of a gateway. IdempotencyKey identifies the refund:
// the gateway refunds once per key, whatever number of times it is asked (the outbox may
// deliver a message again after a crash).
type GatewayRefund struct {
	IdempotencyKey string // the refund id; "payment:<id>" for the automatic refund of a whole payment (I2)
	PaymentID      string
	Amount         int64 // minor units
	Currency       string
	// Payment is the payment refunded, as stored (its ProviderRef, ChannelTxnID and Amount,
	// the total some providers require); nil when the caller could not read it.
	Payment *Payment
	// ProviderRefundRef is the provider's id of the refund, once it answered one ("re_…").
	ProviderRefundRef string
}
