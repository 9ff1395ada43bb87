package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// NewMessage builds an outbox row to insert in the caller's transaction: a command or a
// local effect, which carries no sequence (for an event about an order, use NewEvent).
// payload is marshalled to JSON; an error means payload is not JSON-marshalable. The
// transaction must serialize the writers of key (see store.Tx.OutboxInsert): it has changed
// the row of the entity key names (the order, the payment) before the insert.
func NewMessage(topic, key string, payload any, now time.Time) (*store.OutboxInsertParams, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("outbox %s payload: %w", topic, err)
	}
	return &store.OutboxInsertParams{Topic: topic, Key: key, Payload: b, Now: now}, nil
}

// NewEvent builds an event about an order to insert in tx: keyed by orderID, with the
// order's next event sequence, reserved in tx (store.Tx.OutboxSequences), set on payload
// and on the row. Insert it in the same transaction, after the messages of the order
// written before it (the relay delivers a key's messages in insert order).
func NewEvent(ctx context.Context, tx store.Tx, topic, orderID string, payload orderly.Sequenced, now time.Time) (*store.OutboxInsertParams, error) {
	seqs, err := tx.OutboxSequences(ctx, []string{orderID})
	if err != nil {
		return nil, fmt.Errorf("outbox %s for order %s: %w", topic, orderID, err)
	}
	return sequenced(topic, orderID, payload, seqs[0], now)
}

// NewEvents is NewEvent for many orders with one reservation: event i is about orderIDs[i]
// with payloads[i]. An order may appear more than once; its events are numbered in list
// order.
func NewEvents(ctx context.Context, tx store.Tx, topic string, orderIDs []string, payloads []orderly.Sequenced, now time.Time) ([]*store.OutboxInsertParams, error) {
	if len(orderIDs) != len(payloads) {
		return nil, fmt.Errorf("outbox %s: %d order ids for %d payloads", topic, len(orderIDs), len(payloads))
	}
	seqs, err := tx.OutboxSequences(ctx, orderIDs)
	if err != nil {
		return nil, fmt.Errorf("outbox %s for %d orders: %w", topic, len(orderIDs), err)
	}
	out := make([]*store.OutboxInsertParams, len(orderIDs))
	for i, id := range orderIDs {
		if out[i], err = sequenced(topic, id, payloads[i], seqs[i], now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sequenced(topic, key string, payload orderly.Sequenced, seq int64, now time.Time) (*store.OutboxInsertParams, error) {
	payload.SetSequence(seq)
	m, err := NewMessage(topic, key, payload, now)
	if err != nil {
		return nil, err
	}
	m.Sequence = seq
	return m, nil
}
