// Package natspub publishes outbox events (order.closed, order.paid, payment.refunded, and
// any other topic without a local handler) to a NATS JetStream stream.
//
// A Publisher's Handler is the outbox relay's handler for such topics: its Call publishes
// the message's payload to "<SubjectPrefix>.<topic>" and waits for the stream's ack, so a
// failed publish leaves the message pending and the relay retries it with backoff (I7).
// Delivery is at least once; the stream makes it once within its duplicate window: every
// publish carries the header Nats-Msg-Id = MsgIDPrefix + the outbox row id (DESIGN.md §6),
// and JetStream drops a message whose id it has stored within Config.Duplicates. A relay
// that published a message and crashed before marking it delivered therefore publishes it
// again without creating a second copy. Consumers that must be exactly once across longer
// gaps (a retry after the window, a re-driven dead message) de-duplicate by that header.
//
// Message layout:
//
//	subject  <SubjectPrefix>.<topic>          e.g. orderly.order.closed
//	data     the outbox payload (JSON)         e.g. {"order_id":"…","state":"closed",…}
//	headers  Nats-Msg-Id    MsgIDPrefix + decimal outbox id, e.g. "db1-42"
//	         Orderly-Topic  the outbox topic, e.g. "order.closed"
//	         Orderly-Key    the entity the event is about (order or payment id)
//
// The connection reconnects forever. While it is down, Call fails at once (the client's
// reconnect buffer is disabled: the outbox table is the durable buffer, and a publish
// parked in memory would be sent late, outside the relay's control) or, if the outage is
// not yet detected, when PublishTimeout elapses; it never blocks the relay.
package natspub
