package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// dueColumns are the columns of a store.DueOrder.
const dueColumns = `orders.id, flow, state, pay_status, current_payment_id, coupon_id, close_at, wake_at`

const orderColumns = `id, user_id, flow, state, pay_status, items, amount, currency, coupon_id,
	current_payment_id, created_at, expires_at, close_at, closed_at, close_reason, paid_at, version, refunded_amount, metadata`

// The INSERTs of orders and audit rows, head and one row's VALUES tuple: one row prepared
// (qOrderInsert, qTransitionInsert) or many (OrdersInsertMany, TransitionsInsertMany).
const (
	qOrderInsertHead = `INSERT INTO orders (id, user_id, flow, state, pay_status, items, amount,
		currency, coupon_id, current_payment_id, created_at, expires_at, close_at, wake_at, closed_at,
		close_reason, paid_at, version, idempotency_key, request_hash, metadata)`
	qOrderInsertRow       = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qTransitionInsertHead = `INSERT INTO order_transitions (order_id, from_state, to_state, event, cause, actor, at,
		trace_id, pay_status_from, pay_status_to)`
	qTransitionInsertRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

var (
	qOrderInsert = sqlText(qOrderInsertHead + ` VALUES ` + qOrderInsertRow)
	qOrderGet    = sqlText(`SELECT ` + orderColumns + ` FROM orders WHERE id = ?`)
	qOrderByKey  = sqlText(`SELECT id, request_hash FROM orders WHERE user_id = ? AND idempotency_key = ?`)
	// qOrdersLock selects (and locks, where the dialect has row locks) the orders of a
	// transition that pass its guards; qOrdersTransition then changes exactly those.
	qOrdersLock = newQuery(func(d *dialect) string {
		return d.selectByIDs("orders.id, orders.pay_status, orders.metadata", "orders", "id", d.ids, `state = ? AND pay_status IN (`+stateIn+`) AND close_at <= ?`,
			` ORDER BY orders.id`+d.lockRows)
	})
	qOrdersTransition = newQuery(func(d *dialect) string { // the rows qOrdersLock locked
		return d.updateLockedByIDs("orders", "id", d.ids, `state = ?, version = version + 1, pay_status = COALESCE(?, pay_status),
			close_reason = COALESCE(?, close_reason), closed_at = COALESCE(?, closed_at), paid_at = COALESCE(?, paid_at),
			wake_at = CASE WHEN ? = 1 THEN close_at ELSE NULL END`, `state = ?`)
	})
	qTransitionsInsert = newQuery(func(d *dialect) string {
		return `INSERT INTO order_transitions (order_id, from_state, to_state, event, cause, actor, at, trace_id,
			pay_status_from, pay_status_to)
			SELECT ids.v, ` + d.typed("text") + `, ` + d.typed("text") + `, ` + d.typed("text") + `, ` + d.typed("text") + `, ` +
			d.typed("text") + `, ` + d.typed("bigint") + `, ` + d.typed("text") + `, ` + d.typed("text") + `, ` +
			d.typed("text") + ` FROM (` + d.ids + `) AS ids`
	})
	qTransitionInsert = sqlText(qTransitionInsertHead + ` VALUES ` + qTransitionInsertRow)
	// qOrderPayStatusLock reads (and locks) the pay_status of an order that passes the
	// guards of OrderSetPayStatus, for its audit row; qOrderSetPayStatus then changes it.
	qOrderPayStatusLock = newQuery(func(d *dialect) string {
		return `SELECT pay_status FROM orders WHERE id = ? AND state = ? AND pay_status IN (` + stateIn + `)
			AND (? = 0 OR COALESCE(current_payment_id, '') = ?)` + d.lockRows
	})
	qOrderSetPayStatus = newQuery(func(d *dialect) string {
		return `UPDATE orders SET pay_status = ?, version = version + 1, current_payment_id = COALESCE(?, current_payment_id)
			WHERE id = ? AND state = ? AND pay_status IN (` + stateIn + `) AND (? = 0 OR COALESCE(current_payment_id, '') = ?)`
	})
	// qOrdersLockIDs locks orders by id whatever their state (store.Tx.OrdersLock).
	qOrdersLockIDs = newQuery(func(d *dialect) string {
		return d.selectByIDs("orders.id", "orders", "id", d.ids, "1 = 1", ` ORDER BY orders.id`+d.lockRows)
	})
	qOrdersPaying = newQuery(func(d *dialect) string {
		return d.selectByIDs("orders.id, orders.current_payment_id", "orders", "id", d.ids,
			`orders.pay_status = 'paying' AND orders.current_payment_id IS NOT NULL
			AND NOT EXISTS (SELECT 1 FROM outbox m WHERE m.message_key = orders.current_payment_id
			  AND m.topic = 'payment.cancel' AND m.state = 'pending')`, "")
	})
	qOrdersDue = newQuery(func(d *dialect) string {
		return `SELECT ` + dueColumns + ` FROM orders` + d.forceIndex("orders_wake_at") + `
			WHERE wake_at <= ? ORDER BY wake_at LIMIT ?` + d.skipLocked
	})
	qOrdersDueByIDs = newQuery(func(d *dialect) string {
		return d.selectByIDs(dueColumns, "orders", "id", d.ids, `wake_at <= ?`,
			` ORDER BY wake_at LIMIT ?`+d.skipLocked)
	})
	qOrdersOpenByIDs = newQuery(func(d *dialect) string {
		return d.selectByIDs(dueColumns, "orders", "id", d.ids, `wake_at IS NOT NULL`, ` ORDER BY orders.id`)
	})
	qOrdersOpenPage  = sqlText(`SELECT ` + dueColumns + ` FROM orders WHERE wake_at IS NOT NULL AND id > ? ORDER BY id LIMIT ?`)
	qOrdersSetWakeAt = newQuery(func(d *dialect) string {
		return d.updateByIDs("orders", "id", d.ids, `wake_at = ?`, `wake_at IS NOT NULL`)
	})
	qOrderNextWakeAt    = sqlText(`SELECT MIN(wake_at) FROM orders WHERE wake_at IS NOT NULL`)
	qOrdersOverdueCount = sqlText(`SELECT COUNT(*) FROM orders WHERE wake_at < ? AND close_at < ?`)
	qOrderList          = sqlText(`SELECT ` + orderColumns + ` FROM orders WHERE id > ? ORDER BY id LIMIT ?`)
	qTransitionList     = sqlText(`SELECT id, order_id, from_state, to_state, event, cause, actor, at, trace_id,
		pay_status_from, pay_status_to FROM order_transitions WHERE order_id = ? ORDER BY id`)
)

// allPayStatuses is the pay-status guard that lets every order through.
var allPayStatuses = []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying, orderly.PayPaid, orderly.PayFailed,
	orderly.PayRefunded, orderly.PayPartiallyRefunded}

// boolInt is a boolean parameter as every dialect compares it: 1 or 0.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// noCloseAtGuard is the close_at guard that lets every order through.
const noCloseAtGuard = int64(1<<63 - 1)

// OrderInsert implements store.Tx.
func (t *tx) OrderInsert(ctx context.Context, p *store.OrderInsertParams) error {
	args, err := orderInsertArgs(p)
	if err != nil {
		return err
	}
	_, err = t.exec(ctx, "order "+p.Order.ID, qOrderInsert, args...)
	return err
}

type rowScanner interface{ Scan(dest ...any) error }

func scanOrder(r rowScanner) (*orderly.Order, error) {
	var (
		o                             orderly.Order
		items                         string
		couponID, paymentID, reason   sql.NullString
		metadata                      sql.NullString
		createdAt, expiresAt, closeAt int64
		closedAt, paidAt              sql.NullInt64
	)
	if err := r.Scan(&o.ID, &o.UserID, &o.Flow, &o.State, &o.PayStatus, &items, &o.Amount, &o.Currency,
		&couponID, &paymentID, &createdAt, &expiresAt, &closeAt, &closedAt, &reason, &paidAt, &o.Version, &o.RefundedAmount, &metadata); err != nil {
		return nil, err
	}
	m, err := decodeMetadata(metadata, "order "+o.ID)
	if err != nil {
		return nil, err
	}
	o.Metadata = m
	if err := json.Unmarshal([]byte(items), &o.Items); err != nil {
		return nil, fmt.Errorf("order %s items: %w", o.ID, err)
	}
	o.CouponID, o.CurrentPaymentID, o.CloseReason = couponID.String, paymentID.String, orderly.CloseReason(reason.String)
	o.CreatedAt, o.ExpiresAt, o.CloseAt = fromMS(createdAt), fromMS(expiresAt), fromMS(closeAt)
	o.ClosedAt, o.PaidAt = timePtr(closedAt), timePtr(paidAt)
	return &o, nil
}

// OrderGet implements store.Tx.
func (t *tx) OrderGet(ctx context.Context, id string) (*orderly.Order, error) {
	o, err := scanOrder(t.queryRow(ctx, qOrderGet, id))
	return o, translate(err, "order "+id)
}

// OrderGetByIdempotencyKey implements store.Tx.
func (t *tx) OrderGetByIdempotencyKey(ctx context.Context, userID, key string) (*orderly.Order, string, error) {
	var (
		id   string
		hash sql.NullString // NULL when the order was inserted without a request hash
	)
	err := t.queryRow(ctx, qOrderByKey, userID, key).Scan(&id, &hash)
	if err != nil {
		return nil, "", translate(err, "order with idempotency key "+key)
	}
	o, err := t.OrderGet(ctx, id)
	return o, hash.String, err
}

// OrdersTransition implements store.Tx: select (and lock) the orders that pass every
// guard, change exactly those, and write their audit rows.
func (t *tx) OrdersTransition(ctx context.Context, p *store.OrdersTransitionParams) ([]string, error) {
	p.Metadata = nil // this call's: params reused by a retry or another transition start empty
	if len(p.IDs) == 0 {
		return nil, nil
	}
	payIn, closeAtBy := p.PayStatusIn, noCloseAtGuard
	if len(payIn) == 0 {
		payIn = allPayStatuses
	}
	if p.CloseAtBy != nil {
		closeAtBy = ms(*p.CloseAtBy)
	}
	args := append(append([]any{idList(p.IDs), p.From}, stateArgs(payIn)...), closeAtBy)
	rows, err := t.query(ctx, qOrdersLock, args...)
	if err != nil {
		return nil, fmt.Errorf("transition orders %s -> %s: %w", p.From, p.To, err)
	}
	// The orders that pass the guards, grouped by pay_status for their audit rows.
	var (
		changed []string
		byPay   = map[orderly.PayStatus][]string{}
	)
	err = func() error {
		defer rows.Close()
		for rows.Next() {
			var (
				id       string
				pay      orderly.PayStatus
				metadata sql.NullString
			)
			if err := rows.Scan(&id, &pay, &metadata); err != nil {
				return err
			}
			changed, byPay[pay] = append(changed, id), append(byPay[pay], id)
			if metadata.Valid {
				m, err := decodeMetadata(metadata, "order "+id)
				if err != nil {
					return err
				}
				if p.Metadata == nil {
					p.Metadata = map[string]orderly.Metadata{}
				}
				p.Metadata[id] = m
			}
		}
		return rows.Err()
	}()
	if err != nil {
		return nil, fmt.Errorf("transition orders %s -> %s: %w", p.From, p.To, err)
	} else if len(changed) == 0 {
		return nil, nil
	}
	var closedAt, paidAt sql.NullInt64
	if p.CloseReason != "" {
		closedAt = sql.NullInt64{Int64: ms(p.Now), Valid: true}
	}
	if p.SetPaidAt {
		paidAt = sql.NullInt64{Int64: ms(p.Now), Valid: true}
	}
	ids := jsonList(changed)
	n, err := t.exec(ctx, fmt.Sprintf("transition orders %s -> %s", p.From, p.To), qOrdersTransition, t.db.d.byIDsArgs(ids,
		[]any{p.To, nullString(string(p.SetPayStatus)), nullString(string(p.CloseReason)), closedAt, paidAt, boolInt(p.Timed)}, []any{p.From})...)
	if err != nil {
		return nil, err
	} else if n != int64(len(changed)) {
		return nil, fmt.Errorf("transition orders %s -> %s: %d of %d locked rows changed", p.From, p.To, n, len(changed))
	}
	var audits []*orderly.Transition     // with Causes: one multi-row insert
	for _, pay := range allPayStatuses { // a fixed order: audit row ids follow it
		group := byPay[pay]
		if len(group) == 0 {
			continue
		}
		if p.Causes != nil {
			for _, id := range group {
				audits = append(audits, &orderly.Transition{OrderID: id, From: p.From, To: p.To, Event: p.Event,
					Cause: cmp.Or(p.Causes[id], p.Cause), Actor: p.Actor, At: p.Now, TraceID: p.TraceID,
					PayStatusFrom: pay, PayStatusTo: cmp.Or(p.SetPayStatus, pay)})
			}
			continue
		}
		_, err = t.exec(ctx, "audit rows", qTransitionsInsert, p.From, p.To, p.Event, p.Cause, p.Actor, ms(p.Now), p.TraceID,
			pay, cmp.Or(p.SetPayStatus, pay), jsonList(group))
		if err != nil {
			return nil, err
		}
	}
	if len(audits) > 0 {
		if err := t.TransitionsInsertMany(ctx, audits); err != nil {
			return nil, err
		}
	}
	return changed, nil
}

// TransitionInsert implements store.Tx.
func (t *tx) TransitionInsert(ctx context.Context, tr *orderly.Transition) error {
	_, err := t.exec(ctx, "audit row of order "+tr.OrderID, qTransitionInsert, tr.OrderID, tr.From, tr.To, tr.Event,
		tr.Cause, tr.Actor, ms(tr.At), tr.TraceID, tr.PayStatusFrom, tr.PayStatusTo)
	return err
}

// OrderSetPayStatus implements store.Tx.
func (t *tx) OrderSetPayStatus(ctx context.Context, p *store.OrderSetPayStatusParams) (bool, error) {
	if len(p.From) == 0 {
		return false, fmt.Errorf("set pay status of order %s: no From statuses", p.ID)
	}
	guard := append(append([]any{p.ID, p.State}, stateArgs(p.From)...), boolInt(p.IfPaymentID != "" || p.IfCurrentPayment), p.IfPaymentID)
	var from orderly.PayStatus
	if err := t.queryRow(ctx, qOrderPayStatusLock, guard...).Scan(&from); errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("set pay status of order %s: %w", p.ID, err)
	}
	n, err := t.exec(ctx, "set pay status of order "+p.ID, qOrderSetPayStatus, append([]any{p.To, nullString(p.SetPaymentID)}, guard...)...)
	if err != nil {
		return false, err
	} else if n != 1 {
		return false, fmt.Errorf("set pay status of order %s: the locked row did not change", p.ID)
	}
	err = t.TransitionInsert(ctx, &orderly.Transition{OrderID: p.ID, From: p.State, To: p.State, Event: p.Event,
		PayStatusFrom: from, PayStatusTo: p.To, Cause: p.Cause, Actor: p.Actor, At: p.Now, TraceID: p.TraceID})
	return err == nil, err
}

// OrdersPaymentsInFlight implements store.Tx.
func (t *tx) OrdersPaymentsInFlight(ctx context.Context, ids []string) (map[string]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := t.query(ctx, qOrdersPaying, idList(ids))
	if err != nil {
		return nil, fmt.Errorf("payments in flight: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, paymentID string
		if err := rows.Scan(&id, &paymentID); err != nil {
			return nil, fmt.Errorf("payments in flight: %w", err)
		}
		out[id] = paymentID
	}
	return out, rows.Err()
}

// OrdersDue implements store.Tx. SQLite has one writer, so a plain SELECT inside the write
// transaction is a claim; dialects with row locks add FOR UPDATE SKIP LOCKED.
// OrdersLock implements store.Tx.
func (t *tx) OrdersLock(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	got, err := t.strings(ctx, qOrdersLockIDs, idList(ids))
	if err != nil {
		return nil, fmt.Errorf("lock orders: %w", err)
	}
	return got, nil
}

// OrdersDue implements store.Tx.
func (t *tx) OrdersDue(ctx context.Context, p *store.OrdersDueParams) ([]*store.DueOrder, error) {
	if p.IDs != nil {
		if len(p.IDs) == 0 {
			return nil, nil
		}
		return t.dueOrders(ctx, qOrdersDueByIDs, jsonList(p.IDs), ms(p.Now), p.Limit)
	}
	return t.dueOrders(ctx, qOrdersDue, ms(p.Now), p.Limit)
}

// OrdersOpen implements store.Tx.
func (t *tx) OrdersOpen(ctx context.Context, p *store.OrdersOpenParams) ([]*store.DueOrder, error) {
	if p.IDs != nil {
		if len(p.IDs) == 0 {
			return nil, nil
		}
		return t.dueOrders(ctx, qOrdersOpenByIDs, jsonList(p.IDs))
	}
	return t.dueOrders(ctx, qOrdersOpenPage, p.AfterID, p.Limit)
}

func (t *tx) dueOrders(ctx context.Context, q *query, args ...any) ([]*store.DueOrder, error) {
	rows, err := t.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("due orders: %w", err)
	}
	defer rows.Close()
	var out []*store.DueOrder
	for rows.Next() {
		var (
			d                   store.DueOrder
			paymentID, couponID sql.NullString
			closeAt, wakeAt     int64
		)
		if err := rows.Scan(&d.ID, &d.Flow, &d.State, &d.PayStatus, &paymentID, &couponID, &closeAt, &wakeAt); err != nil {
			return nil, fmt.Errorf("due orders: %w", err)
		}
		d.CurrentPaymentID, d.CouponID, d.CloseAt, d.WakeAt = paymentID.String, couponID.String, fromMS(closeAt), fromMS(wakeAt)
		out = append(out, &d)
	}
	return out, rows.Err()
}

// OrdersSetWakeAt implements store.Tx.
func (t *tx) OrdersSetWakeAt(ctx context.Context, ids []string, wakeAt time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.exec(ctx, "set wake_at", qOrdersSetWakeAt, t.db.d.byIDsArgs(idList(ids), []any{ms(wakeAt)}, nil)...)
	return err
}

// OrderNextWakeAt implements store.Tx.
func (t *tx) OrderNextWakeAt(ctx context.Context) (time.Time, bool, error) {
	var v sql.NullInt64
	if err := t.queryRow(ctx, qOrderNextWakeAt).Scan(&v); err != nil {
		return time.Time{}, false, fmt.Errorf("next wake_at: %w", err)
	}
	if !v.Valid {
		return time.Time{}, false, nil
	}
	return fromMS(v.Int64), true, nil
}

// OrdersOverdueCount implements store.Tx.
func (t *tx) OrdersOverdueCount(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := t.queryRow(ctx, qOrdersOverdueCount, ms(before), ms(before)).Scan(&n)
	return n, translate(err, "overdue orders")
}

// OrderList implements store.Tx.
func (t *tx) OrderList(ctx context.Context, p *store.ListParams) ([]*orderly.Order, error) {
	rows, err := t.query(ctx, qOrderList, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list orders: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Order
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, fmt.Errorf("list orders: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// TransitionList implements store.Tx.
func (t *tx) TransitionList(ctx context.Context, orderID string) ([]*orderly.Transition, error) {
	rows, err := t.query(ctx, qTransitionList, orderID)
	if err != nil {
		return nil, fmt.Errorf("audit trail of %s: %w", orderID, err)
	}
	defer rows.Close()
	var out []*orderly.Transition
	for rows.Next() {
		var (
			tr orderly.Transition
			at int64
		)
		if err := rows.Scan(&tr.ID, &tr.OrderID, &tr.From, &tr.To, &tr.Event, &tr.Cause, &tr.Actor, &at, &tr.TraceID,
			&tr.PayStatusFrom, &tr.PayStatusTo); err != nil {
			return nil, fmt.Errorf("audit trail of %s: %w", orderID, err)
		}
		tr.At = fromMS(at)
		out = append(out, &tr)
	}
	return out, rows.Err()
}
