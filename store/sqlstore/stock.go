package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// StockSet implements store.Tx.
func (t *tx) StockSet(ctx context.Context, sku string, available int64) (*orderly.Stock, error) {
	_, err := t.exec(ctx, "stock "+sku, `INSERT INTO stock (sku, available) VALUES (?, ?)
		ON CONFLICT (sku) DO UPDATE SET available = excluded.available`, sku, available)
	if err != nil {
		return nil, err
	}
	return t.StockGet(ctx, sku)
}

// StockGet implements store.Tx.
func (t *tx) StockGet(ctx context.Context, sku string) (*orderly.Stock, error) {
	s := orderly.Stock{SKU: sku}
	err := t.q.QueryRowContext(ctx, `SELECT available, held, sold FROM stock WHERE sku = ?`, sku).
		Scan(&s.Available, &s.Held, &s.Sold)
	if err != nil {
		return nil, translate(err, "sku "+sku)
	}
	return &s, nil
}

// StockList implements store.Tx.
func (t *tx) StockList(ctx context.Context) ([]*orderly.Stock, error) {
	rows, err := t.q.QueryContext(ctx, `SELECT sku, available, held, sold FROM stock ORDER BY sku`)
	if err != nil {
		return nil, fmt.Errorf("list stock: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Stock
	for rows.Next() {
		var s orderly.Stock
		if err := rows.Scan(&s.SKU, &s.Available, &s.Held, &s.Sold); err != nil {
			return nil, fmt.Errorf("list stock: %w", err)
		}
		out = append(out, &s)
	}
	return out, rows.Err()
}

// StockReserve implements store.Tx.
func (t *tx) StockReserve(ctx context.Context, p *store.StockReserveParams) (bool, error) {
	n, err := t.exec(ctx, "reserve "+p.SKU, `UPDATE stock SET available = available - ?, held = held + ?
		WHERE sku = ? AND available >= ?`, p.Quantity, p.Quantity, p.SKU, p.Quantity)
	if err != nil || n == 0 {
		return false, err
	}
	_, err = t.exec(ctx, "reservation "+p.OrderID+"/"+p.SKU, `INSERT INTO reservations
		(order_id, sku, quantity, state, updated_at) VALUES (?, ?, ?, 'held', ?)`, p.OrderID, p.SKU, p.Quantity, ms(p.Now))
	return err == nil, err
}

// ReservationsRelease implements store.Tx: the guarded held → released update is the
// idempotency; stock moves only for the rows it changed.
func (t *tx) ReservationsRelease(ctx context.Context, orderID string, now time.Time) ([]*orderly.Reservation, error) {
	return t.moveReservations(ctx, orderID, now, orderly.ReservationReleased,
		`UPDATE stock SET available = available + ?, held = held - ? WHERE sku = ?`)
}

// ReservationsCommit implements store.Tx.
func (t *tx) ReservationsCommit(ctx context.Context, orderID string, now time.Time) ([]*orderly.Reservation, error) {
	return t.moveReservations(ctx, orderID, now, orderly.ReservationCommitted,
		`UPDATE stock SET sold = sold + ?, held = held - ? WHERE sku = ?`)
}

func (t *tx) moveReservations(ctx context.Context, orderID string, now time.Time, to, stockUpdate string) ([]*orderly.Reservation, error) {
	moved, err := t.markReservations(ctx, orderID, now, to)
	if err != nil {
		return nil, fmt.Errorf("%s reservations of %s: %w", to, orderID, err)
	}
	for _, r := range moved {
		n, err := t.exec(ctx, "stock "+r.SKU, stockUpdate, r.Quantity, r.Quantity, r.SKU)
		if err != nil {
			return nil, err
		} else if n != 1 {
			return nil, fmt.Errorf("%s reservation %s/%s: stock row missing", to, orderID, r.SKU)
		}
	}
	return moved, nil
}

// markReservations moves the order's held reservations to state to and returns them. The
// rows are read in full before the caller updates stock on the same connection.
func (t *tx) markReservations(ctx context.Context, orderID string, now time.Time, to string) ([]*orderly.Reservation, error) {
	rows, err := t.q.QueryContext(ctx, `UPDATE reservations SET state = ?, updated_at = ?
		WHERE order_id = ? AND state = 'held' RETURNING sku, quantity`, to, ms(now), orderID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var moved []*orderly.Reservation
	for rows.Next() {
		r := orderly.Reservation{OrderID: orderID, State: to}
		if err := rows.Scan(&r.SKU, &r.Quantity); err != nil {
			return nil, err
		}
		moved = append(moved, &r)
	}
	return moved, rows.Err()
}

// ReservationList implements store.Tx.
func (t *tx) ReservationList(ctx context.Context, orderID string) ([]*orderly.Reservation, error) {
	rows, err := t.q.QueryContext(ctx, `SELECT order_id, sku, quantity, state FROM reservations
		WHERE ? = '' OR order_id = ? ORDER BY order_id, sku`, orderID, orderID)
	if err != nil {
		return nil, fmt.Errorf("list reservations: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Reservation
	for rows.Next() {
		var r orderly.Reservation
		if err := rows.Scan(&r.OrderID, &r.SKU, &r.Quantity, &r.State); err != nil {
			return nil, fmt.Errorf("list reservations: %w", err)
		}
		out = append(out, &r)
	}
	return out, rows.Err()
}

const couponColumns = `id, user_id, amount_off, currency, state, order_id, expires_at, created_at`

func scanCoupon(r rowScanner) (*orderly.Coupon, error) {
	var (
		c         orderly.Coupon
		orderID   sql.NullString
		expiresAt sql.NullInt64
		createdAt int64
	)
	if err := r.Scan(&c.ID, &c.UserID, &c.AmountOff, &c.Currency, &c.State, &orderID, &expiresAt, &createdAt); err != nil {
		return nil, err
	}
	c.OrderID, c.ExpiresAt, c.CreatedAt = orderID.String, timePtr(expiresAt), fromMS(createdAt)
	return &c, nil
}

// CouponInsert implements store.Tx.
func (t *tx) CouponInsert(ctx context.Context, c *orderly.Coupon) error {
	_, err := t.exec(ctx, "coupon "+c.ID, `INSERT INTO coupons (`+couponColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		c.ID, c.UserID, c.AmountOff, c.Currency, c.State, nullString(c.OrderID), nullMS(c.ExpiresAt), ms(c.CreatedAt))
	return err
}

// CouponGet implements store.Tx.
func (t *tx) CouponGet(ctx context.Context, id string) (*orderly.Coupon, error) {
	c, err := scanCoupon(t.q.QueryRowContext(ctx, `SELECT `+couponColumns+` FROM coupons WHERE id = ?`, id))
	return c, translate(err, "coupon "+id)
}

// CouponList implements store.Tx.
func (t *tx) CouponList(ctx context.Context) ([]*orderly.Coupon, error) {
	rows, err := t.q.QueryContext(ctx, `SELECT `+couponColumns+` FROM coupons ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list coupons: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Coupon
	for rows.Next() {
		c, err := scanCoupon(rows)
		if err != nil {
			return nil, fmt.Errorf("list coupons: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// CouponFreeze implements store.Tx.
func (t *tx) CouponFreeze(ctx context.Context, p *store.CouponFreezeParams) (bool, error) {
	n, err := t.exec(ctx, "freeze coupon "+p.ID, `UPDATE coupons SET state = 'frozen', order_id = ?
		WHERE id = ? AND user_id = ? AND currency = ? AND state = 'available'
		AND (expires_at IS NULL OR expires_at > ?)`, p.OrderID, p.ID, p.UserID, p.Currency, ms(p.Now))
	return n == 1, err
}

// CouponRelease implements store.Tx.
func (t *tx) CouponRelease(ctx context.Context, id, orderID string, now time.Time) (bool, error) {
	n, err := t.exec(ctx, "release coupon "+id, `UPDATE coupons
		SET state = CASE WHEN expires_at IS NOT NULL AND expires_at <= ? THEN 'expired' ELSE 'available' END,
		order_id = NULL WHERE id = ? AND state = 'frozen' AND order_id = ?`, ms(now), id, orderID)
	return n == 1, err
}

// CouponUse implements store.Tx.
func (t *tx) CouponUse(ctx context.Context, id, orderID string) (bool, error) {
	n, err := t.exec(ctx, "use coupon "+id, `UPDATE coupons SET state = 'used'
		WHERE id = ? AND state = 'frozen' AND order_id = ?`, id, orderID)
	return n == 1, err
}
