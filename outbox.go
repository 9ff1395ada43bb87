package orderly

import (
	"encoding/json"
	"time"
)

// Outbox topics written by the engine. Topics with a local handler change this database in
// the transaction that marks the message delivered; the others are events for other
// services and go to the configured publisher.
const (
	TopicReservationRelease = "reservation.release" // payload: OrderRef; local
	TopicCouponRelease      = "coupon.release"      // payload: CouponRef; local
	TopicPaymentRefund      = "payment.refund"      // payload: PaymentRef; gateway refund, then local
	TopicOrderClosed        = "order.closed"        // payload: OrderEvent; event
	TopicOrderPaid          = "order.paid"          // payload: OrderEvent; event
	TopicPaymentRefunded    = "payment.refunded"    // payload: PaymentRef; event
)

// Outbox message states. The store keeps a CHECK constraint with the same list.
const (
	MessagePending   = "pending"
	MessageDelivered = "delivered"
	MessageDead      = "dead"
)

// Message is a transactional outbox row: written in the same transaction as the state
// change it announces, delivered at least once by the relay (I7).
type Message struct {
	ID            int64           `json:"id"`
	Topic         string          `json:"topic"`
	Key           string          `json:"key"` // the entity it is about (order or payment id)
	Payload       json.RawMessage `json:"payload"`
	State         string          `json:"state"`
	Attempts      int64           `json:"attempts"`
	NextAttemptAt time.Time       `json:"next_attempt_at"`
	LastError     string          `json:"last_error,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	DeliveredAt   *time.Time      `json:"delivered_at,omitempty"`
}

// OrderRef is the payload of messages about one order.
type OrderRef struct {
	OrderID string `json:"order_id"`
}

// CouponRef is the payload of coupon.release: release CouponID only if OrderID froze it.
type CouponRef struct {
	CouponID string `json:"coupon_id"`
	OrderID  string `json:"order_id"`
}

// PaymentRef is the payload of messages about one payment.
type PaymentRef struct {
	PaymentID string `json:"payment_id"`
	OrderID   string `json:"order_id"`
	Amount    int64  `json:"amount"`
	// ChannelTxnID is the capture's transaction at the provider, when known.
	ChannelTxnID string `json:"channel_txn_id,omitempty"`
}

// OrderEvent is the payload of order.* events.
type OrderEvent struct {
	OrderID string    `json:"order_id"`
	State   State     `json:"state"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
}
