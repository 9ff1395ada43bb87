package orderly

import (
	"context"
	"strings"
	"time"
)

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
