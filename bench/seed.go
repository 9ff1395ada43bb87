package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/google/uuid"
)

// Shapes of the orders the bench writes itself (burst, history, pending, peers): one unit
// of one of SKUs SKUs at 1000 minor units of USD, and for burst a frozen coupon of 100 off.
const (
	// SKUs is the number of SKUs of every scenario but flash-sale: "sku-0000" … "sku-0999".
	SKUs        = 1000
	unitPrice   = 1000
	couponOff   = 100
	stockPerSKU = 1_000_000
	benchUser   = "bench"
)

// SKU returns the name of SKU i mod SKUs.
func SKU(i int) string { return fmt.Sprintf("sku-%04d", i%SKUs) }

// uuidAt returns a UUIDv7 (as orderly mints order ids) for the unix millisecond ms, with
// random low bits from r.
func uuidAt(ms int64, r *rand.Rand) string {
	var u uuid.UUID
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(ms)) //nolint:gosec // a positive unix time
	copy(u[0:6], ts[2:8])
	binary.BigEndian.PutUint64(u[8:16], r.Uint64())
	binary.BigEndian.PutUint16(u[6:8], uint16(r.Uint32())) //nolint:gosec // random bits
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u.String()
}

// SeedOrders is what (*DB).SeedOrders writes.
type SeedOrders struct {
	// N is the number of orders.
	N int
	// State is "pending_payment" (an open order, due at CloseAt, with a held reservation
	// and, with Coupons, a frozen coupon) or "closed" (a closed order of the past: a
	// released reservation and its two audit rows, created and closed).
	State string
	// CreatedAt and CloseAt are unix ms; a closed order was closed at CloseAt.
	CreatedAt, CloseAt int64
	// Coupons gives each open order a frozen coupon.
	Coupons bool
	// Transitions writes the audit rows of closed orders.
	Transitions bool
	// Seed makes the ids reproducible.
	Seed uint64
}

// SeedStock creates the SKUs with stockPerSKU available units each.
func (db *DB) SeedStock(ctx context.Context) error {
	return db.bulkInsert(ctx, "stock", []string{"sku", "available", "held", "sold"}, SKUs, func(i int, v []any) {
		v[0], v[1], v[2], v[3] = SKU(i), int64(stockPerSKU), int64(0), int64(0)
	})
}

// SeedOrders writes orders directly in SQL (not through the API), with their reservations
// (one unit of SKU(i)), coupons and audit rows, and moves the held units of open orders'
// reservations into stock.held. It returns the ids. SeedStock must have run.
func (db *DB) SeedOrders(ctx context.Context, p SeedOrders) ([]string, error) {
	r := rand.New(rand.NewPCG(p.Seed, 0x62656e6368)) //nolint:gosec // ids, not secrets
	ids := make([]string, p.N)
	span := max(p.CloseAt-p.CreatedAt, 1)
	for i := range ids {
		// Closed history spreads its ids over the span, as creation times do.
		ms := p.CreatedAt
		if p.State == "closed" {
			ms += int64(i) * span / int64(max(p.N, 1))
		}
		ids[i] = uuidAt(ms, r)
	}
	open := p.State == "pending_payment"
	amount := int64(unitPrice)
	if open && p.Coupons {
		amount -= couponOff
		err := db.bulkInsert(ctx, "coupons", []string{"id", "user_id", "amount_off", "currency", "state", "order_id", "created_at"}, p.N,
			func(i int, v []any) {
				v[0], v[1], v[2], v[3], v[4], v[5], v[6] = "c-"+ids[i], benchUser, int64(couponOff), "USD", "frozen", ids[i], p.CreatedAt
			})
		if err != nil {
			return nil, err
		}
	}
	cols := []string{"id", "user_id", "flow", "state", "pay_status", "items", "amount", "currency", "coupon_id",
		"created_at", "expires_at", "close_at", "wake_at", "closed_at", "close_reason", "version"}
	err := db.bulkInsert(ctx, "orders", cols, p.N, func(i int, v []any) {
		v[0], v[1], v[2], v[3], v[4] = ids[i], benchUser, "standard", p.State, "unpaid"
		v[5] = fmt.Sprintf(`[{"sku":%q,"quantity":1,"unit_price":%d}]`, SKU(i), unitPrice)
		v[6], v[7], v[8] = amount, "USD", nil
		if open && p.Coupons {
			v[8] = "c-" + ids[i]
		}
		created, closeAt := p.CreatedAt, p.CloseAt
		if !open {
			created += int64(i) * span / int64(max(p.N, 1))
			closeAt = created + 1000
		}
		v[9], v[10], v[11] = created, closeAt, closeAt
		if open {
			v[12], v[13], v[14], v[15] = closeAt, nil, nil, int64(1)
		} else {
			v[12], v[13], v[14], v[15] = nil, closeAt, "payment_timeout", int64(2)
		}
	})
	if err != nil {
		return nil, err
	}
	resState := "held"
	if !open {
		resState = "released"
	}
	err = db.bulkInsert(ctx, "reservations", []string{"order_id", "sku", "quantity", "state", "updated_at"}, p.N, func(i int, v []any) {
		v[0], v[1], v[2], v[3], v[4] = ids[i], SKU(i), int64(1), resState, p.CreatedAt
	})
	if err != nil {
		return nil, err
	}
	if open {
		// Units of the held reservations leave available for held, as a create would.
		const q = `UPDATE stock SET available = available - x.n, held = held + x.n
			FROM (SELECT sku, count(*) AS n FROM reservations WHERE state = 'held' GROUP BY sku) AS x WHERE stock.sku = x.sku`
		if _, err := db.SQL.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("bench: hold stock: %w", err)
		}
		// Only the new reservations were counted: a scenario seeds open orders once.
	}
	if !open && p.Transitions {
		tcols := []string{"order_id", "from_state", "to_state", "event", "actor", "at", "pay_status_from", "pay_status_to"}
		err = db.bulkInsert(ctx, "order_transitions", tcols, 2*p.N, func(j int, v []any) {
			i := j / 2
			created := p.CreatedAt + int64(i)*span/int64(max(p.N, 1))
			if j%2 == 0 {
				v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7] = ids[i], "", "pending_payment", "create", "buyer", created, "", "unpaid"
			} else {
				v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7] = ids[i], "pending_payment", "closed", "timeout", "system", created+1000, "unpaid", "unpaid"
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// MoveDeadlines sets close_at (and expires_at, wake_at) of every open order to closeAt
// (unix ms): the burst's orders, loaded ahead, all fall due in the same millisecond.
func (db *DB) MoveDeadlines(ctx context.Context, closeAt int64) error {
	//nolint:gosec // formats bind placeholders only
	q := fmt.Sprintf(`UPDATE orders SET expires_at = %s, close_at = %s, wake_at = %s WHERE state = 'pending_payment'`,
		db.Placeholder(1), db.Placeholder(2), db.Placeholder(3))
	_, err := db.SQL.ExecContext(ctx, q, closeAt, closeAt, closeAt)
	return err
}
