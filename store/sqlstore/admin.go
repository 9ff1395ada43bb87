package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

const operatorActionColumns = `id, at, operator, action, target, reason, detail, trace_id`

var (
	qOperatorActionInsert = sqlText(`INSERT INTO operator_actions (at, operator, action, target, reason, detail, trace_id)
		VALUES (?, ?, ?, ?, ?, ?, ?)`)
	qOperatorActionLast = sqlText(`SELECT MAX(id) FROM operator_actions WHERE operator = ? AND action = ? AND target = ? AND at = ?`)
	qOperatorActionList = sqlText(`SELECT ` + operatorActionColumns + ` FROM operator_actions
		WHERE (? = 0 OR id < ?) AND (? = '' OR target = ?) ORDER BY id DESC LIMIT ?`)

	// qOrderSearch applies each filter only when it is set: empty strings and the widest
	// time range mean "any"; closed_at is filtered only when asked (flag = 1).
	qOrderSearch = sqlText(`SELECT ` + orderColumns + ` FROM orders WHERE id > ?
		AND (? = '' OR user_id = ?) AND (? = '' OR state = ?) AND (? = '' OR flow = ?)
		AND created_at >= ? AND created_at < ?
		AND (? = 0 OR (closed_at >= ? AND closed_at < ?))
		ORDER BY id LIMIT ?`)

	qOutboxDeadList = sqlText(`SELECT ` + messageColumns + ` FROM outbox WHERE state = 'dead' AND id > ?
		AND (? = '' OR topic = ?) AND created_at >= ? AND created_at < ? ORDER BY id LIMIT ?`)
	qOutboxStuckList = sqlText(`SELECT ` + messageColumns + ` FROM outbox WHERE state = 'pending' AND id > ?
		AND next_attempt_at < ? ORDER BY id LIMIT ?`)
	// qOutboxKeyUndelivered reads the pending and the dead messages of a key apart, so that
	// each half has its index (the partial outbox_pending_key_id and outbox_dead on SQLite
	// and PostgreSQL): state IN (…) matches neither partial index and read the whole outbox.
	qOutboxKeyUndelivered = sqlText(`SELECT ` + messageColumns + ` FROM outbox WHERE message_key = ? AND state = 'pending'
		UNION ALL SELECT ` + messageColumns + ` FROM outbox WHERE message_key = ? AND state = 'dead' ORDER BY id LIMIT ?`)
	qOutboxGetDead = newQuery(func(d *dialect) string {
		return `SELECT ` + messageColumns + ` FROM outbox WHERE id = ? AND state = 'dead'` + d.lockRows
	})
	qOutboxDeleteDead = sqlText(`DELETE FROM outbox WHERE id = ? AND state = 'dead'`)

	qReconcileClosedPaid = sqlText(`SELECT ` + paymentColumns + ` FROM payments WHERE id > ? AND state = 'succeeded'
		AND EXISTS (SELECT 1 FROM orders o WHERE o.id = payments.order_id AND o.state = 'closed')
		ORDER BY id LIMIT ?`)
	qReconcileClosedHeld = sqlText(`SELECT ` + orderColumns + ` FROM orders WHERE id > ? AND state = 'closed'
		AND (EXISTS (SELECT 1 FROM reservations r WHERE r.order_id = orders.id AND r.state = 'held')
		  OR EXISTS (SELECT 1 FROM coupons c WHERE c.id = orders.coupon_id AND c.order_id = orders.id AND c.state = 'frozen'))
		ORDER BY id LIMIT ?`)
	qReconcileClosedPaying = sqlText(`SELECT ` + orderColumns + ` FROM orders WHERE id > ? AND state = 'closed'
		AND pay_status = 'paying' AND closed_at <= ?
		AND EXISTS (SELECT 1 FROM payments p WHERE p.id = orders.current_payment_id AND p.state = 'initiated')
		AND NOT EXISTS (SELECT 1 FROM outbox m WHERE m.message_key = orders.current_payment_id
		  AND m.topic = 'payment.cancel' AND m.state = 'pending')
		ORDER BY id LIMIT ?`)
	qReconcilePaidUnbacked = sqlText(`SELECT ` + orderColumns + ` FROM orders WHERE id > ? AND pay_status = 'paid'
		AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = orders.id
		  AND p.state IN ('succeeded', 'refund_pending', 'refunded'))
		ORDER BY id LIMIT ?`)
	qReconcilePaymentsCaptured = sqlText(`SELECT ` + paymentColumns + ` FROM payments WHERE id > ?
		AND state IN ('succeeded', 'refund_pending', 'refunded') AND channel_txn_id IS NOT NULL
		AND succeeded_at >= ? AND succeeded_at <= ? AND (? = '' OR channel = ?) ORDER BY id LIMIT ?`)
	qReconcileRefundsStuck = sqlText(`SELECT ` + refundColumns + ` FROM refunds WHERE id > ?
		AND state = 'requested' AND provider_status <> '' AND created_at < ? ORDER BY id LIMIT ?`)
	qReconcileRefundsSucceeded = sqlText(`SELECT ` + refundColumns + ` FROM refunds WHERE id > ?
		AND state = 'succeeded' AND completed_at >= ? AND completed_at <= ?
		AND EXISTS (SELECT 1 FROM payments p WHERE p.id = refunds.payment_id AND (? = '' OR p.channel = ?))
		ORDER BY id LIMIT ?`)

	// stockLedgerColumns recompute held and sold from the SKU's reservations through the
	// (sku, state) index of migration 00011.
	stockLedgerColumns = `s.sku, s.available, s.held, s.sold,
		COALESCE((SELECT SUM(r.quantity) FROM reservations r WHERE r.sku = s.sku AND r.state = 'held'), 0),
		COALESCE((SELECT SUM(r.quantity - r.restocked) FROM reservations r WHERE r.sku = s.sku AND r.state = 'committed'), 0)`
	qStockLedgers   = sqlText(`SELECT ` + stockLedgerColumns + ` FROM stock s WHERE s.sku > ? ORDER BY s.sku LIMIT ?`)
	qStockLedgerGet = sqlText(`SELECT ` + stockLedgerColumns + ` FROM stock s WHERE s.sku = ?`)
	qStockCorrect   = sqlText(`UPDATE stock SET available = available + (held - ?) + (sold - ?), held = ?, sold = ?
		WHERE sku = ? AND held = ? AND sold = ? AND available + (held - ?) + (sold - ?) >= 0`)

	qReconcileReportInsert = sqlText(`INSERT INTO reconcile_reports (instance, started_at, finished_at, findings, repaired, report)
		VALUES (?, ?, ?, ?, ?, ?)`)
	qReconcileReportLast = sqlText(`SELECT MAX(id) FROM reconcile_reports WHERE instance = ? AND started_at = ?`)
	qReconcileReportList = sqlText(`SELECT id, instance, started_at, finished_at, findings, repaired, report
		FROM reconcile_reports ORDER BY id DESC LIMIT ?`)
)

// OperatorActionInsert implements store.Tx.
func (t *tx) OperatorActionInsert(ctx context.Context, a *store.OperatorAction) error {
	detail := string(a.Detail)
	if len(a.Detail) == 0 {
		detail = "{}"
	}
	if _, err := t.exec(ctx, "operator action "+a.Action, qOperatorActionInsert, ms(a.At), a.Operator, a.Action, a.Target,
		a.Reason, detail, a.TraceID); err != nil {
		return err
	}
	// The id is read back by the row's natural key: LastInsertId is not portable to pgx.
	var id sql.NullInt64
	if err := t.queryRow(ctx, qOperatorActionLast, a.Operator, a.Action, a.Target, ms(a.At)).Scan(&id); err != nil {
		return fmt.Errorf("operator action %s: id: %w", a.Action, err)
	}
	a.ID = id.Int64
	return nil
}

// OperatorActionList implements store.Tx.
func (t *tx) OperatorActionList(ctx context.Context, p *store.OperatorActionListParams) ([]*store.OperatorAction, error) {
	rows, err := t.query(ctx, qOperatorActionList, p.BeforeID, p.BeforeID, p.Target, p.Target, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list operator actions: %w", err)
	}
	defer rows.Close()
	var out []*store.OperatorAction
	for rows.Next() {
		var (
			a      store.OperatorAction
			at     int64
			detail string
		)
		if err := rows.Scan(&a.ID, &at, &a.Operator, &a.Action, &a.Target, &a.Reason, &detail, &a.TraceID); err != nil {
			return nil, fmt.Errorf("list operator actions: %w", err)
		}
		a.At, a.Detail = fromMS(at), []byte(detail)
		out = append(out, &a)
	}
	return out, rows.Err()
}

// timeRange returns the stored bounds of a half-open range whose zero ends are open.
func timeRange(from, to time.Time) (int64, int64) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if !from.IsZero() {
		lo = ms(from)
	}
	if !to.IsZero() {
		hi = ms(to)
	}
	return lo, hi
}

// OrderSearch implements store.Tx.
func (t *tx) OrderSearch(ctx context.Context, p *store.OrderSearchParams) ([]*orderly.Order, error) {
	createdLo, createdHi := timeRange(p.CreatedFrom, p.CreatedTo)
	closedLo, closedHi := timeRange(p.ClosedFrom, p.ClosedTo)
	closed := 0
	if !p.ClosedFrom.IsZero() || !p.ClosedTo.IsZero() {
		closed = 1
	}
	rows, err := t.query(ctx, qOrderSearch, p.AfterID, p.UserID, p.UserID, string(p.State), string(p.State), p.Flow, p.Flow,
		createdLo, createdHi, closed, closedLo, closedHi, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("search orders: %w", err)
	}
	return scanOrders(rows, "search orders")
}

// scanOrders reads every row of rows as an order and closes rows.
func scanOrders(rows *sql.Rows, what string) ([]*orderly.Order, error) {
	defer rows.Close()
	var out []*orderly.Order
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// OutboxDeadList implements store.Tx.
func (t *tx) OutboxDeadList(ctx context.Context, p *store.OutboxFilter) ([]*orderly.Message, error) {
	lo, hi := timeRange(p.CreatedFrom, p.CreatedTo)
	rows, err := t.query(ctx, qOutboxDeadList, p.AfterID, p.Topic, p.Topic, lo, hi, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	msgs, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return msgs, nil
}

// OutboxStuckList implements store.Tx.
func (t *tx) OutboxStuckList(ctx context.Context, before time.Time, afterID int64, limit int) ([]*orderly.Message, error) {
	rows, err := t.query(ctx, qOutboxStuckList, afterID, ms(before), limit)
	if err != nil {
		return nil, fmt.Errorf("list stuck messages: %w", err)
	}
	msgs, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("list stuck messages: %w", err)
	}
	return msgs, nil
}

// OutboxKeyUndelivered implements store.Tx.
func (t *tx) OutboxKeyUndelivered(ctx context.Context, key string, limit int) ([]*orderly.Message, error) {
	rows, err := t.query(ctx, qOutboxKeyUndelivered, key, key, limit)
	if err != nil {
		return nil, fmt.Errorf("undelivered messages of %s: %w", key, err)
	}
	msgs, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("undelivered messages of %s: %w", key, err)
	}
	return msgs, nil
}

// OutboxDiscard implements store.Tx.
func (t *tx) OutboxDiscard(ctx context.Context, id int64) (*orderly.Message, error) {
	what := fmt.Sprintf("dead message %d", id)
	rows, err := t.query(ctx, qOutboxGetDead, id)
	if err != nil {
		return nil, fmt.Errorf("discard %s: %w", what, err)
	}
	msgs, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("discard %s: %w", what, err)
	}
	if len(msgs) == 0 {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "%s not found", what)
	}
	if n, err := t.exec(ctx, "discard "+what, qOutboxDeleteDead, id); err != nil {
		return nil, err
	} else if n != 1 {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "%s not found", what)
	}
	return msgs[0], nil
}

// ReconcileClosedPaid implements store.Tx.
func (t *tx) ReconcileClosedPaid(ctx context.Context, afterID string, limit int) ([]*orderly.Payment, error) {
	rows, err := t.query(ctx, qReconcileClosedPaid, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("payments kept by closed orders: %w", err)
	}
	return scanPayments(rows, "payments kept by closed orders")
}

// ReconcilePaymentsCaptured implements store.Tx.
func (t *tx) ReconcilePaymentsCaptured(ctx context.Context, channel string, from, to time.Time, afterID string, limit int) ([]*orderly.Payment, error) {
	rows, err := t.query(ctx, qReconcilePaymentsCaptured, afterID, ms(from), ms(to), channel, channel, limit)
	if err != nil {
		return nil, fmt.Errorf("captured payments: %w", err)
	}
	return scanPayments(rows, "captured payments")
}

// ReconcileRefundsSucceeded implements store.Tx.
func (t *tx) ReconcileRefundsSucceeded(ctx context.Context, channel string, from, to time.Time, afterID string, limit int) ([]*orderly.Refund, error) {
	rows, err := t.query(ctx, qReconcileRefundsSucceeded, afterID, ms(from), ms(to), channel, channel, limit)
	if err != nil {
		return nil, fmt.Errorf("succeeded refunds: %w", err)
	}
	return scanRefunds(rows, "succeeded refunds")
}

// ReconcileRefundsStuck implements store.Tx.
func (t *tx) ReconcileRefundsStuck(ctx context.Context, createdBefore time.Time, afterID string, limit int) ([]*orderly.Refund, error) {
	rows, err := t.query(ctx, qReconcileRefundsStuck, afterID, ms(createdBefore), limit)
	if err != nil {
		return nil, fmt.Errorf("stuck refunds: %w", err)
	}
	return scanRefunds(rows, "stuck refunds")
}

func scanRefunds(rows *sql.Rows, what string) ([]*orderly.Refund, error) {
	defer rows.Close()
	var out []*orderly.Refund
	for rows.Next() {
		f, err := scanRefund(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// scanPayments reads every row of rows as a payment and closes rows.
func scanPayments(rows *sql.Rows, what string) ([]*orderly.Payment, error) {
	defer rows.Close()
	var out []*orderly.Payment
	for rows.Next() {
		p, err := scanPayment(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// ReconcileClosedHeld implements store.Tx.
func (t *tx) ReconcileClosedHeld(ctx context.Context, afterID string, limit int) ([]*orderly.Order, error) {
	rows, err := t.query(ctx, qReconcileClosedHeld, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("closed orders holding stock or a coupon: %w", err)
	}
	return scanOrders(rows, "closed orders holding stock or a coupon")
}

// ReconcileClosedPaying implements store.Tx.
func (t *tx) ReconcileClosedPaying(ctx context.Context, closedBy time.Time, afterID string, limit int) ([]*orderly.Order, error) {
	rows, err := t.query(ctx, qReconcileClosedPaying, afterID, ms(closedBy), limit)
	if err != nil {
		return nil, fmt.Errorf("closed orders still paying: %w", err)
	}
	return scanOrders(rows, "closed orders still paying")
}

// ReconcilePaidUnbacked implements store.Tx.
func (t *tx) ReconcilePaidUnbacked(ctx context.Context, afterID string, limit int) ([]*orderly.Order, error) {
	rows, err := t.query(ctx, qReconcilePaidUnbacked, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("paid orders without a payment: %w", err)
	}
	return scanOrders(rows, "paid orders without a payment")
}

func scanStockLedger(r rowScanner) (*store.StockLedger, error) {
	var l store.StockLedger
	if err := r.Scan(&l.SKU, &l.Available, &l.Held, &l.Sold, &l.LedgerHeld, &l.LedgerSold); err != nil {
		return nil, err
	}
	return &l, nil
}

// StockLedgers implements store.Tx.
func (t *tx) StockLedgers(ctx context.Context, afterSKU string, limit int) ([]*store.StockLedger, error) {
	rows, err := t.query(ctx, qStockLedgers, afterSKU, limit)
	if err != nil {
		return nil, fmt.Errorf("stock ledgers: %w", err)
	}
	defer rows.Close()
	var out []*store.StockLedger
	for rows.Next() {
		l, err := scanStockLedger(rows)
		if err != nil {
			return nil, fmt.Errorf("stock ledgers: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// StockLedgerGet implements store.Tx.
func (t *tx) StockLedgerGet(ctx context.Context, sku string) (*store.StockLedger, error) {
	l, err := scanStockLedger(t.queryRow(ctx, qStockLedgerGet, sku))
	return l, translate(err, "stock of "+sku)
}

// StockCorrect implements store.Tx.
func (t *tx) StockCorrect(ctx context.Context, p *store.StockCorrectParams) (bool, error) {
	n, err := t.exec(ctx, "correct stock of "+p.SKU, qStockCorrect, p.ToHeld, p.ToSold, p.ToHeld, p.ToSold,
		p.SKU, p.FromHeld, p.FromSold, p.ToHeld, p.ToSold)
	return n == 1, err
}

// ReconcileReportInsert implements store.Tx.
func (t *tx) ReconcileReportInsert(ctx context.Context, r *store.ReconcileReport) error {
	if _, err := t.exec(ctx, "reconcile report", qReconcileReportInsert, r.Instance, ms(r.StartedAt), ms(r.FinishedAt),
		r.Findings, r.Repaired, string(r.Report)); err != nil {
		return err
	}
	var id sql.NullInt64
	if err := t.queryRow(ctx, qReconcileReportLast, r.Instance, ms(r.StartedAt)).Scan(&id); err != nil {
		return fmt.Errorf("reconcile report: id: %w", err)
	}
	r.ID = id.Int64
	return nil
}

// ReconcileReportList implements store.Tx.
func (t *tx) ReconcileReportList(ctx context.Context, limit int) ([]*store.ReconcileReport, error) {
	rows, err := t.query(ctx, qReconcileReportList, limit)
	if err != nil {
		return nil, fmt.Errorf("list reconcile reports: %w", err)
	}
	defer rows.Close()
	var out []*store.ReconcileReport
	for rows.Next() {
		var (
			r                 store.ReconcileReport
			started, finished int64
			report            string
		)
		if err := rows.Scan(&r.ID, &r.Instance, &started, &finished, &r.Findings, &r.Repaired, &report); err != nil {
			return nil, fmt.Errorf("list reconcile reports: %w", err)
		}
		r.StartedAt, r.FinishedAt, r.Report = fromMS(started), fromMS(finished), []byte(report)
		out = append(out, &r)
	}
	return out, rows.Err()
}
