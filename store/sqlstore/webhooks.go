package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
)

const webhookColumns = `id, url, topics, secret, created_at`

var (
	qWebhookInsert = sqlText(`INSERT INTO webhook_subscribers (` + webhookColumns + `) VALUES (?, ?, ?, ?, ?)`)
	qWebhookGet    = sqlText(`SELECT ` + webhookColumns + ` FROM webhook_subscribers WHERE id = ?`)
	qWebhookList   = sqlText(`SELECT ` + webhookColumns + ` FROM webhook_subscribers ORDER BY id`)
	qWebhookDelete = sqlText(`DELETE FROM webhook_subscribers WHERE id = ?`)
	// qOrderTraceInsert keeps the first traceparent recorded for an order.
	qOrderTraceInsert = newQuery(func(d *dialect) string {
		if d == mysqlDialect {
			return `INSERT IGNORE INTO order_traces (order_id, trace_parent) VALUES (?, ?)`
		}
		return `INSERT INTO order_traces (order_id, trace_parent) VALUES (?, ?) ON CONFLICT (order_id) DO NOTHING`
	})
	qOrderTraces = newQuery(func(d *dialect) string {
		return d.selectByIDs("order_traces.order_id, trace_parent", "order_traces", "order_id", d.ids, "1 = 1", "")
	})
)

func scanWebhook(r rowScanner) (*orderly.Webhook, error) {
	var (
		w         orderly.Webhook
		topics    string
		createdAt int64
	)
	if err := r.Scan(&w.ID, &w.URL, &topics, &w.Secret, &createdAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(topics), &w.Topics); err != nil {
		return nil, fmt.Errorf("webhook %s topics: %w", w.ID, err)
	}
	w.CreatedAt = fromMS(createdAt)
	return &w, nil
}

// WebhookInsert implements store.Tx.
func (t *tx) WebhookInsert(ctx context.Context, w *orderly.Webhook) error {
	topics := w.Topics
	if topics == nil {
		topics = []string{}
	}
	_, err := t.exec(ctx, "webhook "+w.ID, qWebhookInsert, w.ID, w.URL, jsonList(topics), w.Secret, ms(w.CreatedAt))
	return err
}

// WebhookGet implements store.Tx.
func (t *tx) WebhookGet(ctx context.Context, id string) (*orderly.Webhook, error) {
	w, err := scanWebhook(t.queryRow(ctx, qWebhookGet, id))
	return w, translate(err, "webhook "+id)
}

// WebhookList implements store.Tx.
func (t *tx) WebhookList(ctx context.Context) ([]*orderly.Webhook, error) {
	rows, err := t.query(ctx, qWebhookList)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, fmt.Errorf("list webhooks: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// WebhookDelete implements store.Tx.
func (t *tx) WebhookDelete(ctx context.Context, id string) (bool, error) {
	n, err := t.exec(ctx, "delete webhook "+id, qWebhookDelete, id)
	return n == 1, err
}

// OrderTraceInsert implements store.Tx.
func (t *tx) OrderTraceInsert(ctx context.Context, orderID, traceParent string) error {
	_, err := t.exec(ctx, "trace of order "+orderID, qOrderTraceInsert, orderID, traceParent)
	return err
}

// OrderTraces implements store.Tx.
func (t *tx) OrderTraces(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := t.query(ctx, qOrderTraces, jsonList(ids))
	if err != nil {
		return nil, fmt.Errorf("order traces: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, tp string
		if err := rows.Scan(&id, &tp); err != nil {
			return nil, fmt.Errorf("order traces: %w", err)
		}
		out[id] = tp
	}
	return out, rows.Err()
}

var (
	qOutboxPendingCount = sqlText(`SELECT COUNT(*), MIN(created_at) FROM outbox WHERE state = 'pending'`)
	qOutboxDeadCount    = sqlText(`SELECT COUNT(*) FROM outbox WHERE state = 'dead'`)
)

// OutboxBacklog implements store.Tx.
func (t *tx) OutboxBacklog(ctx context.Context) (pending, dead int64, oldest time.Time, ok bool, err error) {
	var first sql.NullInt64
	if err := t.queryRow(ctx, qOutboxPendingCount).Scan(&pending, &first); err != nil {
		return 0, 0, time.Time{}, false, fmt.Errorf("outbox backlog: %w", err)
	}
	if err := t.queryRow(ctx, qOutboxDeadCount).Scan(&dead); err != nil {
		return 0, 0, time.Time{}, false, fmt.Errorf("outbox backlog: %w", err)
	}
	if first.Valid {
		oldest, ok = fromMS(first.Int64), true
	}
	return pending, dead, oldest, ok, nil
}
