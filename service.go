package orderly

import (
	"context"
	"time"
)

// CreateOrderParams is the input of OrderService.CreateOrder.
type CreateOrderParams struct {
	UserID   string `json:"user_id"`
	Items    []Item `json:"items"`
	Currency string `json:"currency"`
	CouponID string `json:"coupon_id,omitempty"`
	// PaymentTimeoutSeconds is the time the buyer has to pay, in seconds; 0 means the
	// configured default (30 min). The payment deadline is created_at + this.
	PaymentTimeoutSeconds int64  `json:"payment_timeout_seconds,omitempty"`
	Flow                  string `json:"flow,omitempty"` // "" means FlowStandard
	// PaymentMethod is how the order is paid: "" for a payment attempt started later
	// (POST /v1/orders/{id}/payments), PaymentMethodWallet to check out from the user's
	// wallet at once, as a saga (package checkout). Part of the idempotency fingerprint.
	PaymentMethod string `json:"payment_method,omitempty"`
	// Metadata is the order's own data (Metadata's bounds, else EINVALID). Part of the
	// idempotency fingerprint.
	Metadata Metadata `json:"metadata,omitempty"`
	// IdempotencyKey, when set, makes the call idempotent per user: the same key with the
	// same parameters returns the first order; with different parameters EIDEMPOTENCY.
	IdempotencyKey string `json:"-"`
	Actor          string `json:"-"`
	TraceID        string `json:"-"`
}

// OrderService creates orders and moves them through their flow.
type OrderService interface {
	// CreateOrder validates params, reserves stock, freezes the coupon and writes the order
	// in one transaction. It returns created=false when an earlier call with the same
	// idempotency key made the order. The amount after the coupon must be at least 1 minor
	// unit: an order of amount 0 could only be paid by a callback for 0, so it is refused
	// (EINVALID) rather than left waiting. Errors: EINVALID, EOUTOFSTOCK, ECOUPONUNAVAIL
	// (including a coupon larger than the total), EIDEMPOTENCY; nothing is written on error.
	CreateOrder(ctx context.Context, params *CreateOrderParams) (order *Order, created bool, err error)
	// Order returns one order. Errors: ENOTFOUND.
	Order(ctx context.Context, id string) (*Order, error)
	// OrderHistory returns an order's audit trail, oldest first. Errors: ENOTFOUND.
	OrderHistory(ctx context.Context, id string) ([]*Transition, error)
	// CancelOrder closes an unpaid order for the buyer (reason buyer_cancelled) and releases
	// its stock and coupon through the outbox. An attempt in flight (pay_status paying) is
	// first cancelled at the gateway; if the gateway says it was captured, the payment is
	// applied (the order becomes paid) and the cancel is refused with EILLEGAL; otherwise the
	// attempt is marked failed in the transaction that closes the order. Errors: ENOTFOUND,
	// EILLEGAL (not pending, or paid meanwhile), ECONFLICT (the gateway could not tell
	// whether the attempt was captured; retry).
	CancelOrder(ctx context.Context, id, actor, traceID string) (*Order, error)
	// ApplyEvent applies a merchant event (ship, complete, refund) to an order.
	// Errors: ENOTFOUND, EINVALID (event not allowed from outside), EILLEGAL.
	ApplyEvent(ctx context.Context, id string, event Event, actor, traceID string) (*Order, error)
}

// StartPaymentParams is the input of PaymentService.StartPayment.
type StartPaymentParams struct {
	OrderID string `json:"-"`
	Channel string `json:"channel,omitempty"` // "" means the default gateway's channel
	// PayerID is the payer's id at the provider, when its client step needs one: the
	// buyer's WeChat openid under the channel's appid makes a JSAPI / mini-program handoff
	// instead of a Native QR code. At most 128 bytes.
	PayerID string `json:"payer_id,omitempty"`
	// Metadata is the attempt's own data (Metadata's bounds, else EINVALID).
	Metadata Metadata `json:"metadata,omitempty"`
	TraceID  string   `json:"-"`
}

// MetadataService changes the merchant's metadata of orders (and so trips), payments,
// refunds and groups.
type MetadataService interface {
	// UpdateMetadata applies patch to the metadata of object id of kind of, with its row
	// locked, and returns the metadata as stored (nil for none). Errors: ENOTFOUND,
	// EINVALID (the result breaks Metadata's bounds; nothing changed).
	UpdateMetadata(ctx context.Context, of MetadataOf, id string, patch MetadataPatch) (Metadata, error)
}

// PaymentService starts payment attempts and applies gateways' callbacks.
type PaymentService interface {
	// StartPayment creates an attempt for the order's amount and sets pay_status=paying.
	// Errors: ENOTFOUND, ENOTPAYABLE (not pending payment or past its deadline).
	StartPayment(ctx context.Context, params *StartPaymentParams) (*Payment, error)
	// HandleCallback applies a verified callback at most once (I3); duplicates return
	// Applied=false and no error. A success for an order that no longer takes it is
	// recorded and refunded (I2); a success naming another channel transaction for an
	// attempt that already captured is recorded as its own payment (DuplicateOf) and
	// refunded, whatever the order's state. Every refusal is counted, logged and stored
	// (CallbackRefusals). Errors: ENOTFOUND (unknown payment), EORDERMISMATCH, EINVALID,
	// EAMOUNTMISMATCH, ECHANNELTXN.
	HandleCallback(ctx context.Context, cb *Callback) (*CallbackResult, error)
	// RefuseCallback records a signed callback refused before HandleCallback (its body is
	// malformed or breaks a rule): counted, logged at warn and stored like the refusals of
	// HandleCallback. cb holds what could be read; cause is the refusal's error.
	RefuseCallback(ctx context.Context, cb *Callback, reason string, cause error)
	// CallbackRefusals returns the refused callbacks that named paymentID, oldest first
	// (empty, not ENOTFOUND, for a payment id we do not know: callbacks may name one).
	CallbackRefusals(ctx context.Context, paymentID string) ([]*CallbackRefusal, error)
	// Payment returns one attempt. Errors: ENOTFOUND.
	Payment(ctx context.Context, id string) (*Payment, error)
	// OrderPayments returns an order's attempts, oldest first. Errors: ENOTFOUND.
	OrderPayments(ctx context.Context, orderID string) ([]*Payment, error)
}

// CreateCouponParams is the input of CatalogService.CreateCoupon.
type CreateCouponParams struct {
	UserID    string     `json:"user_id"`
	AmountOff int64      `json:"amount_off"` // minor units, > 0
	Currency  string     `json:"currency"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CatalogService manages stock and coupons.
type CatalogService interface {
	// SetStock sets a SKU's available units (creating the SKU); held and sold are kept.
	// Errors: EINVALID (negative).
	SetStock(ctx context.Context, sku string, available int64) (*Stock, error)
	// Stock returns a SKU's stock. Errors: ENOTFOUND.
	Stock(ctx context.Context, sku string) (*Stock, error)
	// AdjustStock adds delta units (negative: removes them) to a SKU's available units,
	// held and sold kept, and returns the stock. Errors: EINVALID (delta 0, or a result
	// above the most a SKU holds); ENOTFOUND (no such SKU); EOUTOFSTOCK (fewer available
	// units than delta removes).
	AdjustStock(ctx context.Context, sku string, delta int64) (*Stock, error)
	// ListStock returns the stock of up to limit SKUs after after ("" from the first), by
	// SKU, and the SKU to pass as after for the next page ("" on the last page).
	// Errors: EINVALID (limit not 1–1000).
	ListStock(ctx context.Context, after string, limit int) ([]*Stock, string, error)
	// CreateCoupon issues a coupon. Errors: EINVALID.
	CreateCoupon(ctx context.Context, params *CreateCouponParams) (*Coupon, error)
	// Coupon returns one coupon. Errors: ENOTFOUND.
	Coupon(ctx context.Context, id string) (*Coupon, error)
}

// Signals is the port of post-commit wake-ups: a service calls it after its transaction
// committed, so that the one timer and the outbox relay act now rather than at their next
// poll. Calls never block and never fail: a lost signal costs latency only (the sweep and
// the relay's poll find the rows).
type Signals interface {
	// OrderCreated says order id, due to close at closeAt, was committed (the timer re-arms
	// and the delay queue, when configured, records it).
	OrderCreated(ctx context.Context, id string, closeAt time.Time)
	// Deadline says something timed with this deadline was committed (a group, a wallet
	// hold, a saga's retry).
	Deadline(ctx context.Context, at time.Time)
	// OutboxWritten says a commit wrote outbox messages.
	OutboxWritten()
}

// NoSignals is the Signals of a service built without one: it drops every signal.
type NoSignals struct{}

func (NoSignals) OrderCreated(context.Context, string, time.Time) {}
func (NoSignals) Deadline(context.Context, time.Time)             {}
func (NoSignals) OutboxWritten()                                  {}
