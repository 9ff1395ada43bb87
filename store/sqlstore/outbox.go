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

const messageColumns = `id, topic, message_key, payload, state, attempts, next_attempt_at, last_error, created_at, delivered_at`

var (
	// qOutboxInsert[k] inserts outboxChunks[k] messages with one statement.
	qOutboxInsert = func() []*query {
		qs := make([]*query, len(outboxChunks))
		for i, n := range outboxChunks {
			qs[i] = sqlText(`INSERT INTO outbox (topic, message_key, payload, next_attempt_at, created_at) VALUES ` +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", "))
		}
		return qs
	}()
	qOutboxDue = newQuery(func(d *dialect) string {
		return `SELECT id FROM outbox` + d.forceIndex("outbox_state_next_attempt_at") + ` WHERE state = 'pending' AND next_attempt_at <= ?
			ORDER BY next_attempt_at, id LIMIT ?` + d.skipLocked
	})
	qOutboxLease = newQuery(func(d *dialect) string {
		return d.updateByIDs("outbox", "id", d.intIDs, `next_attempt_at = ?, attempts = attempts + 1`, "")
	})
	qOutboxByIDs = newQuery(func(d *dialect) string {
		return `SELECT ` + messageColumns + ` FROM outbox WHERE id IN (` + d.intIDs + `) ORDER BY id`
	})
	qOutboxDelivered = newQuery(func(d *dialect) string {
		return d.updateByIDs("outbox", "id", d.intIDs, `state = 'delivered', delivered_at = ?, last_error = ''`, `state = 'pending'`)
	})
	qOutboxFailed  = sqlText(`UPDATE outbox SET state = ?, next_attempt_at = ?, last_error = ? WHERE id = ? AND state = 'pending'`)
	qOutboxList    = sqlText(`SELECT ` + messageColumns + ` FROM outbox WHERE state = ? ORDER BY id LIMIT ?`)
	qOutboxCounts  = sqlText(`SELECT state, COUNT(*) FROM outbox GROUP BY state`)
	qOutboxRedrive = sqlText(`UPDATE outbox SET state = 'pending', attempts = 0, next_attempt_at = ?
		WHERE id = ? AND state = 'dead'`)
	qOutboxDeleteDelivered = newQuery(func(d *dialect) string {
		if d == mysqlDialect { // MySQL has no LIMIT in an IN subquery, but DELETE … LIMIT
			return `DELETE FROM outbox WHERE state = 'delivered' AND delivered_at < ? ORDER BY delivered_at LIMIT ?`
		}
		return `DELETE FROM outbox WHERE id IN (SELECT id FROM outbox
			WHERE state = 'delivered' AND delivered_at < ? ORDER BY delivered_at LIMIT ?)`
	})
)

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

// outboxChunks are the row counts of the prepared multi-row inserts, largest first: any
// number of messages is written with at most a few statements of constant text.
var outboxChunks = []int{128, 16, 1}

// OutboxInsert implements store.Tx.
func (t *tx) OutboxInsert(ctx context.Context, msgs []*store.OutboxInsertParams) error {
	for k, n := range outboxChunks {
		for len(msgs) >= n {
			args := make([]any, 0, 5*n)
			for _, m := range msgs[:n] {
				at := ms(m.Now)
				args = append(args, m.Topic, m.Key, string(m.Payload), at, at)
			}
			if _, err := t.exec(ctx, "outbox messages", qOutboxInsert[k], args...); err != nil {
				return err
			}
			msgs = msgs[n:]
		}
	}
	return nil
}

// OutboxClaim implements store.Tx.
func (t *tx) OutboxClaim(ctx context.Context, p *store.OutboxClaimParams) ([]*orderly.Message, error) {
	ids, err := t.dueMessageIDs(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	list := jsonList(ids)
	if _, err := t.exec(ctx, "lease outbox", qOutboxLease, t.db.d.byIDsArgs(list, []any{ms(p.LeaseUntil)}, nil)...); err != nil {
		return nil, err
	}
	rows, err := t.query(ctx, qOutboxByIDs, list)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	msgs, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	return msgs, nil
}

// dueMessageIDs selects (and locks, skipping rows other relays hold) the due messages.
func (t *tx) dueMessageIDs(ctx context.Context, p *store.OutboxClaimParams) ([]int64, error) {
	rows, err := t.query(ctx, qOutboxDue, ms(p.Now), p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// OutboxMarkDelivered implements store.Tx.
func (t *tx) OutboxMarkDelivered(ctx context.Context, ids []int64, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.exec(ctx, "mark delivered", qOutboxDelivered, t.db.d.byIDsArgs(jsonList(ids), []any{ms(now)}, nil)...)
	return err
}

// OutboxMarkFailed implements store.Tx.
func (t *tx) OutboxMarkFailed(ctx context.Context, p *store.OutboxMarkFailedParams) error {
	state := orderly.MessagePending
	if p.Dead {
		state = orderly.MessageDead
	}
	_, err := t.exec(ctx, fmt.Sprintf("mark message %d failed", p.ID), qOutboxFailed, state, ms(p.NextAttemptAt), p.LastError, p.ID)
	return err
}

// OutboxList implements store.Tx.
func (t *tx) OutboxList(ctx context.Context, state string, limit int) ([]*orderly.Message, error) {
	rows, err := t.query(ctx, qOutboxList, state, limit)
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
	rows, err := t.query(ctx, qOutboxCounts)
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
	n, err := t.exec(ctx, fmt.Sprintf("re-drive message %d", id), qOutboxRedrive, ms(now), id)
	return n == 1, err
}

// OutboxDeleteDelivered implements store.Tx.
func (t *tx) OutboxDeleteDelivered(ctx context.Context, before time.Time, limit int) (int64, error) {
	return t.exec(ctx, "delete delivered messages", qOutboxDeleteDelivered, ms(before), limit)
}
