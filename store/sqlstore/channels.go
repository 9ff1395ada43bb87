package sqlstore

import (
	"context"
	"fmt"

	"github.com/orderlyhq/orderly/store"
)

var (
	// qChannelEventInsert inserts once per (channel, event_id). MySQL: the no-op update
	// reports 0 rows for a duplicate (the driver does not ask for found rows); INSERT IGNORE
	// would also swallow a CHECK violation.
	qChannelEventInsert = newQuery(func(d *dialect) string {
		if d == mysqlDialect {
			return `INSERT INTO channel_events (channel, event_id, kind, payment_id, received_at) VALUES (?, ?, ?, ?, ?)
				ON DUPLICATE KEY UPDATE event_id = event_id`
		}
		return `INSERT INTO channel_events (channel, event_id, kind, payment_id, received_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (channel, event_id) DO NOTHING`
	})
	qChannelEventList = sqlText(`SELECT channel, event_id, kind, payment_id, received_at FROM channel_events
		WHERE payment_id = ? ORDER BY received_at, channel, event_id LIMIT ?`)
)

// ChannelEventInsert implements store.Tx.
func (t *tx) ChannelEventInsert(ctx context.Context, e *store.ChannelEvent) (bool, error) {
	n, err := t.exec(ctx, "channel event", qChannelEventInsert, e.Channel, e.EventID, e.Kind, e.PaymentID, ms(e.ReceivedAt))
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// ChannelEventList implements store.Tx.
func (t *tx) ChannelEventList(ctx context.Context, paymentID string, limit int) ([]*store.ChannelEvent, error) {
	rows, err := t.query(ctx, qChannelEventList, paymentID, limit)
	if err != nil {
		return nil, fmt.Errorf("channel events of %s: %w", paymentID, err)
	}
	defer rows.Close()
	var out []*store.ChannelEvent
	for rows.Next() {
		var (
			e  store.ChannelEvent
			at int64
		)
		if err := rows.Scan(&e.Channel, &e.EventID, &e.Kind, &e.PaymentID, &at); err != nil {
			return nil, fmt.Errorf("channel events of %s: %w", paymentID, err)
		}
		e.ReceivedAt = fromMS(at)
		out = append(out, &e)
	}
	return out, rows.Err()
}
