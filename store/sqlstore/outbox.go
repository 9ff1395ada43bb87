package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

const messageColumns = `id, message_id, topic, message_key, sequence, payload, state, attempts, next_attempt_at, last_error,
	created_at, delivered_at, trace_parent, message_group`

var (
	// qOutboxInsert[k] inserts outboxChunks[k] messages with one statement.
	qOutboxInsert = func() []*query {
		qs := make([]*query, len(outboxChunks))
		for i, n := range outboxChunks {
			qs[i] = sqlText(qOutboxInsertHead + ` VALUES ` + strings.TrimSuffix(strings.Repeat(qOutboxInsertRow+", ", n), ", "))
		}
		return qs
	}()
	// qOutboxDue selects (and locks, skipping rows other relays hold) the due messages whose
	// every earlier pending message of their key comes before them in the claim's order
	// (next_attempt_at, id): an earlier one waiting for a retry or leased by a relay has a
	// later next_attempt_at than any due message and so excludes the key's later messages,
	// and the limit can never cut an earlier message while keeping a later one. Earlier due
	// messages may be claimed with them (an order's releases and event, written together);
	// claimableMessageIDs checks that they were. The claim's lane: never the topics of the
	// exclusion list (a JSON list); a lane with a topic list claims with qOutboxDueOfTopic.
	qOutboxDue = newQuery(func(d *dialect) string {
		return `SELECT id, message_key FROM outbox` + d.forceIndex("outbox_state_next_attempt_at") + `
			WHERE state = 'pending' AND next_attempt_at <= ? AND topic NOT IN (` + d.ids + `) AND ` + d.noEarlierDueLater() + `
			ORDER BY next_attempt_at, id LIMIT ?` + d.outboxDueLock()
	})
	// qOutboxDueOfTopic is qOutboxDue for the messages of one topic (a lane with Topics),
	// through the pending messages' (topic, next_attempt_at, id) index: it reads the topic's
	// rows only, where qOutboxDue's filter read every other pending message first (the
	// webhook lane, woken after each batch of the main lane, read the whole backlog of a
	// burst each time), skipping the message groups of a JSON list (those at the lane's
	// GroupLimit). Arguments: topic, topic (not on MySQL), now, groups, limit. Elsewhere than
	// on MySQL the range is a row comparison: with "topic = $1" a cached generic plan of
	// PostgreSQL estimates half the rows for any topic and scans the next_attempt_at index
	// instead.
	qOutboxDueOfTopic = newQuery(func(d *dialect) string {
		due := `(topic, next_attempt_at) >= (?, -9223372036854775807) AND (topic, next_attempt_at) <= (?, ?)`
		order := `topic, next_attempt_at, id`
		if d == mysqlDialect { // no range access on row comparisons; it plans every execution
			due, order = `topic = ? AND next_attempt_at <= ?`, `next_attempt_at, id`
		}
		return `SELECT id, message_key, message_group FROM outbox` + d.forceIndex("outbox_state_topic_next_attempt_at") + `
			WHERE state = 'pending' AND ` + due + ` AND message_group NOT IN (` + d.ids + `) AND ` + d.noEarlierDueLater() + `
			ORDER BY ` + order + ` LIMIT ?` + d.outboxDueLock()
	})
	// qOutboxLockDue locks, skipping rows other relays hold, the messages of an id list that
	// are still due: MySQL's second step of qOutboxDue (see outboxDueLock).
	qOutboxLockDue = newQuery(func(d *dialect) string {
		return d.selectByIDs("outbox.id, outbox.message_key", "outbox", "id", d.intIDs,
			`outbox.state = 'pending' AND outbox.next_attempt_at <= ?`, ` ORDER BY outbox.next_attempt_at, outbox.id`+d.skipLocked)
	})
	// qOutboxPendingOfKeys lists the pending messages of a list of keys.
	qOutboxPendingOfKeys = newQuery(func(d *dialect) string {
		if d == mysqlDialect {
			return `SELECT STRAIGHT_JOIN o.message_key, o.id FROM (` + d.ids + `) AS j
				JOIN outbox AS o FORCE INDEX (outbox_key_id) ON o.message_key = j.v WHERE o.state = 'pending'`
		}
		return `SELECT message_key, id FROM outbox WHERE message_key IN (` + d.ids + `) AND state = 'pending'`
	})
	// qOutboxSequencesAdd adds n to the counters of a JSON list of [key, n] pairs, creating
	// missing ones, and returns them where the dialect can (d.returning); qOutboxSequencesGet
	// reads them back where it cannot (MySQL).
	qOutboxSequencesAdd = newQuery(func(d *dialect) string {
		switch d {
		case mysqlDialect:
			return `INSERT INTO outbox_sequences (message_key, last_sequence)
				SELECT k, n FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
					n BIGINT PATH '$[1]')) AS t
				ON DUPLICATE KEY UPDATE last_sequence = last_sequence + VALUES(last_sequence)`
		case postgresDialect:
			return `INSERT INTO outbox_sequences (message_key, last_sequence)
				SELECT e->>0, (e->>1)::bigint FROM jsonb_array_elements(?::jsonb) AS t(e)
				ON CONFLICT (message_key) DO UPDATE SET last_sequence = outbox_sequences.last_sequence + EXCLUDED.last_sequence
				RETURNING message_key, last_sequence`
		default: // "WHERE true" tells SQLite's parser that ON CONFLICT is the upsert clause
			return `INSERT INTO outbox_sequences (message_key, last_sequence)
				SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?) WHERE true
				ON CONFLICT (message_key) DO UPDATE SET last_sequence = last_sequence + excluded.last_sequence
				RETURNING message_key, last_sequence`
		}
	})
	qOutboxSequencesGet = newQuery(func(d *dialect) string {
		return d.selectByIDs("outbox_sequences.message_key, last_sequence", "outbox_sequences", "message_key", d.ids, "1 = 1", "")
	})
	qOutboxUnclaim = newQuery(func(d *dialect) string {
		return d.updateByIDs("outbox", "id", d.intIDs, `attempts = attempts - 1, next_attempt_at = ?, last_error = ?`,
			`state = 'pending' AND attempts > 0`)
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
	qOutboxFailed = sqlText(`UPDATE outbox SET state = ?, next_attempt_at = ?, last_error = ? WHERE id = ? AND state = 'pending'`)
	qOutboxList   = sqlText(`SELECT ` + messageColumns + ` FROM outbox WHERE state = ? ORDER BY id LIMIT ?`)
	qOutboxLastID = sqlText(`SELECT COALESCE(MAX(id), 0) FROM outbox`)
	qOutboxEvents = sqlText(`SELECT ` + messageColumns + ` FROM outbox WHERE id > ? AND sequence > 0 AND created_at <= ?
		AND (? = '' OR topic = ?) AND (? = '' OR message_key = ?) ORDER BY id LIMIT ?`)
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
		if err := rows.Scan(&m.ID, &m.MessageID, &m.Topic, &m.Key, &m.Sequence, &payload, &m.State, &m.Attempts, &nextAt,
			&m.LastError, &createdAt, &deliveredAt, &m.TraceParent, &m.Group); err != nil {
			return nil, err
		}
		m.Payload = []byte(payload)
		m.NextAttemptAt, m.CreatedAt, m.DeliveredAt = fromMS(nextAt), fromMS(createdAt), timePtr(deliveredAt)
		out = append(out, &m)
	}
	return out, rows.Err()
}

// outboxChunks are the row counts of the prepared multi-row inserts, largest first: 128
// and 16 messages a statement; the rest (fewer than 16) is one statement too, prepared
// once per row count on SQLite (insertMany), so that a batch of transitions writes its
// events with one or two statements.
var outboxChunks = []int{128, 16, 1}

// The outbox insert's parts, for insertMany.
const (
	qOutboxInsertHead = `INSERT INTO outbox (message_id, topic, message_key, sequence, payload, next_attempt_at, created_at, trace_parent,
		message_group)`
	qOutboxInsertRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// OutboxInsert implements store.Tx. A message without a TraceParent carries the span of
// ctx, if any.
func (t *tx) OutboxInsert(ctx context.Context, msgs []*store.OutboxInsertParams) error {
	for _, m := range msgs {
		if m.Sequence < 1 && orderly.IsOrderEvent(m.Topic) {
			return fmt.Errorf("outbox %s of key %s: an event about an order needs its sequence (outbox.NewEvent); refused with sequence %d",
				m.Topic, m.Key, m.Sequence)
		}
	}
	ctxTrace := telemetry.TraceParent(ctx)
	rowArgs := func(msgs []*store.OutboxInsertParams) ([]any, error) {
		args := make([]any, 0, 9*len(msgs))
		for _, m := range msgs {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("outbox message id: %w", err)
			}
			at := ms(m.Now)
			args = append(args, id.String(), m.Topic, m.Key, m.Sequence, string(m.Payload), at, at, cmp.Or(m.TraceParent, ctxTrace), m.Group)
		}
		return args, nil
	}
	for k, n := range outboxChunks {
		if n == 1 && len(msgs) > 1 {
			args, err := rowArgs(msgs)
			if err != nil {
				return err
			}
			return t.insertMany(ctx, fmt.Sprintf("%d outbox messages", len(msgs)), qOutboxInsertHead, qOutboxInsertRow, args)
		}
		for len(msgs) >= n {
			args, err := rowArgs(msgs[:n])
			if err != nil {
				return err
			}
			if _, err := t.exec(ctx, "outbox messages", qOutboxInsert[k], args...); err != nil {
				return err
			}
			msgs = msgs[n:]
		}
	}
	return nil
}

// OutboxSequences implements store.Tx.
func (t *tx) OutboxSequences(ctx context.Context, keys []string) ([]int64, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	counts := map[string]int64{}
	for _, k := range keys {
		counts[k]++
	}
	// Sorted, so that transactions lock the counters of overlapping key sets in one order.
	distinct := slices.Sorted(maps.Keys(counts))
	pairs := make([][2]any, len(distinct))
	for i, k := range distinct {
		pairs[i] = [2]any{k, counts[k]}
	}
	b, err := json.Marshal(pairs)
	if err != nil {
		return nil, err
	}
	var rows *sql.Rows
	if t.db.d.returning {
		rows, err = t.query(ctx, qOutboxSequencesAdd, string(b))
	} else if _, err = t.exec(ctx, "reserve event sequences", qOutboxSequencesAdd, string(b)); err == nil {
		rows, err = t.query(ctx, qOutboxSequencesGet, jsonList(distinct))
	}
	if err != nil {
		return nil, fmt.Errorf("reserve event sequences: %w", err)
	}
	defer rows.Close()
	next := make(map[string]int64, len(distinct)) // the first number reserved for each key
	for rows.Next() {
		var (
			k    string
			last int64
		)
		if err := rows.Scan(&k, &last); err != nil {
			return nil, fmt.Errorf("reserve event sequences: %w", err)
		}
		next[k] = last - counts[k] + 1
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reserve event sequences: %w", err)
	}
	out := make([]int64, len(keys))
	for i, k := range keys {
		n, ok := next[k]
		if !ok {
			return nil, fmt.Errorf("reserve event sequences: no counter for key %q", k)
		}
		out[i], next[k] = n, n+1
	}
	return out, nil
}

// OutboxClaim implements store.Tx.
func (t *tx) OutboxClaim(ctx context.Context, p *store.OutboxClaimParams) ([]*orderly.Message, error) {
	if t.db.d == postgresDialect {
		// A prepared statement's cached generic plan is made from the statistics of its
		// first executions. Made while the outbox was empty (a new database, or one
		// analyzed before its first burst), the claim's plan joins the pending messages
		// with themselves by two sequential scans: 30 000 pending messages took minutes
		// per claim, and the relay stalled until autovacuum analyzed the table. A custom
		// plan each time sees the table's size now (TestClaimPlanAfterEmptyStatistics).
		if _, err := t.execBuilt(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
			return nil, fmt.Errorf("claim outbox: %w", t.check(err))
		}
	}
	ids, err := t.claimableMessageIDs(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	list := idList(ids)
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

// noEarlierDueLater is the condition of qOutboxDue and qOutboxDueOfTopic that no earlier
// pending message of the same key is due later (see qOutboxDue).
func (d *dialect) noEarlierDueLater() string {
	return `NOT EXISTS (SELECT 1 FROM outbox AS e` + d.forceIndex("outbox_key_id") + ` WHERE e.message_key = outbox.message_key
		AND e.state = 'pending' AND e.id < outbox.id AND e.next_attempt_at > outbox.next_attempt_at)`
}

// outboxDueLock is the locking clause of qOutboxDue. MariaDB's locking reads also lock
// (and skip) the rows its NOT EXISTS subquery reads, which deadlocks concurrent claims: on
// MySQL qOutboxDue is a plain read, and qOutboxLockDue then locks what it found.
func (d *dialect) outboxDueLock() string {
	if d == mysqlDialect {
		return ""
	}
	return d.skipLocked
}

// claimableMessageIDs selects (and locks, skipping rows other relays hold) the due messages
// of qOutboxDue, then drops those with an earlier pending message of their key that is not
// among them: one skipped because another relay is claiming it, or one that qOutboxDue
// excluded itself (it has an earlier message due later).
func (t *tx) claimableMessageIDs(ctx context.Context, p *store.OutboxClaimParams) ([]int64, error) {
	var (
		due []keyedID
		err error
	)
	if len(p.Topics) == 0 {
		except := p.ExcludeTopics
		if except == nil {
			except = []string{}
		}
		if due, err = t.keyedIDs(ctx, qOutboxDue, ms(p.Now), jsonList(except), p.Limit); err != nil {
			return nil, err
		}
	}
	for _, topic := range p.Topics {
		if len(due) >= p.Limit {
			break
		} else if slices.Contains(p.ExcludeTopics, topic) {
			continue
		}
		more, err := t.dueOfTopic(ctx, p, topic, p.Limit-len(due))
		if err != nil {
			return nil, err
		}
		due = append(due, more...)
	}
	if len(due) == 0 {
		return nil, nil
	}
	if t.db.d == mysqlDialect {
		ids := make([]int64, len(due))
		for i, m := range due {
			ids[i] = m.id
		}
		if due, err = t.keyedIDs(ctx, qOutboxLockDue, idList(ids), ms(p.Now)); err != nil || len(due) == 0 {
			return nil, err
		}
	}
	selected := make(map[int64]bool, len(due))
	keySet := map[string]bool{}
	for _, m := range due {
		selected[m.id] = true
		keySet[m.key] = true
	}
	pending, err := t.keyedIDs(ctx, qOutboxPendingOfKeys, jsonList(slices.Collect(maps.Keys(keySet))))
	if err != nil {
		return nil, err
	}
	// firstOut[k] is the lowest id of a pending message of key k that was not selected.
	firstOut := map[string]int64{}
	for _, m := range pending {
		if first, ok := firstOut[m.key]; !selected[m.id] && (!ok || m.id < first) {
			firstOut[m.key] = m.id
		}
	}
	ids := make([]int64, 0, len(due))
	for _, m := range due {
		if first, ok := firstOut[m.key]; !ok || m.id < first {
			ids = append(ids, m.id)
		}
	}
	return ids, nil
}

// maxGroupReads bounds the reads of one claim of a topic that skips the message groups at
// their limit (OutboxClaimParams.GroupLimit): each read past the first follows one that
// found a group at its limit, and reads on without it.
const maxGroupReads = 4

// dueOfTopic reads up to limit due messages of topic with qOutboxDueOfTopic. With a
// GroupLimit, it takes at most GroupLimit-Busy[group] keys of each group and reads again
// without the groups that reached their limit, so that a group's backlog (a subscriber's
// re-driven dead letters, due before everyone's fresh work) never fills the claim. The
// messages of a key it leaves out come after those it takes (claim order), and
// claimableMessageIDs keeps each key's messages in order.
func (t *tx) dueOfTopic(ctx context.Context, p *store.OutboxClaimParams, topic string, limit int) ([]keyedID, error) {
	read := func(full []string) ([]keyedID, error) {
		if full == nil {
			full = []string{} // "[]", not "null"
		}
		args := []any{topic, topic, ms(p.Now), jsonList(full), limit}
		if t.db.d == mysqlDialect {
			args = args[1:]
		}
		return t.keyedIDs(ctx, qOutboxDueOfTopic, args...)
	}
	if p.GroupLimit <= 0 {
		return read(nil)
	}
	full := []string{}
	for g, n := range p.Busy {
		if g != "" && n >= p.GroupLimit {
			full = append(full, g)
		}
	}
	slices.Sort(full)
	var (
		out   []keyedID
		taken = map[int64]bool{}
		keys  = map[string]map[string]bool{} // per group, the keys taken
	)
	for range maxGroupReads {
		rows, err := read(full)
		if err != nil {
			return nil, err
		}
		filled := false
		for _, m := range rows {
			if len(out) >= limit {
				break
			}
			if taken[m.id] || slices.Contains(full, m.group) {
				continue
			}
			if m.group != "" && !keys[m.group][m.key] {
				if p.Busy[m.group]+len(keys[m.group]) >= p.GroupLimit {
					full, filled = append(full, m.group), true
					continue
				}
				if keys[m.group] == nil {
					keys[m.group] = map[string]bool{}
				}
				keys[m.group][m.key] = true
			}
			taken[m.id] = true
			out = append(out, m)
		}
		if !filled || len(out) >= limit || len(rows) < limit {
			break
		}
	}
	return out, nil
}

// keyedID is a message id with its key (and, from qOutboxDueOfTopic, its group).
type keyedID struct {
	id    int64
	key   string
	group string
}

// keyedIDs runs a query that yields (id, message_key) rows, or (message_key, id) rows for
// qOutboxPendingOfKeys.
func (t *tx) keyedIDs(ctx context.Context, q *query, args ...any) ([]keyedID, error) {
	rows, err := t.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []keyedID
	for rows.Next() {
		var m keyedID
		switch q {
		case qOutboxDueOfTopic:
			err = rows.Scan(&m.id, &m.key, &m.group)
		case qOutboxPendingOfKeys:
			err = rows.Scan(&m.key, &m.id)
		default:
			err = rows.Scan(&m.id, &m.key)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// OutboxUnclaim implements store.Tx.
func (t *tx) OutboxUnclaim(ctx context.Context, ids []int64, now time.Time, reason string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.exec(ctx, "unclaim messages", qOutboxUnclaim, t.db.d.byIDsArgs(idList(ids), []any{ms(now), reason}, nil)...)
	return err
}

// OutboxMarkDelivered implements store.Tx.
func (t *tx) OutboxMarkDelivered(ctx context.Context, ids []int64, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.exec(ctx, "mark delivered", qOutboxDelivered, t.db.d.byIDsArgs(idList(ids), []any{ms(now)}, nil)...)
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

// OutboxEvents implements store.Tx.
func (t *tx) OutboxEvents(ctx context.Context, p *store.OutboxEventsParams) ([]*orderly.Message, error) {
	rows, err := t.query(ctx, qOutboxEvents, p.AfterID, ms(p.Before), p.Topic, p.Topic, p.Key, p.Key, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return scanMessages(rows)
}

// OutboxLastID implements store.Tx.
func (t *tx) OutboxLastID(ctx context.Context) (int64, error) {
	var id int64
	err := t.queryRow(ctx, qOutboxLastID).Scan(&id)
	return id, translate(err, "last outbox id")
}

// OutboxDeleteDelivered implements store.Tx.
func (t *tx) OutboxDeleteDelivered(ctx context.Context, before time.Time, limit int) (int64, error) {
	return t.exec(ctx, "delete delivered messages", qOutboxDeleteDelivered, ms(before), limit)
}
