package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// The INSERT of held reservations, head and one row's VALUES tuple (StockReserve,
// StockReserveMany).
const (
	qReservationInsertHead = `INSERT INTO reservations (order_id, sku, quantity, state, updated_at)`
	qReservationInsertRow  = `(?, ?, ?, 'held', ?)`
)

var (
	qStockUpsert = newQuery(func(d *dialect) string {
		if d == mysqlDialect {
			return `INSERT INTO stock (sku, available) VALUES (?, ?) ON DUPLICATE KEY UPDATE available = VALUES(available)`
		}
		return `INSERT INTO stock (sku, available) VALUES (?, ?) ON CONFLICT (sku) DO UPDATE SET available = excluded.available`
	})
	qStockGet     = sqlText(`SELECT available, held, sold FROM stock WHERE sku = ?`)
	qStockList    = sqlText(`SELECT sku, available, held, sold FROM stock WHERE sku > ? ORDER BY sku LIMIT ?`)
	qStockAdjust  = sqlText(`UPDATE stock SET available = available + ? WHERE sku = ? AND available + ? BETWEEN 0 AND ?`)
	qStockReserve = sqlText(`UPDATE stock SET available = available - ?, held = held + ? WHERE sku = ? AND available >= ?`)
	qStockRelease = sqlText(`UPDATE stock SET available = available + ?, held = held - ? WHERE sku = ?`)
	qStockCommit  = sqlText(`UPDATE stock SET sold = sold + ?, held = held - ? WHERE sku = ?`)
	// qStockLockMany locks the stock rows of a JSON list of SKUs in SKU order (dialects with
	// row locks), so that the set-based qStockReleaseMany and qStockCommitMany, whose join
	// order the planner picks, take no lock in another order than a single-row update would.
	qStockLockMany = newQuery(func(d *dialect) string {
		return d.selectByIDs("stock.sku", "stock", "sku", d.ids, "1 = 1", ` ORDER BY stock.sku`+d.lockRows)
	})
	// qStockReleaseMany and qStockCommitMany apply a JSON list of [sku, units] pairs (one
	// per SKU) to stock in one statement: units held go back to available, or to sold.
	qStockReleaseMany = newQuery(func(d *dialect) string { return d.stockMoveMany("available = available + j.n") })
	qStockCommitMany  = newQuery(func(d *dialect) string { return d.stockMoveMany("sold = sold + j.n") })

	qReservationInsert = sqlText(qReservationInsertHead + ` VALUES ` + qReservationInsertRow)
	qReservationsHeld  = newQuery(func(d *dialect) string {
		return d.selectByIDs("reservations.order_id, reservations.sku, quantity", "reservations", "order_id", d.ids,
			`state = 'held'`, ` ORDER BY reservations.order_id, reservations.sku`+d.lockRows)
	})
	qReservationsMark = newQuery(func(d *dialect) string { // the rows qReservationsHeld locked
		return d.updateLockedByIDs("reservations", "order_id", d.ids, `state = ?, updated_at = ?`, `state = 'held'`)
	})
	qReservationList = sqlText(`SELECT order_id, sku, quantity, state, refunded, restocked FROM reservations
		WHERE ? = '' OR order_id = ? ORDER BY order_id, sku`)
)

// StockSet implements store.Tx.
func (t *tx) StockSet(ctx context.Context, sku string, available int64) (*orderly.Stock, error) {
	if _, err := t.exec(ctx, "stock "+sku, qStockUpsert, sku, available); err != nil {
		return nil, err
	}
	return t.StockGet(ctx, sku)
}

// StockGet implements store.Tx.
func (t *tx) StockGet(ctx context.Context, sku string) (*orderly.Stock, error) {
	s := orderly.Stock{SKU: sku}
	if err := t.queryRow(ctx, qStockGet, sku).Scan(&s.Available, &s.Held, &s.Sold); err != nil {
		return nil, translate(err, "sku "+sku)
	}
	return &s, nil
}

// StockList implements store.Tx.
func (t *tx) StockList(ctx context.Context, after string, limit int) ([]*orderly.Stock, error) {
	if limit <= 0 {
		limit = math.MaxInt32
	}
	rows, err := t.query(ctx, qStockList, after, limit)
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

// StockAdjust implements store.Tx.
func (t *tx) StockAdjust(ctx context.Context, sku string, delta, most int64) (bool, error) {
	if err := t.gate("stock " + sku); err != nil { // a hot SKU's row, as StockReserve
		return false, err
	}
	n, err := t.exec(ctx, "adjust stock "+sku, qStockAdjust, delta, sku, delta, most)
	return n == 1, err
}

// StockReserve implements store.Tx.
func (t *tx) StockReserve(ctx context.Context, p *store.StockReserveParams) (bool, error) {
	// A hot SKU's row: one transaction of this process at a time in its lock queue (gate.go).
	if err := t.gate("stock " + p.SKU); err != nil {
		return false, err
	}
	n, err := t.exec(ctx, "reserve "+p.SKU, qStockReserve, p.Quantity, p.Quantity, p.SKU, p.Quantity)
	if err != nil || n == 0 {
		return false, err
	}
	_, err = t.exec(ctx, "reservation "+p.OrderID+"/"+p.SKU, qReservationInsert, p.OrderID, p.SKU, p.Quantity, ms(p.Now))
	return err == nil, err
}

// ReservationsRelease implements store.Tx.
func (t *tx) ReservationsRelease(ctx context.Context, orderID string, now time.Time) ([]*orderly.Reservation, error) {
	return t.ReservationsReleaseMany(ctx, []string{orderID}, now)
}

// ReservationsReleaseMany implements store.Tx: the guarded held → released update is the
// idempotency; stock moves only for the rows it changed, once per SKU.
func (t *tx) ReservationsReleaseMany(ctx context.Context, orderIDs []string, now time.Time) ([]*orderly.Reservation, error) {
	return t.moveReservations(ctx, orderIDs, now, orderly.ReservationReleased, qStockRelease, qStockReleaseMany)
}

// ReservationsCommit implements store.Tx.
func (t *tx) ReservationsCommit(ctx context.Context, orderID string, now time.Time) ([]*orderly.Reservation, error) {
	return t.moveReservations(ctx, []string{orderID}, now, orderly.ReservationCommitted, qStockCommit, qStockCommitMany)
}

// ReservationsCommitMany implements store.Tx.
func (t *tx) ReservationsCommitMany(ctx context.Context, orderIDs []string, now time.Time) ([]*orderly.Reservation, error) {
	return t.moveReservations(ctx, orderIDs, now, orderly.ReservationCommitted, qStockCommit, qStockCommitMany)
}

// stockMoveMany builds the UPDATE of stock that moves the units of a JSON list of [sku, n]
// pairs out of held (set is the other column's assignment, in terms of j.n).
func (d *dialect) stockMoveMany(set string) string {
	switch d {
	case mysqlDialect:
		return `UPDATE stock FORCE INDEX (PRIMARY) JOIN JSON_TABLE(?, '$[*]' COLUMNS (
			sku VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]', n BIGINT PATH '$[1]')) AS j
			ON stock.sku = j.sku SET stock.` + set + `, stock.held = stock.held - j.n`
	case postgresDialect:
		return `UPDATE stock SET ` + set + `, held = held - j.n
			FROM (SELECT e->>0 AS sku, (e->>1)::bigint AS n FROM jsonb_array_elements(?::jsonb) AS t(e)) AS j
			WHERE stock.sku = j.sku`
	default:
		return `UPDATE stock SET ` + set + `, held = held - j.n
			FROM (SELECT json_extract(value, '$[0]') AS sku, json_extract(value, '$[1]') AS n FROM json_each(?)) AS j
			WHERE stock.sku = j.sku`
	}
}

// moveReservations selects (and locks) the held reservations of the orders, applies the
// per-SKU totals to stock (one row with stockUpdate, several with one statement,
// stockMany, after locking them in SKU order, a fixed lock order) and marks the
// reservations to.
func (t *tx) moveReservations(ctx context.Context, orderIDs []string, now time.Time, to string, stockUpdate, stockMany *query) ([]*orderly.Reservation, error) {
	if len(orderIDs) == 0 {
		return nil, nil
	}
	ids := idList(slices.Compact(slices.Sorted(slices.Values(orderIDs)))) // MySQL's join would count a repeated id twice
	moved, err := t.heldReservations(ctx, ids, to)
	if err != nil || len(moved) == 0 {
		return nil, err
	}
	perSKU := map[string]int64{}
	for _, r := range moved {
		perSKU[r.SKU] += r.Quantity
	}
	skus := make([]string, 0, len(perSKU))
	for sku := range perSKU {
		skus = append(skus, sku)
	}
	slices.Sort(skus)
	if len(skus) == 1 {
		sku := skus[0]
		n, err := t.exec(ctx, "stock "+sku, stockUpdate, perSKU[sku], perSKU[sku], sku)
		if err != nil {
			return nil, err
		} else if n != 1 {
			return nil, fmt.Errorf("%s reservations of sku %s: stock row missing", to, sku)
		}
	} else {
		if err := t.stockMoveMany(ctx, skus, perSKU, to, stockMany); err != nil {
			return nil, err
		}
	}
	// The reservations are marked after the stock rows are taken, not before: on MySQL a
	// change of state rewrites the (sku, state) index entry, whose foreign key check takes
	// a shared lock on the stock row; two transactions holding it shared and each wanting
	// it exclusive deadlocked (TestMoveReservationsTakesStockBeforeMarking).
	if _, err := t.exec(ctx, to+" reservations", qReservationsMark, t.db.d.byIDsArgs(ids, []any{to, ms(now)}, nil)...); err != nil {
		return nil, err
	}
	slices.SortFunc(moved, func(a, b *orderly.Reservation) int {
		return cmp.Or(cmp.Compare(a.OrderID, b.OrderID), cmp.Compare(a.SKU, b.SKU))
	})
	return moved, nil
}

// stockMoveMany applies the per-SKU totals of skus (sorted) to stock with stockMany, after
// locking their rows in SKU order where the dialect has row locks.
func (t *tx) stockMoveMany(ctx context.Context, skus []string, perSKU map[string]int64, to string, stockMany *query) error {
	if t.db.d.lockRows != "" {
		locked, err := t.strings(ctx, qStockLockMany, jsonList(skus))
		if err != nil {
			return fmt.Errorf("%s reservations: lock stock: %w", to, err)
		} else if len(locked) != len(skus) {
			return fmt.Errorf("%s reservations: %d of %d stock rows missing", to, len(skus)-len(locked), len(skus))
		}
	}
	pairs := make([][2]any, len(skus))
	for i, sku := range skus {
		pairs[i] = [2]any{sku, perSKU[sku]}
	}
	b, err := json.Marshal(pairs)
	if err != nil {
		return err
	}
	n, err := t.exec(ctx, to+" stock", stockMany, string(b))
	if err != nil {
		return err
	} else if n != int64(len(skus)) {
		return fmt.Errorf("%s reservations: %d of %d stock rows missing", to, int64(len(skus))-n, len(skus))
	}
	return nil
}

func (t *tx) heldReservations(ctx context.Context, ids, to string) ([]*orderly.Reservation, error) {
	rows, err := t.query(ctx, qReservationsHeld, ids)
	if err != nil {
		return nil, fmt.Errorf("held reservations: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Reservation
	for rows.Next() {
		r := orderly.Reservation{State: to}
		if err := rows.Scan(&r.OrderID, &r.SKU, &r.Quantity); err != nil {
			return nil, fmt.Errorf("held reservations: %w", err)
		}
		out = append(out, &r)
	}
	return out, rows.Err()
}

// ReservationList implements store.Tx.
func (t *tx) ReservationList(ctx context.Context, orderID string) ([]*orderly.Reservation, error) {
	rows, err := t.query(ctx, qReservationList, orderID, orderID)
	if err != nil {
		return nil, fmt.Errorf("list reservations: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Reservation
	for rows.Next() {
		var r orderly.Reservation
		if err := rows.Scan(&r.OrderID, &r.SKU, &r.Quantity, &r.State, &r.Refunded, &r.Restocked); err != nil {
			return nil, fmt.Errorf("list reservations: %w", err)
		}
		out = append(out, &r)
	}
	return out, rows.Err()
}

const couponColumns = `id, user_id, amount_off, currency, state, order_id, expires_at, created_at`

var (
	qCouponInsert = sqlText(`INSERT INTO coupons (` + couponColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	qCouponGet    = sqlText(`SELECT ` + couponColumns + ` FROM coupons WHERE id = ?`)
	qCouponList   = sqlText(`SELECT ` + couponColumns + ` FROM coupons ORDER BY id`)
	qCouponFreeze = sqlText(`UPDATE coupons SET state = 'frozen', order_id = ?
		WHERE id = ? AND user_id = ? AND currency = ? AND state = 'available' AND (expires_at IS NULL OR expires_at > ?)`)
	// qCouponsRelease releases the listed coupons that are frozen by one of the listed
	// orders. An order freezes only its own coupon_id, so a coupon frozen by a listed order
	// is that order's coupon: the pairs need not be matched one by one.
	qCouponsRelease = newQuery(func(d *dialect) string {
		return d.updateByIDs("coupons", "id", d.ids,
			`state = CASE WHEN expires_at IS NOT NULL AND expires_at <= ? THEN 'expired' ELSE 'available' END, order_id = NULL`,
			`state = 'frozen' AND order_id IN (`+d.ids+`)`)
	})
	qCouponUse = sqlText(`UPDATE coupons SET state = 'used' WHERE id = ? AND state = 'frozen' AND order_id = ?`)
)

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
	_, err := t.exec(ctx, "coupon "+c.ID, qCouponInsert,
		c.ID, c.UserID, c.AmountOff, c.Currency, c.State, nullString(c.OrderID), nullMS(c.ExpiresAt), ms(c.CreatedAt))
	return err
}

// CouponGet implements store.Tx.
func (t *tx) CouponGet(ctx context.Context, id string) (*orderly.Coupon, error) {
	c, err := scanCoupon(t.queryRow(ctx, qCouponGet, id))
	return c, translate(err, "coupon "+id)
}

// CouponList implements store.Tx.
func (t *tx) CouponList(ctx context.Context) ([]*orderly.Coupon, error) {
	rows, err := t.query(ctx, qCouponList)
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
	n, err := t.exec(ctx, "freeze coupon "+p.ID, qCouponFreeze, p.OrderID, p.ID, p.UserID, p.Currency, ms(p.Now))
	return n == 1, err
}

// CouponRelease implements store.Tx.
func (t *tx) CouponRelease(ctx context.Context, id, orderID string, now time.Time) (bool, error) {
	n, err := t.CouponsRelease(ctx, []orderly.CouponRef{{CouponID: id, OrderID: orderID}}, now)
	return n == 1, err
}

// CouponsRelease implements store.Tx.
func (t *tx) CouponsRelease(ctx context.Context, refs []orderly.CouponRef, now time.Time) (int64, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	coupons, orders := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		coupons[i], orders[i] = r.CouponID, r.OrderID
	}
	return t.exec(ctx, "release coupons", qCouponsRelease, t.db.d.byIDsArgs(idList(coupons), []any{ms(now)}, []any{jsonList(orders)})...)
}

// CouponUse implements store.Tx.
func (t *tx) CouponUse(ctx context.Context, id, orderID string) (bool, error) {
	n, err := t.exec(ctx, "use coupon "+id, qCouponUse, id, orderID)
	return n == 1, err
}
