// Package natspub publishes outbox events (order.closed, order.paid, payment.refunded, and
// any other topic without a local handler) to a NATS JetStream stream.
//
// A Publisher's Handler is the outbox relay's handler for such topics: its Call publishes
// the message's payload to "<SubjectPrefix>.<topic>" and waits for the stream's ack, so a
// failed publish leaves the message pending and the relay retries it with backoff (I7).
// Delivery is at least once; the stream makes it once within its duplicate window: every
// publish carries the header Nats-Msg-Id = MsgIDPrefix + the message's MessageID, a UUID
// minted with the outbox row (docs/concepts/outbox-and-events.md), and JetStream drops a message whose id it has
// stored within Config.Duplicates. A relay that published a message and crashed before
// marking it delivered therefore publishes it again without creating a second copy; the
// duplicate ack counts as a delivery only after the stored copy was read back and found
// to be this message (same topic, key and payload). Since the id is unique across
// databases, another deployment, a restored backup or a test publishing to the same stream
// never has its events dropped; if the stream does hold another message under our id, the
// publish fails and the relay retries it. Consumers that must be exactly once across longer
// gaps (a retry after the window, a re-driven dead message) de-duplicate by that header or
// by the event's per-order sequence.
//
// Order: every event about an order is keyed by the order id and the relay publishes the
// events of one order in commit order, never one while an earlier one waits for a retry
// (package outbox). Orderly-Sequence (and the payload's "sequence") numbers them 1, 2, 3…
//
// Message layout:
//
//	subject  <SubjectPrefix>.<topic>          e.g. orderly.order.closed
//	data     the outbox payload (JSON)         e.g. {"order_id":"…","state":"closed",…,"sequence":1}
//	headers  Nats-Msg-Id       MsgIDPrefix + message UUID, e.g. "0193a5c2-…"
//	         Orderly-Topic     the outbox topic, e.g. "order.closed"
//	         Orderly-Key       the order id the event is about
//	         Orderly-Sequence  the event's per-order sequence, e.g. "2"
//
// The connection reconnects forever. While it is down, Call fails at once (the client's
// reconnect buffer is disabled: the outbox table is the durable buffer, and a publish
// parked in memory would be sent late, outside the relay's control) or, if the outage is
// not yet detected, when PublishTimeout elapses; it never blocks the relay.
package natspub
