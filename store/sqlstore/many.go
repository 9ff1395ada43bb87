package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// rowsPerInsert bounds the rows of one multi-row INSERT: 64 orders are 1 280 bind
// parameters, far below every dialect's limit (SQLite 32 766, PostgreSQL 65 535).
const rowsPerInsert = 64

// qStockLockAvailable reads (and locks) a SKU's available units.
var qStockLockAvailable = newQuery(func(d *dialect) string {
	return `SELECT available FROM stock WHERE sku = ?` + d.lockRows
})

// insertMany writes rows with INSERT head VALUES row, row, …, rowsPerInsert rows a
// statement; args holds every row's arguments in order, as many each as row has
// placeholders. The statements are not registered like the others (their text depends on
// the number of rows): execBuilt prepares them on SQLite, once per row count.
func (t *tx) insertMany(ctx context.Context, what, head, tuple string, args []any) error {
	perRow := strings.Count(tuple, "?")
	rows := len(args) / perRow
	for start := 0; start < rows; start += rowsPerInsert {
		n := min(rowsPerInsert, rows-start)
		text := head + " VALUES " + strings.TrimSuffix(strings.Repeat(tuple+", ", n), ", ")
		if _, err := t.execBuilt(ctx, t.db.d.rebind(text), args[start*perRow:(start+n)*perRow]...); err != nil {
			return t.translate(t.check(err), what)
		}
	}
	return nil
}

// OrdersInsertMany implements store.Tx.
func (t *tx) OrdersInsertMany(ctx context.Context, ps []*store.OrderInsertParams) error {
	var args []any
	for _, p := range ps {
		row, err := orderInsertArgs(p)
		if err != nil {
			return err
		}
		args = append(args, row...)
	}
	return t.insertMany(ctx, fmt.Sprintf("%d orders", len(ps)), qOrderInsertHead, qOrderInsertRow, args)
}

// orderInsertArgs are the arguments of qOrderInsert for p.
func orderInsertArgs(p *store.OrderInsertParams) ([]any, error) {
	o := p.Order
	items, err := json.Marshal(o.Items)
	if err != nil {
		return nil, fmt.Errorf("insert order %s: %w", o.ID, err)
	}
	var wakeAt any // an order waits on its deadline only in a timed state
	if !p.NoDeadline {
		wakeAt = ms(o.CloseAt)
	}
	return []any{o.ID, o.UserID, o.Flow, o.State, o.PayStatus, string(items), o.Amount, o.Currency,
		nullString(o.CouponID), nullString(o.CurrentPaymentID), ms(o.CreatedAt), ms(o.ExpiresAt),
		ms(o.CloseAt), wakeAt, nullMS(o.ClosedAt), nullString(string(o.CloseReason)), nullMS(o.PaidAt),
		o.Version, nullString(p.IdempotencyKey), nullString(p.RequestHash), encodeMetadata(o.Metadata)}, nil
}

// TransitionsInsertMany implements store.Tx.
func (t *tx) TransitionsInsertMany(ctx context.Context, trs []*orderly.Transition) error {
	args := make([]any, 0, len(trs)*strings.Count(qTransitionInsertRow, "?"))
	for _, tr := range trs {
		args = append(args, tr.OrderID, tr.From, tr.To, tr.Event, tr.Cause, tr.Actor, ms(tr.At), tr.TraceID, tr.PayStatusFrom, tr.PayStatusTo)
	}
	return t.insertMany(ctx, fmt.Sprintf("%d audit rows", len(trs)), qTransitionInsertHead, qTransitionInsertRow, args)
}

// StockLockAvailable implements store.Tx.
func (t *tx) StockLockAvailable(ctx context.Context, sku string) (int64, bool, error) {
	// A hot SKU's row: one transaction of this process at a time in its lock queue (gate.go).
	if err := t.gate("stock " + sku); err != nil {
		return 0, false, err
	}
	var available int64
	err := t.queryRow(ctx, qStockLockAvailable, sku).Scan(&available)
	if err != nil {
		err = t.translate(t.check(err), "stock "+sku)
		if orderly.ErrorCode(err) == orderly.ENOTFOUND {
			return 0, false, nil
		}
		return 0, false, err
	}
	return available, true, nil
}

// StockReserveMany implements store.Tx.
func (t *tx) StockReserveMany(ctx context.Context, sku string, ps []*store.StockReserveParams) error {
	if len(ps) == 0 {
		return nil
	}
	var total int64
	args := make([]any, 0, len(ps)*4)
	for _, p := range ps {
		if p.SKU != sku || p.Quantity < 1 {
			return fmt.Errorf("reserve %s: a reservation of %d units of %s among them", sku, p.Quantity, p.SKU)
		}
		total += p.Quantity
		args = append(args, p.OrderID, p.SKU, p.Quantity, ms(p.Now))
	}
	if err := t.gate("stock " + sku); err != nil {
		return err
	}
	n, err := t.exec(ctx, "reserve "+sku, qStockReserve, total, total, sku, total)
	if err != nil {
		return err
	} else if n != 1 {
		return fmt.Errorf("reserve %d units of %s for %d orders: not available (the batch counted them under the row's lock)", total, sku, len(ps))
	}
	return t.insertMany(ctx, fmt.Sprintf("%d reservations of %s", len(ps), sku), qReservationInsertHead, qReservationInsertRow, args)
}
