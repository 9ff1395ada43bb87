package storetest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// grace is the factories' grace period: close_at = expires_at + grace.
const grace = 5 * time.Second

var seq atomic.Int64

// nextID returns a new id with the prefix, unique within the test binary.
func nextID(prefix string) string { return fmt.Sprintf("%s-%04d", prefix, seq.Add(1)) }

// orderOpts are the options of insertOrder; zero fields get defaults.
type orderOpts struct {
	ID               string            // default: a new "order-NNNN"
	UserID           string            // default "user-1"
	State            orderly.State     // default pending_payment
	PayStatus        orderly.PayStatus // default unpaid
	Items            []orderly.Item    // default one item of "sku-1"
	Currency         string            // default "EUR"
	CouponID         string
	CurrentPaymentID string
	CreatedAt        time.Time // default t0
	CloseAt          time.Time // default CreatedAt + 30 min + grace; expires_at = CloseAt − grace
	ClosedAt         *time.Time
	CloseReason      orderly.CloseReason
	PaidAt           *time.Time
	IdempotencyKey   string
	RequestHash      string
	NoDeadline       bool // created in a state that is not timed: no wake_at
}

// newOrder builds the order opts describe; Amount is the items' total.
func newOrder(o *orderOpts) *orderly.Order {
	ord := &orderly.Order{
		ID:               o.ID,
		UserID:           o.UserID,
		Flow:             orderly.FlowStandard,
		State:            o.State,
		PayStatus:        o.PayStatus,
		Items:            o.Items,
		Currency:         o.Currency,
		CouponID:         o.CouponID,
		CurrentPaymentID: o.CurrentPaymentID,
		CreatedAt:        o.CreatedAt,
		CloseAt:          o.CloseAt,
		ClosedAt:         o.ClosedAt,
		CloseReason:      o.CloseReason,
		PaidAt:           o.PaidAt,
		Version:          1,
	}
	if ord.ID == "" {
		ord.ID = nextID("order")
	}
	if ord.UserID == "" {
		ord.UserID = "user-1"
	}
	if ord.State == "" {
		ord.State = orderly.StatePendingPayment
	}
	if ord.PayStatus == "" {
		ord.PayStatus = orderly.PayUnpaid
	}
	if ord.Items == nil {
		ord.Items = []orderly.Item{{SKU: "sku-1", Quantity: 1, UnitPrice: 1000}}
	}
	if ord.Currency == "" {
		ord.Currency = "EUR"
	}
	if ord.CreatedAt.IsZero() {
		ord.CreatedAt = t0
	}
	if ord.CloseAt.IsZero() {
		ord.CloseAt = ord.CreatedAt.Add(30*time.Minute + grace)
	}
	ord.ExpiresAt = ord.CloseAt.Add(-grace)
	for _, it := range ord.Items {
		ord.Amount += it.Quantity * it.UnitPrice
	}
	return ord
}

// insertOrder inserts the order opts describe and returns it as the store must return it.
func insertOrder(t *testing.T, s store.Store, o *orderOpts) *orderly.Order {
	t.Helper()
	ord := newOrder(o)
	inTx(t, s, func(tx store.Tx) error {
		return tx.OrderInsert(t.Context(), &store.OrderInsertParams{
			Order: ord, IdempotencyKey: o.IdempotencyKey, RequestHash: o.RequestHash,
			// The standard flow's only timed state is pending_payment.
			NoDeadline: o.NoDeadline || ord.State != orderly.StatePendingPayment,
		})
	})
	return ord
}

// closedOpts returns options of an order closed for payment timeout at closedAt.
func closedOpts(id string, closedAt time.Time) *orderOpts {
	return &orderOpts{ID: id, State: orderly.StateClosed, ClosedAt: &closedAt,
		CloseReason: orderly.CloseReasonPaymentTimeout, CloseAt: closedAt.Add(-time.Minute)}
}

// paidOpts returns options of an order paid at paidAt.
func paidOpts(id string, paidAt time.Time) *orderOpts {
	return &orderOpts{ID: id, State: orderly.StatePaid, PayStatus: orderly.PayPaid, PaidAt: &paidAt}
}

// getOrder reads an order; it fails the test if there is none.
func getOrder(t *testing.T, s store.Store, id string) *orderly.Order {
	t.Helper()
	return read(t, s, func(tx store.Tx) (*orderly.Order, error) { return tx.OrderGet(t.Context(), id) })
}

// trail reads an order's audit trail.
func trail(t *testing.T, s store.Store, orderID string) []*orderly.Transition {
	t.Helper()
	return read(t, s, func(tx store.Tx) ([]*orderly.Transition, error) { return tx.TransitionList(t.Context(), orderID) })
}

// equalTrail checks order id's audit trail against want, whose ids it takes from the
// rows read (every one must be positive: the database numbered it).
func equalTrail(t *testing.T, s store.Store, id string, want []*orderly.Transition) {
	t.Helper()
	got := trail(t, s, id)
	for i, tr := range got {
		if tr.ID <= 0 {
			t.Errorf("order %s: audit row id %d, want > 0", id, tr.ID)
		}
		if i < len(want) {
			want[i].ID = tr.ID
		}
	}
	equal(t, "audit trail of "+id, got, want)
}

// setStock sets a SKU's available units.
func setStock(t *testing.T, s store.Store, sku string, available int64) {
	t.Helper()
	write(t, s, func(tx store.Tx) (*orderly.Stock, error) { return tx.StockSet(t.Context(), sku, available) })
}

// getStock reads a SKU's stock; it fails the test if there is none.
func getStock(t *testing.T, s store.Store, sku string) *orderly.Stock {
	t.Helper()
	return read(t, s, func(tx store.Tx) (*orderly.Stock, error) { return tx.StockGet(t.Context(), sku) })
}

// reserve reserves quantity units of sku for an order and fails the test unless it succeeds.
func reserve(t *testing.T, s store.Store, orderID, sku string, quantity int64) {
	t.Helper()
	ok := write(t, s, func(tx store.Tx) (bool, error) {
		return tx.StockReserve(t.Context(), &store.StockReserveParams{OrderID: orderID, SKU: sku, Quantity: quantity, Now: t0})
	})
	if !ok {
		t.Fatalf("reserve %d of %s for %s: not enough stock", quantity, sku, orderID)
	}
}

// reservations reads the reservations of an order ("" for all).
func reservations(t *testing.T, s store.Store, orderID string) []*orderly.Reservation {
	t.Helper()
	return read(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) { return tx.ReservationList(t.Context(), orderID) })
}

// couponOpts are the options of insertCoupon; zero fields get defaults.
type couponOpts struct {
	ID        string // default: a new "coupon-NNNN"
	UserID    string // default "user-1"
	AmountOff int64  // default 500
	Currency  string // default "EUR"
	State     string // default available
	OrderID   string // the order that froze or used it
	ExpiresAt *time.Time
	CreatedAt time.Time // default t0
}

// insertCoupon inserts the coupon opts describe and returns it as the store must return it.
func insertCoupon(t *testing.T, s store.Store, o *couponOpts) *orderly.Coupon {
	t.Helper()
	c := &orderly.Coupon{ID: o.ID, UserID: o.UserID, AmountOff: o.AmountOff, Currency: o.Currency, State: o.State,
		OrderID: o.OrderID, ExpiresAt: o.ExpiresAt, CreatedAt: o.CreatedAt}
	if c.ID == "" {
		c.ID = nextID("coupon")
	}
	if c.UserID == "" {
		c.UserID = "user-1"
	}
	if c.AmountOff == 0 {
		c.AmountOff = 500
	}
	if c.Currency == "" {
		c.Currency = "EUR"
	}
	if c.State == "" {
		c.State = orderly.CouponAvailable
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = t0
	}
	inTx(t, s, func(tx store.Tx) error { return tx.CouponInsert(t.Context(), c) })
	return c
}

// getCoupon reads a coupon; it fails the test if there is none.
func getCoupon(t *testing.T, s store.Store, id string) *orderly.Coupon {
	t.Helper()
	return read(t, s, func(tx store.Tx) (*orderly.Coupon, error) { return tx.CouponGet(t.Context(), id) })
}

// paymentOpts are the options of insertPayment; zero fields get defaults.
type paymentOpts struct {
	ID           string // default: a new "pay-NNNN"
	OrderID      string // required; the order must exist
	Attempt      int64  // overwritten: PaymentInsert numbers attempts
	Channel      string // default "sim"
	Variant      string
	ChannelTxnID string
	Amount       int64                // default 1000
	Currency     string               // default "EUR"
	State        orderly.PaymentState // default initiated
	FailReason   string
	CreatedAt    time.Time // default t0
	SucceededAt  *time.Time
	RefundedAt   *time.Time
}

// newPayment builds the payment opts describe.
func newPayment(o *paymentOpts) *orderly.Payment {
	p := &orderly.Payment{ID: o.ID, OrderID: o.OrderID, Attempt: o.Attempt, Channel: o.Channel, Variant: o.Variant, ChannelTxnID: o.ChannelTxnID,
		Amount: o.Amount, Currency: o.Currency, State: o.State, FailReason: o.FailReason, CreatedAt: o.CreatedAt,
		SucceededAt: o.SucceededAt, RefundedAt: o.RefundedAt}
	if p.ID == "" {
		p.ID = nextID("pay")
	}
	if p.Channel == "" {
		p.Channel = "sim"
	}
	if p.Amount == 0 {
		p.Amount = 1000
	}
	if p.Currency == "" {
		p.Currency = "EUR"
	}
	if p.State == "" {
		p.State = orderly.PaymentInitiated
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = t0
	}
	return p
}

// insertPayment inserts the payment opts describe and returns it with the attempt number
// the store assigned.
func insertPayment(t *testing.T, s store.Store, o *paymentOpts) *orderly.Payment {
	t.Helper()
	p := newPayment(o)
	inTx(t, s, func(tx store.Tx) error { return tx.PaymentInsert(t.Context(), p) })
	return p
}

// getPayment reads a payment; it fails the test if there is none.
func getPayment(t *testing.T, s store.Store, id string) *orderly.Payment {
	t.Helper()
	return read(t, s, func(tx store.Tx) (*orderly.Payment, error) { return tx.PaymentGet(t.Context(), id) })
}

// insertMessage writes one outbox message at now and returns its id; an order event
// (orderly.IsOrderEvent) gets its key's next sequence, as outbox.NewEvent gives it.
func insertMessage(t *testing.T, s store.Store, topic, key string, now time.Time) int64 {
	t.Helper()
	inTx(t, s, func(tx store.Tx) error {
		var seq int64
		if orderly.IsOrderEvent(topic) {
			seqs, err := tx.OutboxSequences(t.Context(), []string{key})
			if err != nil {
				return err
			}
			seq = seqs[0]
		}
		return tx.OutboxInsert(t.Context(), []*store.OutboxInsertParams{{Topic: topic, Key: key,
			Payload: []byte(`{"order_id":"` + key + `"}`), Sequence: seq, Now: now}})
	})
	msgs := read(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
		return tx.OutboxList(t.Context(), orderly.MessagePending, 1_000_000)
	})
	if len(msgs) == 0 {
		t.Fatalf("insert message %s/%s: not listed as pending", topic, key)
	}
	return msgs[len(msgs)-1].ID
}

// getMessage finds a message by id among every state; it fails the test if there is none.
func getMessage(t *testing.T, s store.Store, id int64) *orderly.Message {
	t.Helper()
	for _, state := range []string{orderly.MessagePending, orderly.MessageDelivered, orderly.MessageDead} {
		msgs := read(t, s, func(tx store.Tx) ([]*orderly.Message, error) { return tx.OutboxList(t.Context(), state, 1_000_000) })
		for _, m := range msgs {
			if m.ID == id {
				return m
			}
		}
	}
	t.Fatalf("message %d not found", id)
	return nil
}

// abortCount returns how many transactions the database aborted for a deadlock or a
// serialization failure in s so far (retried or not), when s counts them (sqlstore.DB
// does); 0 otherwise.
func abortCount(s store.Store) int64 {
	if c, ok := s.(interface{ Aborts() int64 }); ok {
		return c.Aborts()
	}
	return 0
}
