package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/orderlyhq/orderly/bench"
)

// shop is the peers' side of the shared schema: what a hand-written service does with a
// delayed-job queue. It creates orders (one unit of one SKU, held) directly in SQL, pays
// some, and closes an order in one transaction: the guarded update (pending_payment,
// unpaid, due on the database clock), the release of its reservation and coupon, and its
// audit row: the same work as orderly's close.
type shop struct {
	db *bench.DB
	q  map[string]string
}

func newShop(db *bench.DB) *shop {
	now := db.NowSQL()
	p := db.Placeholder
	s := &shop{db: db, q: map[string]string{
		"close": `UPDATE orders SET state = 'closed', close_reason = 'payment_timeout', closed_at = ` + now + `, wake_at = NULL, version = version + 1
			WHERE id = ` + p(1) + ` AND state = 'pending_payment' AND pay_status IN ('unpaid', 'failed') AND close_at <= ` + now,
		"stock":   `UPDATE stock SET available = available + 1, held = held - 1 WHERE sku = (SELECT sku FROM reservations WHERE order_id = ` + p(1) + ` AND state = 'held')`,
		"release": `UPDATE reservations SET state = 'released', updated_at = ` + now + ` WHERE order_id = ` + p(1) + ` AND state = 'held'`,
		"coupon":  `UPDATE coupons SET state = 'available', order_id = NULL WHERE order_id = ` + p(1) + ` AND state = 'frozen'`,
		"audit": `INSERT INTO order_transitions (order_id, from_state, to_state, event, actor, at, pay_status_from, pay_status_to)
			VALUES (` + p(1) + `, 'pending_payment', 'closed', 'timeout', 'system', ` + now + `, 'unpaid', 'unpaid')`,
		"due":     `SELECT close_at - ` + now + ` FROM orders WHERE id = ` + p(1) + ` AND state = 'pending_payment'`,
		"scan":    `SELECT id FROM orders WHERE state = 'pending_payment' AND close_at <= ` + now + ` ORDER BY close_at LIMIT 1000`,
		"insert":  `INSERT INTO orders (id, user_id, flow, state, pay_status, items, amount, currency, created_at, expires_at, close_at, wake_at, version) VALUES (` + p(1) + `, 'bench', 'standard', 'pending_payment', 'unpaid', ` + p(2) + `, 1000, 'USD', ` + p(3) + `, ` + p(4) + `, ` + p(5) + `, ` + p(6) + `, 1)`,
		"reserve": `INSERT INTO reservations (order_id, sku, quantity, state, updated_at) VALUES (` + p(1) + `, ` + p(2) + `, 1, 'held', ` + p(3) + `)`,
		"hold":    `UPDATE stock SET available = available - 1, held = held + 1 WHERE sku = ` + p(1) + ` AND available >= 1`,
		"pay":     `UPDATE orders SET state = 'paid', pay_status = 'paid', paid_at = ` + now + `, wake_at = NULL, version = version + 1 WHERE id = ` + p(1) + ` AND state = 'pending_payment'`,
		"commit":  `UPDATE reservations SET state = 'committed', updated_at = ` + now + ` WHERE order_id = ` + p(1) + ` AND state = 'held'`,
		"sold":    `UPDATE stock SET held = held - 1, sold = sold + 1 WHERE sku = ` + p(1),
	}}
	return s
}

// inTx runs fn in a transaction, again after a serialization failure or deadlock.
func (s *shop) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	for attempt := 0; ; attempt++ {
		tx, err := s.db.SQL.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err = fn(tx); err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		if err == nil || attempt >= 5 || !retryable(err) {
			return err
		}
	}
}

func retryable(err error) bool {
	m := err.Error()
	return strings.Contains(m, "40001") || strings.Contains(m, "40P01") || strings.Contains(m, "SQLITE_BUSY")
}

// create writes an order of one unit of SKU(i), due at closeAt (unix ms), and pays it when
// paid is set. Its id is returned.
func (s *shop) create(ctx context.Context, id string, i int, createdAt, closeAt int64, paid bool) error {
	sku := bench.SKU(i)
	items := fmt.Sprintf(`[{"sku":%q,"quantity":1,"unit_price":1000}]`, sku)
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if r, err := tx.ExecContext(ctx, s.q["hold"], sku); err != nil {
			return err
		} else if n, _ := r.RowsAffected(); n != 1 {
			return fmt.Errorf("out of stock: %s", sku)
		}
		if _, err := tx.ExecContext(ctx, s.q["insert"], id, items, createdAt, closeAt, closeAt, closeAt); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q["reserve"], id, sku, createdAt); err != nil {
			return err
		}
		if !paid {
			return nil
		}
		for _, q := range []string{"pay", "commit"} {
			if _, err := tx.ExecContext(ctx, s.q[q], id); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, s.q["sold"], sku)
		return err
	})
}

// notDue is closeOrder's error for an order whose close_at the database clock has not
// reached: the job fired early by the worker's clock.
type notDue struct{ ms int64 }

func (e *notDue) Error() string { return fmt.Sprintf("not due for %d ms", e.ms) }

// closeOrder is a job's work: the guarded close and the releases in one transaction. An
// order paid or closed meanwhile is left alone (nil). An order not yet due waits until it
// is (at most a second), then is closed.
func (s *shop) closeOrder(ctx context.Context, id string) error {
	for range 2 {
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			r, err := tx.ExecContext(ctx, s.q["close"], id)
			if err != nil {
				return err
			}
			if n, _ := r.RowsAffected(); n == 0 {
				var left int64
				switch err := tx.QueryRowContext(ctx, s.q["due"], id).Scan(&left); {
				case errors.Is(err, sql.ErrNoRows):
					return nil // paid or closed meanwhile
				case err != nil:
					return err
				case left > 0:
					return &notDue{ms: left}
				}
				return nil // pending but paying: not the business of this comparison
			}
			for _, q := range []string{"stock", "release", "coupon", "audit"} {
				if _, err := tx.ExecContext(ctx, s.q[q], id); err != nil {
					return err
				}
			}
			return nil
		})
		var nd *notDue
		if !errors.As(err, &nd) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(min(nd.ms, 1000)+1) * time.Millisecond):
		}
	}
	return nil
}

// dueIDs returns up to 1000 open orders whose close_at has passed, earliest first.
func (s *shop) dueIDs(ctx context.Context) ([]string, error) {
	rows, err := s.db.SQL.QueryContext(ctx, s.q["scan"])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
