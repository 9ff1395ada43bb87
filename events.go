package orderly

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// Outbox topics written by the engine, with their key. Topics with a local handler change
// this database in the transaction that marks the message delivered; the others are events
// for other services and go to the configured publisher. Every event about an order is
// keyed by the order id and carries the order's event sequence (OrderEvent.Sequence), so
// that the relay delivers an order's events in commit order.
const (
	TopicPaymentRefund   = "payment.refund"   // key: payment id; payload: PaymentRef; gateway refund, then local
	TopicPaymentCancel   = "payment.cancel"   // key: payment id; payload: PaymentRef; the attempt of an order closed while it was in flight: gateway query and cancel, then settled
	TopicOrderClosed     = "order.closed"     // key: order id; payload: OrderEvent; event
	TopicOrderPaid       = "order.paid"       // key: order id; payload: OrderEvent; event
	TopicPaymentRefunded = "payment.refunded" // key: order id; payload: PaymentRef with Sequence; event
	TopicRefundExecute   = "refund.execute"   // key: order id; payload: RefundRef; gateway refund keyed by the refund id, then local
	TopicRefundSucceeded = "refund.succeeded" // key: order id; payload: RefundRef; event
	TopicRefundFailed    = "refund.failed"    // key: order id; payload: RefundRef; event
	TopicRefundReversed  = "refund.reversed"  // key: order id; payload: RefundRef; event: a confirmed refund the provider failed later
	TopicOrderRefunded   = "order.refunded"   // key: order id; payload: OrderEvent; event: everything captured was refunded
)

// builtinEventTopics are the events about an order that the engine itself writes.
var builtinEventTopics = []string{TopicOrderClosed, TopicOrderPaid, TopicPaymentRefunded,
	TopicRefundSucceeded, TopicRefundFailed, TopicRefundReversed, TopicOrderRefunded}

// IsOrderEvent reports whether topic is an event about an order whose row must carry the
// order's next event sequence (OrderEvent.Sequence: 1, 2, 3… per order, never 0): one of
// the engine's own event topics, or any topic under "order." (a flow's
// "publish:order.<x>"). The store refuses to write such a message with sequence 0
// (store.Tx.OutboxInsert), because consumers drop an event whose sequence is not above the
// last one they applied (docs/concepts/outbox-and-events.md).
func IsOrderEvent(topic string) bool {
	return strings.HasPrefix(topic, "order.") || slices.Contains(builtinEventTopics, topic)
}

// EventTopics returns the topics of the events about an order that an engine running
// flows writes, sorted: the engine's own (order.closed, order.paid, payment.refunded,
// refund.succeeded, refund.failed, refund.reversed, order.refunded) and every topic a flow's transition
// publishes ("publish:<topic>", EffectPublish). They are what a webhook may subscribe to.
func EventTopics(flows Flows) []string {
	topics := slices.Clone(builtinEventTopics)
	for _, f := range flows {
		for _, t := range f.Transitions {
			for _, e := range t.Effects {
				if topic, ok := strings.CutPrefix(e, EffectPublish); ok && topic != "" {
					topics = append(topics, topic)
				}
			}
		}
	}
	slices.Sort(topics)
	return slices.Compact(topics)
}

// Outbox message states. The store keeps a CHECK constraint with the same list.
const (
	MessagePending   = "pending"
	MessageDelivered = "delivered"
	MessageDead      = "dead"
)

// Message is a transactional outbox row: written in the same transaction as the state
// change it announces, delivered at least once by the relay (I7).
//
// Order: the relay delivers the messages of one Key in ID order. It does not claim a
// message while an earlier message of its key is pending (waiting for a retry, or claimed
// by a relay), so a broker outage or a failing handler delays the key's later messages
// instead of letting them overtake. A dead message does not hold its key: once it is dead,
// the later messages of the key proceed (a message that keeps failing never blocks the
// others, I7); re-driven, it is delivered after them, and its Sequence tells consumers it
// is older.
type Message struct {
	ID int64 `json:"id"` // this database's row id; the delivery order within a key
	// MessageID is a UUID minted with the row: the message's id outside this database, unique
	// across databases (the broker's de-duplication id, e.g. NATS's Nats-Msg-Id).
	MessageID string `json:"message_id"`
	Topic     string `json:"topic"`
	// Key is the entity the message is about and the unit of ordering: the order id for
	// every event about an order (order.*, payment.refunded) and for the order's local
	// releases; the payment id for payment.refund and payment.cancel, commands to the
	// gateway that are not held up by the order's events (a refund that a cancel finds
	// necessary follows it under the same key).
	Key string `json:"key"`
	// Sequence is, for an event, its number among the events of its key: 1, 2, 3… in commit
	// order, the same as the payload's "sequence". Zero for a message that is not an event.
	Sequence      int64           `json:"sequence"`
	Payload       json.RawMessage `json:"payload"`
	State         string          `json:"state"`
	Attempts      int64           `json:"attempts"`
	NextAttemptAt time.Time       `json:"next_attempt_at"`
	LastError     string          `json:"last_error,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	DeliveredAt   *time.Time      `json:"delivered_at,omitempty"`
	// TraceParent is the W3C traceparent of the span that wrote the message, "" when that
	// writer was not traced: the relay continues its trace when it delivers the message and
	// passes it on (NATS headers, webhook HTTP headers).
	TraceParent string `json:"trace_parent,omitempty"`
	// Group is the message's fairness group, "" for none: a relay lane keeps at most a few
	// keys of one group in flight (webhook deliveries are grouped by subscriber, so that one
	// subscriber's backlog never holds back the others').
	Group string `json:"-"`
}

// CouponRef names a coupon and the order that froze it (store.Tx.CouponsRelease releases
// CouponID only if OrderID froze it).
type CouponRef struct {
	CouponID string `json:"coupon_id"`
	OrderID  string `json:"order_id"`
}

// PaymentRef is the payload of messages about one payment: payment.refund and
// payment.cancel (keyed by the payment id; a cancel's Amount is 0) and the payment.refunded
// event (keyed by the order id).
type PaymentRef struct {
	PaymentID string `json:"payment_id"`
	OrderID   string `json:"order_id"`
	Amount    int64  `json:"amount"` // minor currency units
	// ChannelTxnID is the capture's transaction at the provider, when known.
	ChannelTxnID string `json:"channel_txn_id,omitempty"`
	// Sequence is the event's per-order sequence on payment.refunded (see OrderEvent);
	// absent on payment.refund.
	Sequence int64 `json:"sequence,omitempty"`
	// Metadata is the payment's, on payment.refunded.
	Metadata Metadata `json:"metadata,omitempty"`
}

// SetSequence implements Sequenced.
func (p *PaymentRef) SetSequence(seq int64) { p.Sequence = seq }

// OrderEvent is the payload of order.* events.
type OrderEvent struct {
	OrderID string    `json:"order_id"`
	State   State     `json:"state"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
	// Sequence numbers the events of one order (order.closed, order.paid, payment.refunded,
	// …): 1 for its first event, then +1 per event, in the order their transactions
	// committed, which is also the order in which they are published. A consumer that has
	// applied sequence n of an order can ignore any event of that order with a sequence ≤ n
	// (a redelivery, or a re-driven dead letter), and a gap means an event it has not seen
	// yet (still being retried, or dead).
	Sequence int64 `json:"sequence"`
	// Metadata is the order's as it was when the event was written.
	Metadata Metadata `json:"metadata,omitempty"`
}

// SetSequence implements Sequenced.
func (e *OrderEvent) SetSequence(seq int64) { e.Sequence = seq }

// Sequenced is the payload of an event about an order: the outbox sets its per-order
// sequence when the event is written (outbox.NewEvent).
type Sequenced interface {
	SetSequence(seq int64)
}

// TopicWebhookDeliver is the outbox topic of one delivery of one event to one merchant
// webhook subscriber (key: "webhook:<subscriber id>:<event key>"; payload: WebhookDelivery).
// The relay writes it when it delivers an event (a fan-out, in the event's own delivery
// transaction) and delivers it like any message: retried with backoff, dead after the
// configured attempts, re-drivable.
const TopicWebhookDeliver = "webhook.deliver"

// WebhookAllTopics subscribes to every event topic. A topic ending in ".*" ("order.*")
// subscribes to every event topic under its prefix.
const WebhookAllTopics = "*"

// Webhook is a merchant's subscription: the events of Topics are POSTed to URL, signed with
// Secret (Orderly-Signature, as payment callbacks are signed).
type Webhook struct {
	ID  string `json:"id"`
	URL string `json:"url"` // http:// or https://
	// Topics are the outbox event topics delivered (orderly.TopicOrderClosed, …), or
	// WebhookAllTopics.
	Topics []string `json:"topics"`
	// Secret is the HMAC-SHA256 key of the signature; shown only in the answer that creates
	// the subscription.
	Secret    string    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
}

// Wants reports whether the subscriber takes events of topic.
func (w *Webhook) Wants(topic string) bool {
	for _, t := range w.Topics {
		if t == topic || t == WebhookAllTopics {
			return true
		}
		if prefix, ok := strings.CutSuffix(t, "*"); ok && strings.HasSuffix(prefix, ".") && strings.HasPrefix(topic, prefix) {
			return true
		}
	}
	return false
}

// WebhookDelivery is the payload of a webhook.deliver message: the event to deliver and
// the subscriber to deliver it to.
type WebhookDelivery struct {
	SubscriberID string `json:"subscriber_id"`
	// EventID is the event's message id (orderly.Message.MessageID), unique across
	// databases: the subscriber's de-duplication key.
	EventID string `json:"event_id"`
	Topic   string `json:"topic"`
	Key     string `json:"key"`
	// Sequence is the event's per-order sequence (OrderEvent.Sequence): a subscriber that has
	// applied sequence n of an order ignores any event of that order with a sequence ≤ n.
	Sequence int64  `json:"sequence"`
	Payload  []byte `json:"payload"` // the event's JSON payload
}

// EventsQuery selects a page of events for a consumer catching up (GET /v1/events).
type EventsQuery struct {
	// After is the NextAfter of the previous page: the events committed after it; "" from
	// the oldest event kept.
	After string
	// Topic keeps only the events of one event topic (EventTopics); "" keeps every topic.
	Topic string
	// OrderID keeps only the events of one order (their key); "" keeps every order.
	OrderID string
	// Limit is the most events of the page: 1–1000.
	Limit int
}

// EventsPage is a page of events, in the order they were committed.
type EventsPage struct {
	Events []*PublishedEvent
	// NextAfter is the After of the next page: the last event's position, or the query's
	// After when the page is empty (poll again with it).
	NextAfter string
}

// PublishedEvent is an event as webhooks and NATS deliver it: the same id (the subscriber's
// de-duplication key), topic, key, sequence and data.
type PublishedEvent struct {
	ID        string    // the event's message id, unique across databases
	Topic     string    // e.g. order.closed
	Key       string    // the order id
	Sequence  int64     // the event's per-order sequence
	Data      []byte    // the event's JSON payload (OrderEvent, …)
	CreatedAt time.Time // when its transaction wrote it, database clock
}

// WebhookService manages merchant webhook subscriptions (package webhook; the admin API
// serves it).
type WebhookService interface {
	// Subscribe registers url for topics. secret "" means a new random one. It returns the
	// subscription and its secret (shown once). EINVALID: url not http(s), without a valid
	// host name or IP address, with a port outside 1–65535, or with credentials; no topic; a
	// topic that is not an event topic of the engine (orderly.EventTopics), "*" or a
	// "<prefix>.*" matching one; a topic listed twice; a secret under 16 bytes or over 256.
	Subscribe(ctx context.Context, url string, topics []string, secret string) (*Webhook, string, error)
	// Webhooks lists the subscriptions, by id, without their secrets.
	Webhooks(ctx context.Context) ([]*Webhook, error)
	// Unsubscribe deletes a subscription; ENOTFOUND if there is none. Its deliveries still
	// pending are dropped.
	Unsubscribe(ctx context.Context, id string) error
	// Events returns the events committed after q.After (kept for the outbox retention,
	// 7 days after their delivery), oldest first, for a consumer that missed deliveries.
	// EINVALID: an After that no page gave, a topic that is not an event topic, an order
	// id too long or with control characters, a Limit outside 1–1000.
	Events(ctx context.Context, q *EventsQuery) (*EventsPage, error)
}
