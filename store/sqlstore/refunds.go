package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

const refundColumns = `id, order_id, payment_id, amount, currency, items, restock, reason, state, fail_reason,
	created_at, completed_at, provider_ref, provider_status, metadata`

var (
	qRefundInsert = sqlText(`INSERT INTO refunds (` + refundColumns + `, idempotency_key, request_hash)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qRefundGet = sqlText(`SELECT ` + refundColumns + ` FROM refunds WHERE id = ?`)
	// qRefundByProviderRef reads through refunds_provider_ref (migration 00019).
	qRefundByProviderRef = sqlText(`SELECT ` + refundColumns + ` FROM refunds WHERE provider_ref = ? AND provider_ref <> ''
		ORDER BY id LIMIT 1`)
	qRefundByKey    = sqlText(`SELECT id, request_hash FROM refunds WHERE order_id = ? AND idempotency_key = ?`)
	qRefundList     = sqlText(`SELECT ` + refundColumns + ` FROM refunds WHERE ? = '' OR order_id = ? ORDER BY order_id, created_at, id`)
	qRefundSetState = sqlText(`UPDATE refunds SET state = ?, fail_reason = ?, completed_at = ?, provider_status = ''
		WHERE id = ? AND state = ?`)
	// The provider's id is a fact whatever the state (its notification may have confirmed
	// the refund before the call's answer is recorded); a non-final status only while requested.
	qRefundSetProvider = sqlText(`UPDATE refunds SET provider_ref = ?,
		provider_status = CASE WHEN state = 'requested' THEN ? ELSE '' END WHERE id = ?`)
	// qOrderAddRefunded is the guard that keeps an order's refunds within its amount. It is
	// one guarded UPDATE (no read-then-write), so a concurrent refund that committed first
	// is seen when the row lock is granted: PostgreSQL re-evaluates the WHERE clause on the
	// new row version, InnoDB reads the latest committed version, SQLite has one writer.
	qOrderAddRefunded = sqlText(`UPDATE orders SET refunded_amount = refunded_amount + ?
		WHERE id = ? AND state IN (` + stateIn + `) AND refunded_amount + ? >= 0 AND refunded_amount + ? <= amount`)
	// qReservationRefund keeps 0 <= restocked <= refunded <= quantity: a unit goes back to
	// stock only once a refund of it is counted (docs/concepts/payments.md).
	qReservationRefund = sqlText(`UPDATE reservations SET refunded = refunded + ?, restocked = restocked + ?
		WHERE order_id = ? AND sku = ? AND state = 'committed'
		AND refunded + ? >= 0 AND refunded + ? <= quantity AND restocked + ? >= 0 AND restocked + ? <= refunded + ?`)
	qStockRestock   = sqlText(`UPDATE stock SET sold = sold - ?, available = available + ? WHERE sku = ? AND sold >= ?`)
	qStockUnrestock = sqlText(`UPDATE stock SET available = available - ?, sold = sold + ? WHERE sku = ? AND available >= ?`)
	qRefundOrderIDs = sqlText(`SELECT DISTINCT order_id FROM refunds WHERE order_id > ? ORDER BY order_id LIMIT ?`)
)

func scanRefund(r rowScanner) (*orderly.Refund, error) {
	var (
		f           orderly.Refund
		items       string
		createdAt   int64
		completedAt sql.NullInt64
		metadata    sql.NullString
	)
	if err := r.Scan(&f.ID, &f.OrderID, &f.PaymentID, &f.Amount, &f.Currency, &items, &f.Restock, &f.Reason,
		&f.State, &f.FailReason, &createdAt, &completedAt, &f.ProviderRef, &f.ProviderStatus, &metadata); err != nil {
		return nil, err
	}
	m, err := decodeMetadata(metadata, "refund "+f.ID)
	if err != nil {
		return nil, err
	}
	f.Metadata = m
	if err := json.Unmarshal([]byte(items), &f.Items); err != nil {
		return nil, fmt.Errorf("refund %s items: %w", f.ID, err)
	}
	if f.Items == nil {
		f.Items = []orderly.RefundItem{}
	}
	f.CreatedAt, f.CompletedAt = fromMS(createdAt), timePtr(completedAt)
	return &f, nil
}

// RefundInsert implements store.Tx.
func (t *tx) RefundInsert(ctx context.Context, p *store.RefundInsertParams) error {
	f := p.Refund
	items := f.Items
	if items == nil {
		items = []orderly.RefundItem{}
	}
	b, err := json.Marshal(items)
	if err != nil {
		return fmt.Errorf("insert refund %s: %w", f.ID, err)
	}
	_, err = t.exec(ctx, "refund "+f.ID, qRefundInsert, f.ID, f.OrderID, f.PaymentID, f.Amount, f.Currency, string(b),
		f.Restock, f.Reason, f.State, f.FailReason, ms(f.CreatedAt), nullMS(f.CompletedAt), f.ProviderRef, f.ProviderStatus,
		encodeMetadata(f.Metadata), nullString(p.IdempotencyKey), nullString(p.RequestHash))
	return err
}

// RefundSetProvider implements store.Tx.
func (t *tx) RefundSetProvider(ctx context.Context, id, providerRef, providerStatus string) (bool, error) {
	n, err := t.exec(ctx, "refund "+id, qRefundSetProvider, providerRef, providerStatus, id)
	return n == 1, err
}

// RefundGet implements store.Tx.
func (t *tx) RefundGet(ctx context.Context, id string) (*orderly.Refund, error) {
	f, err := scanRefund(t.queryRow(ctx, qRefundGet, id))
	return f, translate(err, "refund "+id)
}

// RefundGetByProviderRef implements store.Tx.
func (t *tx) RefundGetByProviderRef(ctx context.Context, ref string) (*orderly.Refund, error) {
	f, err := scanRefund(t.queryRow(ctx, qRefundByProviderRef, ref))
	return f, translate(err, "refund of provider ref "+ref)
}

// RefundGetByIdempotencyKey implements store.Tx.
func (t *tx) RefundGetByIdempotencyKey(ctx context.Context, orderID, key string) (*orderly.Refund, string, error) {
	var (
		id   string
		hash sql.NullString
	)
	if err := t.queryRow(ctx, qRefundByKey, orderID, key).Scan(&id, &hash); err != nil {
		return nil, "", translate(err, "refund with idempotency key "+key)
	}
	f, err := t.RefundGet(ctx, id)
	return f, hash.String, err
}

// RefundList implements store.Tx.
func (t *tx) RefundList(ctx context.Context, orderID string) ([]*orderly.Refund, error) {
	rows, err := t.query(ctx, qRefundList, orderID, orderID)
	if err != nil {
		return nil, fmt.Errorf("list refunds: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Refund
	for rows.Next() {
		f, err := scanRefund(rows)
		if err != nil {
			return nil, fmt.Errorf("list refunds: %w", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// RefundSetState implements store.Tx.
func (t *tx) RefundSetState(ctx context.Context, p *store.RefundSetStateParams) (bool, error) {
	n, err := t.exec(ctx, "refund "+p.ID, qRefundSetState, p.To, p.FailReason, ms(p.CompletedAt), p.ID, p.From)
	return n == 1, err
}

// OrderAddRefunded implements store.Tx.
func (t *tx) OrderAddRefunded(ctx context.Context, p *store.OrderAddRefundedParams) (bool, error) {
	if len(p.States) == 0 {
		return false, fmt.Errorf("refunded amount of order %s: no States", p.ID)
	}
	args := append(append([]any{p.Delta, p.ID}, stateArgs(p.States)...), p.Delta, p.Delta)
	n, err := t.exec(ctx, "refunded amount of order "+p.ID, qOrderAddRefunded, args...)
	return n == 1, err
}

// ReservationRefund implements store.Tx. A positive Restock moves the reservation first,
// then the stock (sold → available); a negative one the stock first (available → sold,
// guarded by the units available), then the reservation, and puts the stock back if the
// reservation's guard refuses, so that false always means nothing changed.
func (t *tx) ReservationRefund(ctx context.Context, p *store.ReservationRefundParams) (bool, error) {
	what := "refund reservation " + p.OrderID + "/" + p.SKU
	reservation := func() (bool, error) {
		n, err := t.exec(ctx, what, qReservationRefund, p.Refunded, p.Restock, p.OrderID, p.SKU,
			p.Refunded, p.Refunded, p.Restock, p.Restock, p.Refunded)
		return n == 1, err
	}
	if p.Restock >= 0 {
		ok, err := reservation()
		if err != nil || !ok || p.Restock == 0 {
			return ok, err
		}
		n, err := t.exec(ctx, "restock "+p.SKU, qStockRestock, p.Restock, p.Restock, p.SKU, p.Restock)
		if err != nil {
			return false, err
		} else if n != 1 {
			return false, fmt.Errorf("%s: stock of sku %s has fewer than %d sold units", what, p.SKU, p.Restock)
		}
		return true, nil
	}
	units := -p.Restock
	n, err := t.exec(ctx, "take back "+p.SKU, qStockUnrestock, units, units, p.SKU, units)
	if err != nil || n != 1 {
		return false, err // n == 0: fewer units available than to take back (sold again)
	}
	ok, err := reservation()
	if err != nil || ok {
		return ok, err
	}
	if _, err := t.exec(ctx, "restock "+p.SKU, qStockRestock, units, units, p.SKU, units); err != nil {
		return false, err
	}
	return false, nil
}

// RefundOrderIDs implements store.Tx.
func (t *tx) RefundOrderIDs(ctx context.Context, afterOrderID string, limit int) ([]string, error) {
	rows, err := t.query(ctx, qRefundOrderIDs, afterOrderID, limit)
	if err != nil {
		return nil, fmt.Errorf("orders with refunds: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("orders with refunds: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}
