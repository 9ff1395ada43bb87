package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

const messageColumns = `id, topic, key, payload, state, attempts, next_attempt_at, last_error, created_at, delivered_at`

func scanMessages(rows *sql.Rows) ([]*orderly.Message, error) {
	defer rows.Close()
	var out []*orderly.Message
	for rows.Next() {
		var (
			m                 orderly.Message
			payload           string
			nextAt, createdAt int64
			deliveredAt       sql.NullInt64
		)
		if err := rows.Scan(&m.ID, &m.Topic, &m.Key, &payload, &m.State, &m.Attempts, &nextAt, &m.LastError,
			&createdAt, &deliveredAt); err != nil {
			return nil, err
		}
		m.Payload = []byte(payload)
		m.NextAttemptAt, m.CreatedAt, m.DeliveredAt = fromMS(nextAt), fromMS(createdAt), timePtr(deliveredAt)
		out = append(out, &m)
	}
	return out, rows.Err()
}

// OutboxInsert implements store.Tx.
func (t *tx) OutboxInsert(ctx context.Context, msgs []*store.OutboxInsertParams) error {
	const chunk = 500
	for len(msgs) > 0 {
		n := min(chunk, len(msgs))
		args := make([]any, 0, n*5)
		for _, m := range msgs[:n] {
			args = append(args, m.Topic, m.Key, string(m.Payload), ms(m.Now), ms(m.Now))
		}
		_, err := t.exec(ctx, "outbox messages", `INSERT INTO outbox (topic, key, payload, next_attempt_at, created_at)
			VALUES `+strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", "), args...)
		if err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// OutboxClaim implements store.Tx.
func (t *tx) OutboxClaim(ctx context.Context, p *store.OutboxClaimParams) ([]*orderly.Message, error) {
	rows, err := t.q.QueryContext(ctx, `UPDATE outbox SET next_attempt_at = ?, attempts = attempts + 1
		WHERE id IN (SELECT id FROM outbox WHERE state = 'pending' AND next_attempt_at <= ?
			ORDER BY next_attempt_at, id LIMIT ?)
		RETURNING `+messageColumns, ms(p.LeaseUntil), ms(p.Now), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	msgs, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	return msgs, nil
}

// OutboxMarkDelivered implements store.Tx.
func (t *tx) OutboxMarkDelivered(ctx context.Context, ids []int64, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.exec(ctx, "mark delivered", `UPDATE outbox SET state = 'delivered', delivered_at = ?, last_error = ''
		WHERE state = 'pending' AND id IN (`+placeholders(len(ids))+`)`, append([]any{ms(now)}, anys(ids)...)...)
	return err
}

// OutboxMarkFailed implements store.Tx.
func (t *tx) OutboxMarkFailed(ctx context.Context, p *store.OutboxMarkFailedParams) error {
	state := orderly.MessagePending
	if p.Dead {
		state = orderly.MessageDead
	}
	_, err := t.exec(ctx, fmt.Sprintf("mark message %d failed", p.ID), `UPDATE outbox
		SET state = ?, next_attempt_at = ?, last_error = ? WHERE id = ? AND state = 'pending'`,
		state, ms(p.NextAttemptAt), p.LastError, p.ID)
	return err
}

// OutboxList implements store.Tx.
func (t *tx) OutboxList(ctx context.Context, state string, limit int) ([]*orderly.Message, error) {
	rows, err := t.q.QueryContext(ctx, `SELECT `+messageColumns+` FROM outbox WHERE state = ? ORDER BY id LIMIT ?`,
		state, limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	msgs, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return msgs, nil
}

// OutboxCounts implements store.Tx.
func (t *tx) OutboxCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := t.q.QueryContext(ctx, `SELECT state, COUNT(*) FROM outbox GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count outbox: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{orderly.MessagePending: 0, orderly.MessageDelivered: 0, orderly.MessageDead: 0}
	for rows.Next() {
		var (
			state string
			n     int64
		)
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count outbox: %w", err)
		}
		out[state] = n
	}
	return out, rows.Err()
}

// OutboxRedrive implements store.Tx.
func (t *tx) OutboxRedrive(ctx context.Context, id int64, now time.Time) (bool, error) {
	n, err := t.exec(ctx, fmt.Sprintf("re-drive message %d", id), `UPDATE outbox
		SET state = 'pending', attempts = 0, next_attempt_at = ? WHERE id = ? AND state = 'dead'`, ms(now), id)
	return n == 1, err
}

// OutboxDeleteDelivered implements store.Tx.
func (t *tx) OutboxDeleteDelivered(ctx context.Context, before time.Time, limit int) (int64, error) {
	return t.exec(ctx, "delete delivered messages", `DELETE FROM outbox WHERE id IN (SELECT id FROM outbox
		WHERE state = 'delivered' AND delivered_at < ? ORDER BY delivered_at LIMIT ?)`, ms(before), limit)
}
