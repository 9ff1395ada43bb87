package orderly

import "time"

// State is the lifecycle state of an order. Which states exist and which transitions join
// them is defined by the order's Flow; the values below are the union over the built-in
// flows. The store keeps a CHECK constraint with the same list.
type State string

// Order states.
const (
	StatePendingPayment State = "pending_payment" // created, stock reserved, waiting for payment
	StatePaid           State = "paid"            // payment applied, stock committed, coupon used
	StateShipped        State = "shipped"         // handed to the carrier
	StateCompleted      State = "completed"       // received by the buyer (left only by a refund)
	StateClosed         State = "closed"          // closed unpaid: timeout or buyer cancel (terminal)
	StateRefunding      State = "refunding"       // refunds of the whole captured amount were requested; the gateway has not confirmed all
	StateRefunded       State = "refunded"        // everything captured was refunded (terminal)
)

// PayStatus is the status of an order's payment, kept next to State because the close path
// must not close an order whose payment is in flight (docs/concepts/deadlines-and-closing.md).
type PayStatus string

// Pay statuses.
const (
	PayUnpaid   PayStatus = "unpaid"   // no attempt started
	PayPaying   PayStatus = "paying"   // the current attempt was started and has no outcome yet
	PayPaid     PayStatus = "paid"     // a payment succeeded and was applied to this order
	PayFailed   PayStatus = "failed"   // the current attempt failed or expired; another may start
	PayRefunded PayStatus = "refunded" // the applied payment was refunded in full
	// PayPartiallyRefunded: part of the applied payment was refunded (confirmed by the
	// gateway); the rest is kept.
	PayPartiallyRefunded PayStatus = "partially_refunded"
)

// CloseReason says why an order was closed.
type CloseReason string

// Close reasons.
const (
	CloseReasonPaymentTimeout CloseReason = "payment_timeout" // close_at passed without payment
	CloseReasonBuyerCancelled CloseReason = "buyer_cancelled" // the buyer cancelled before paying
	// The wallet checkout (package checkout) closes its order with the reason its saga
	// failed for: the wallet's balance, the stock, the coupon, or anything else (a step's
	// outcome unknown past its deadline, the order no longer payable).
	CloseReasonInsufficientFunds CloseReason = "insufficient_funds"
	CloseReasonOutOfStock        CloseReason = "out_of_stock"
	CloseReasonCouponUnavailable CloseReason = "coupon_unavailable"
	CloseReasonCheckoutFailed    CloseReason = "checkout_failed"
)

// PaymentMethodWallet is CreateOrderParams.PaymentMethod for a wallet checkout: the order
// is paid from the user's wallet balance at once (package checkout,
// docs/flows/wallet-checkout.md); its payment is recorded with channel "wallet".
const PaymentMethodWallet = "wallet"

// Item is one line of an order: Quantity units of SKU at UnitPrice minor currency units each.
type Item struct {
	SKU       string `json:"sku"`
	Quantity  int64  `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
}

// Order is an order as stored. Times are UTC with millisecond precision; Amount is in minor
// units of Currency and is the items' total minus the coupon's amount off.
type Order struct {
	ID               string      `json:"id"`
	UserID           string      `json:"user_id"`
	Flow             string      `json:"flow"`
	State            State       `json:"state"`
	PayStatus        PayStatus   `json:"pay_status"`
	Items            []Item      `json:"items"`
	Amount           int64       `json:"amount"`
	Currency         string      `json:"currency"`
	CouponID         string      `json:"coupon_id,omitempty"`
	CurrentPaymentID string      `json:"current_payment_id,omitempty"`
	CreatedAt        time.Time   `json:"created_at"`
	ExpiresAt        time.Time   `json:"expires_at"` // payment deadline
	CloseAt          time.Time   `json:"close_at"`   // ExpiresAt + grace period: closed for timeout at or after this
	ClosedAt         *time.Time  `json:"closed_at,omitempty"`
	CloseReason      CloseReason `json:"close_reason,omitempty"`
	PaidAt           *time.Time  `json:"paid_at,omitempty"`
	// RefundedAmount is the sum of the order's refunds that are requested or succeeded, in
	// minor units: never more than Amount (the store guards it). Amount − RefundedAmount is
	// what may still be refunded.
	RefundedAmount int64 `json:"refunded_amount"`
	Version        int64 `json:"version"` // incremented by every change of state or pay status
	// Metadata is the merchant's own data (set at create, changed by PATCH); not versioned.
	Metadata Metadata `json:"metadata,omitempty"`
}

// Audit events: changes recorded in the audit trail that are not transitions of a flow.
// The creation row goes from "" to the flow's initial state; the payment rows keep the
// state (From == To) and record a change of pay_status.
const (
	EventCreate          Event = "create"           // the order was created (From "")
	EventPaymentStarted  Event = "payment_started"  // an attempt started: pay_status → paying
	EventPaymentFailed   Event = "payment_failed"   // the current attempt failed, expired or was cancelled: → failed
	EventPaymentRefunded Event = "payment_refunded" // a payment of a closed order was refunded: → refunded
	// EventRefundReversed: the provider failed a refund it had confirmed; pay_status follows
	// the refunds still succeeded (partially_refunded → paid when none is left).
	EventRefundReversed Event = "refund_reversed"
)

// AuditEvent reports whether e is an audit event (creation or a pay_status change) rather
// than an event of a flow.
func AuditEvent(e Event) bool {
	switch e {
	case EventCreate, EventPaymentStarted, EventPaymentFailed, EventPaymentRefunded, EventRefundReversed:
		return true
	}
	return false
}

// Transition is one row of an order's audit trail (I6): every change of an order's state or
// pay_status, caused by Event, recorded in the same transaction as the change. A change of
// state is a transition of the order's flow; a row with From == To and an audit event
// (AuditEvent) records a change of pay_status only; the first row is the creation (From "",
// event create). PayStatusFrom and PayStatusTo are "" in rows written before they were
// recorded.
type Transition struct {
	ID            int64     `json:"id"`
	OrderID       string    `json:"order_id"`
	From          State     `json:"from"`
	To            State     `json:"to"`
	Event         Event     `json:"event"`
	PayStatusFrom PayStatus `json:"pay_status_from,omitempty"`
	PayStatusTo   PayStatus `json:"pay_status_to,omitempty"`
	Cause         string    `json:"cause,omitempty"` // free text: close reason, payment id, …
	Actor         string    `json:"actor"`           // who caused it: "buyer", "timer", "sweep", "payment", "admin", …
	At            time.Time `json:"at"`
	TraceID       string    `json:"trace_id,omitempty"`
}

// Coupon states.
const (
	CouponAvailable = "available"
	CouponFrozen    = "frozen"
	CouponUsed      = "used"
	CouponExpired   = "expired"
)

// Coupon is a fixed amount off an order, owned by one user, frozen by at most one order at
// a time (I3). AmountOff is in minor units of Currency.
type Coupon struct {
	ID        string     `json:"id"`
	UserID    string     `json:"user_id"`
	AmountOff int64      `json:"amount_off"`
	Currency  string     `json:"currency"`
	State     string     `json:"state"`
	OrderID   string     `json:"order_id,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

// StateAt returns the coupon's state as of now: an available coupon whose ExpiresAt is at or
// before now reads CouponExpired (logical expiry: the deadline, not a job, is what users
// see, and freezing refuses it from that instant, store.Tx.CouponFreeze). Other states are
// returned as stored: a coupon frozen before its expiry stays with its order.
func (c *Coupon) StateAt(now time.Time) string {
	if c.State == CouponAvailable && c.ExpiresAt != nil && !c.ExpiresAt.After(now) {
		return CouponExpired
	}
	return c.State
}

// Stock is the inventory of one SKU, in units. Conservation (I4): the total ever set equals
// Available + Held + Sold, and none is negative.
type Stock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Held      int64  `json:"held"`
	Sold      int64  `json:"sold"`
}

// Reservation states.
const (
	ReservationHeld      = "held"
	ReservationReleased  = "released"
	ReservationCommitted = "committed"
)

// Reservation is stock held for one order and SKU; it is released or committed at most once.
// Of a committed (sold) reservation, Refunded units were refunded (by refunds that did not
// fail) and Restocked units went back to available stock; neither exceeds Quantity.
type Reservation struct {
	OrderID   string `json:"order_id"`
	SKU       string `json:"sku"`
	Quantity  int64  `json:"quantity"`
	State     string `json:"state"`
	Refunded  int64  `json:"refunded,omitempty"`
	Restocked int64  `json:"restocked,omitempty"`
}
