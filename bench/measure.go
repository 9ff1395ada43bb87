package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Closes are the payment-timeout closes of the orders created at or after a time, read
// from the database.
type Closes struct {
	// Closed counts the orders closed for payment timeout.
	Closed int64
	// Early counts those closed before their close_at (closed_at < close_at).
	Early int64
	// Lateness is closed_at − close_at, in ms.
	Lateness *Lateness
	// FirstCloseAt and LastClosedAt are the smallest close_at and the largest closed_at
	// (unix ms) among them.
	FirstCloseAt, LastClosedAt int64
}

// ReadCloses reads the closes of the orders created at or after since (unix ms).
func (db *DB) ReadCloses(ctx context.Context, since int64) (*Closes, error) {
	//nolint:gosec // formats a bind placeholder only
	q := fmt.Sprintf(`SELECT close_at, closed_at FROM orders
		WHERE created_at >= %s AND state = 'closed' AND close_reason = 'payment_timeout'`, db.Placeholder(1))
	rows, err := db.SQL.QueryContext(ctx, q, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	c := &Closes{}
	var ms []float64
	for rows.Next() {
		var closeAt, closedAt int64
		if err := rows.Scan(&closeAt, &closedAt); err != nil {
			return nil, err
		}
		c.Closed++
		if closedAt < closeAt {
			c.Early++
		}
		if c.FirstCloseAt == 0 || closeAt < c.FirstCloseAt {
			c.FirstCloseAt = closeAt
		}
		c.LastClosedAt = max(c.LastClosedAt, closedAt)
		ms = append(ms, float64(closedAt-closeAt))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.Lateness = NewLateness(ms)
	return c, nil
}

// WaitClosed polls (every 100 ms, on the partial index of open orders) until no order created at or after since is open, or until
// timeout. It returns the number still open when it stopped. A poll asks whether one such
// order is left (LIMIT 1), not how many: counting 100 000 open orders ten times a second
// took a fifth of the database's time during a burst, which the bench then measured as
// the server's.
func (db *DB) WaitClosed(ctx context.Context, since int64, timeout time.Duration) (int64, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	const open = `FROM orders WHERE wake_at IS NOT NULL AND state = 'pending_payment' AND created_at >= `
	//nolint:gosec // formats a bind placeholder only
	anyOpen := `SELECT 1 ` + open + db.Placeholder(1) + ` LIMIT 1`
	//nolint:gosec // formats a bind placeholder only
	countOpen := `SELECT count(*) ` + open + db.Placeholder(1)
	for {
		var one int64
		err := db.SQL.QueryRowContext(wctx, anyOpen, since).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		} else if err != nil && wctx.Err() == nil {
			return -1, err
		}
		if err == nil {
			select {
			case <-wctx.Done():
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		// Timed out: count what is left, with the caller's context.
		var left int64
		if err := db.SQL.QueryRowContext(ctx, countOpen, since).Scan(&left); err != nil {
			return -1, err
		}
		return left, nil
	}
}

// Effects checks what a closed order's releases leave behind: it returns the reservations
// of closed orders still held and the coupons still frozen by a closed order. Both are 0
// once every release was applied.
func (db *DB) Effects(ctx context.Context) (heldReservations, frozenCoupons int64, err error) {
	err = db.SQL.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM reservations r JOIN orders o ON o.id = r.order_id WHERE o.state = 'closed' AND r.state = 'held'),
		(SELECT count(*) FROM orders o JOIN coupons c ON c.id = o.coupon_id AND c.order_id = o.id WHERE o.state = 'closed' AND c.state = 'frozen')`).
		Scan(&heldReservations, &frozenCoupons)
	return heldReservations, frozenCoupons, err
}

// StockOf returns available, held and sold units of a SKU.
func (db *DB) StockOf(ctx context.Context, sku string) (available, held, sold int64, err error) {
	err = db.SQL.QueryRowContext(ctx, fmt.Sprintf(`SELECT available, held, sold FROM stock WHERE sku = %s`, db.Placeholder(1)), sku).
		Scan(&available, &held, &sold)
	return available, held, sold, err
}

// ConservationBroken counts SKUs whose stock does not match their reservations: held must
// equal the units of held reservations, sold those of committed ones (I4).
func (db *DB) ConservationBroken(ctx context.Context) (int64, error) {
	var n int64
	err := db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM stock s WHERE
		s.held <> COALESCE((SELECT sum(quantity) FROM reservations r WHERE r.sku = s.sku AND r.state = 'held'), 0)
		OR s.sold <> COALESCE((SELECT sum(quantity) FROM reservations r WHERE r.sku = s.sku AND r.state = 'committed'), 0)`).Scan(&n)
	return n, err
}

// WaitDelivered waits until no outbox message is pending (the relay has delivered the
// burst's events), polling every 100 ms, for at most timeout. Errors: the database
// failed, or messages were still pending at the timeout.
func (db *DB) WaitDelivered(ctx context.Context, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var one int64
		err := db.SQL.QueryRowContext(wctx, `SELECT 1 FROM outbox WHERE state = 'pending' LIMIT 1`).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("bench: wait for the outbox to drain: %w", err)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("bench: outbox messages still pending after %s", timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
