package order_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func params(sku string, qty int64) *orderly.CreateOrderParams {
	return &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", PaymentTimeoutSeconds: 60,
		Items: []orderly.Item{{SKU: sku, Quantity: qty, UnitPrice: 500}}}
}

func countOrders(t *testing.T, e *enginetest.Env) int {
	t.Helper()
	var n int
	e.Read(t, func(tx store.Tx) error {
		os, err := tx.OrderList(context.Background(), &store.ListParams{Limit: 1000})
		n = len(os)
		return err
	})
	return n
}

func TestCreateOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "A", 5)
	e.SetStock(t, "B", 1)
	c, err := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u1", AmountOff: 300, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	p := &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", CouponID: c.ID, PaymentTimeoutSeconds: 90,
		Items: []orderly.Item{{SKU: "A", Quantity: 2, UnitPrice: 500}, {SKU: "B", Quantity: 1, UnitPrice: 250}}}
	o, created, err := e.Orders.CreateOrder(ctx, p)
	if err != nil || !created {
		t.Fatalf("create: %v, created=%v", err, created)
	}
	want := orderly.Order{ID: o.ID, UserID: "u1", Flow: "standard", State: orderly.StatePendingPayment, PayStatus: orderly.PayUnpaid,
		Amount: 1250 - 300, Currency: "USD", CouponID: c.ID, CreatedAt: enginetest.Start, ExpiresAt: enginetest.Start.Add(90 * time.Second),
		CloseAt: enginetest.Start.Add(90 * time.Second), Version: 1}
	got := *e.OrderOf(t, o.ID)
	if len(got.Items) != 2 || got.Items[1] != p.Items[1] {
		t.Fatalf("items %+v", got.Items)
	}
	got.Items = nil
	if got.ClosedAt != nil || got.PaidAt != nil || got.ID != want.ID || got.Amount != want.Amount || got.State != want.State ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) || !got.CloseAt.Equal(want.CloseAt) ||
		got.CouponID != want.CouponID || got.Version != 1 || got.PayStatus != want.PayStatus || got.Flow != want.Flow {
		t.Fatalf("order %+v\nwant  %+v", got, want)
	}
	if s := e.StockOf(t, "A"); s.Available != 3 || s.Held != 2 {
		t.Fatalf("stock A %+v", s)
	}
	if cp, _ := e.Orders.Coupon(ctx, c.ID); cp.State != orderly.CouponFrozen || cp.OrderID != o.ID {
		t.Fatalf("coupon %s/%s", cp.State, cp.OrderID)
	}
}

// TestCreateOrderWritesNothingOnError: out of stock on the second item or an unusable
// coupon returns 409-class errors and leaves stock, coupons and orders as they were.
func TestCreateOrderWritesNothingOnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "A", 5)
	e.SetStock(t, "B", 1)
	mine, _ := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u1", AmountOff: 100, Currency: "USD"})
	theirs, _ := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u2", AmountOff: 100, Currency: "USD"})
	big, _ := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u1", AmountOff: 100_000, Currency: "USD"})
	euro, _ := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u1", AmountOff: 100, Currency: "EUR"})
	twoItems := func(b int64, coupon string) *orderly.CreateOrderParams {
		return &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", CouponID: coupon,
			Items: []orderly.Item{{SKU: "A", Quantity: 2, UnitPrice: 500}, {SKU: "B", Quantity: b, UnitPrice: 500}}}
	}
	for _, tc := range []struct {
		name string
		p    *orderly.CreateOrderParams
		code string
	}{
		{"second item out of stock", twoItems(2, mine.ID), orderly.EOUTOFSTOCK},
		{"unknown sku", params("nope", 1), orderly.EOUTOFSTOCK},
		{"someone else's coupon", twoItems(1, theirs.ID), orderly.ECOUPONUNAVAIL},
		{"coupon above total", twoItems(1, big.ID), orderly.ECOUPONUNAVAIL},
		{"coupon in another currency", twoItems(1, euro.ID), orderly.ECOUPONUNAVAIL},
		{"unknown coupon", twoItems(1, "missing"), orderly.ECOUPONUNAVAIL},
		{"no items", &orderly.CreateOrderParams{UserID: "u1", Currency: "USD"}, orderly.EINVALID},
		{"bad currency", &orderly.CreateOrderParams{UserID: "u1", Currency: "usd", Items: params("A", 1).Items}, orderly.EINVALID},
		// Issue 6 §6: XXX ("no currency") and ZZZ (no such code) were accepted.
		{"XXX is no currency", &orderly.CreateOrderParams{UserID: "u1", Currency: "XXX", Items: params("A", 1).Items}, orderly.EINVALID},
		{"ZZZ is no ISO 4217 code", &orderly.CreateOrderParams{UserID: "u1", Currency: "ZZZ", Items: params("A", 1).Items}, orderly.EINVALID},
		{"gold is no currency of money", &orderly.CreateOrderParams{UserID: "u1", Currency: "XAU", Items: params("A", 1).Items}, orderly.EINVALID},
		{"zero quantity", params("A", 0), orderly.EINVALID},
		{"duplicate sku", &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", Items: []orderly.Item{{SKU: "A", Quantity: 1}, {SKU: "A", Quantity: 1}}}, orderly.EINVALID},
		{"overflow", &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", Items: []orderly.Item{{SKU: "A", Quantity: 1_000_000, UnitPrice: 1 << 50}}}, orderly.EINVALID},
		{"control character in sku", params("A\x00", 1), orderly.EINVALID},
		{"invalid UTF-8 in sku", params("\xff\xfe", 1), orderly.EINVALID},
		{"newline in user_id", &orderly.CreateOrderParams{UserID: "u1\n", Currency: "USD", Items: params("A", 1).Items}, orderly.EINVALID},
		{"unknown flow", &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", Flow: "ride_hailing", Items: params("A", 1).Items}, orderly.EINVALID},
		// A group_buy order without its group could never be paid (its pay transition
		// counts the payment in the group): member orders are made through package groupbuy.
		{"managed flow", &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", Flow: "group_buy", Items: params("A", 1).Items}, orderly.EINVALID},
		{"timeout too long", &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", PaymentTimeoutSeconds: 8 * 24 * 3600, Items: params("A", 1).Items}, orderly.EINVALID},
	} {
		if _, _, err := e.Orders.CreateOrder(ctx, tc.p); orderly.ErrorCode(err) != tc.code {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.code)
		}
	}
	// The refusals say what to do instead.
	for _, tc := range []struct {
		p    *orderly.CreateOrderParams
		want string
	}{
		{&orderly.CreateOrderParams{UserID: "u1", Currency: "USD", PaymentMethod: "card", Items: params("A", 1).Items},
			`payment_method: the only one is "wallet"`},
		{&orderly.CreateOrderParams{UserID: "u1", Currency: "USD", Flow: "group_buy", Items: params("A", 1).Items},
			"orders of flow group_buy are created by their own routes (POST /v1/groups, POST /v1/groups/{id}/join)"},
	} {
		if _, _, err := e.Orders.CreateOrder(ctx, tc.p); orderly.ErrorCode(err) != orderly.EINVALID || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CreateOrder(%+v): %v, want %s saying %q", tc.p, err, orderly.EINVALID, tc.want)
		}
	}
	if s := e.StockOf(t, "A"); s != (orderly.Stock{SKU: "A", Available: 5}) {
		t.Fatalf("stock A %+v changed by failed creates", s)
	}
	if s := e.StockOf(t, "B"); s != (orderly.Stock{SKU: "B", Available: 1}) {
		t.Fatalf("stock B %+v changed by failed creates", s)
	}
	if c, _ := e.Orders.Coupon(ctx, mine.ID); c.State != orderly.CouponAvailable || c.OrderID != "" {
		t.Fatalf("coupon %s/%s changed by failed creates", c.State, c.OrderID)
	}
	if n := countOrders(t, e); n != 0 {
		t.Fatalf("%d orders written by failed creates", n)
	}
}

// TestSetStockLimits: stock is bounded so that releases can never overflow int64, and
// SKUs must read back as written.
func TestSetStockLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	for _, tc := range []struct {
		sku       string
		available int64
		code      string
	}{
		{"A", order.MaxStock, ""},
		{"A", order.MaxStock + 1, orderly.EINVALID},
		{"A", 1<<63 - 1, orderly.EINVALID},
		{"A", -1, orderly.EINVALID},
		{"\x00", 1, orderly.EINVALID},
		{"\xff\xfe", 1, orderly.EINVALID},
		{"tシャツ-M", 1, ""},
	} {
		_, err := e.Orders.SetStock(ctx, tc.sku, tc.available)
		if got := orderly.ErrorCode(err); got != tc.code {
			t.Errorf("SetStock(%q, %d) = %v, want code %q", tc.sku, tc.available, err, tc.code)
		}
	}
	if s := e.StockOf(t, "A"); s.Available != order.MaxStock {
		t.Fatalf("stock %+v after refused sets, want the last accepted value", s)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "A", 10)
	p := params("A", 2)
	p.IdempotencyKey = "key-1"
	first, created, err := e.Orders.CreateOrder(ctx, p)
	if err != nil || !created {
		t.Fatal(err)
	}
	again := params("A", 2)
	again.IdempotencyKey = "key-1"
	second, created, err := e.Orders.CreateOrder(ctx, again)
	if err != nil || created || second.ID != first.ID {
		t.Fatalf("replay: %v created=%v id %s want %s", err, created, second.ID, first.ID)
	}
	other := params("A", 3)
	other.IdempotencyKey = "key-1"
	if _, _, err := e.Orders.CreateOrder(ctx, other); orderly.ErrorCode(err) != orderly.EIDEMPOTENCY {
		t.Fatalf("same key, other body: %v", err)
	}
	// Keys are per user.
	otherUser := params("A", 2)
	otherUser.UserID, otherUser.IdempotencyKey = "u2", "key-1"
	if o, created, err := e.Orders.CreateOrder(ctx, otherUser); err != nil || !created || o.ID == first.ID {
		t.Fatalf("other user, same key: %v created=%v", err, created)
	}
	if s := e.StockOf(t, "A"); s.Held != 4 {
		t.Fatalf("held %d, want 4 (two orders)", s.Held)
	}
}

// TestReleaseTwice: the release effects of a close (release_reservations, release_coupon)
// run eight times in parallel from a start barrier before anything was released, then twice
// more in sequence, then the buyer cancel runs them once more in its own transaction; stock
// and coupon are released exactly once and end where they started (I3).
func TestReleaseTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "A", 10)
	c, _ := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u1", AmountOff: 100, Currency: "USD"})
	p := params("A", 4)
	p.CouponID = c.ID
	o, _, err := e.Orders.CreateOrder(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	effects := order.Effects()
	apply := func() {
		err := e.Store.InTx(ctx, func(tx store.Tx) error {
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			b := &order.EffectBatch{Flow: orderly.StandardFlow, IDs: []string{o.ID}, Coupons: map[string]string{o.ID: c.ID},
				Params: &store.OrdersTransitionParams{Now: now}}
			for _, name := range []string{orderly.EffectReleaseReservations, orderly.EffectReleaseCoupon} {
				if err := effects[name](ctx, tx, b); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	// First in parallel, from a start barrier, before anything was released: the releases
	// race for the same held reservation and frozen coupon.
	if s := e.StockOf(t, "A"); s != (orderly.Stock{SKU: "A", Available: 6, Held: 4}) {
		t.Fatalf("stock %+v before the releases, want 4 held", s)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { <-start; apply() })
	}
	close(start)
	wg.Wait()
	if s := e.StockOf(t, "A"); s != (orderly.Stock{SKU: "A", Available: 10}) {
		t.Fatalf("stock %+v after parallel releases, want 10 available (released once)", s)
	}
	// Then again, in sequence: nothing more moves.
	apply()
	apply()
	if s := e.StockOf(t, "A"); s != (orderly.Stock{SKU: "A", Available: 10}) {
		t.Fatalf("stock %+v after repeated releases, want 10 available", s)
	}
	if cp, _ := e.Orders.Coupon(ctx, c.ID); cp.State != orderly.CouponAvailable || cp.OrderID != "" {
		t.Fatalf("coupon %s/%q", cp.State, cp.OrderID)
	}
	// The cancel runs the same effects in its transaction: nothing more moves; it writes
	// only the order.closed event to the outbox.
	if _, err := e.Orders.CancelOrder(ctx, o.ID, "buyer", "trace-1"); err != nil {
		t.Fatal(err)
	}
	var msgs []*orderly.Message
	e.Read(t, func(tx store.Tx) (err error) {
		msgs, err = tx.OutboxList(ctx, orderly.MessagePending, 10)
		return err
	})
	if len(msgs) != 1 || msgs[0].Topic != orderly.TopicOrderClosed {
		t.Fatalf("cancel wrote %d messages (%v), want only %s", len(msgs), msgs, orderly.TopicOrderClosed)
	}
	if s := e.StockOf(t, "A"); s != (orderly.Stock{SKU: "A", Available: 10}) {
		t.Fatalf("stock %+v after the cancel, want 10 available", s)
	}
	got := e.OrderOf(t, o.ID)
	trail := e.StateTrail(t, o.ID)
	if got.State != orderly.StateClosed || got.CloseReason != orderly.CloseReasonBuyerCancelled || len(trail) != 1 ||
		trail[0].Actor != "buyer" || trail[0].TraceID != "trace-1" || trail[0].Event != orderly.EventCancel {
		t.Fatalf("order %s/%s trail %+v", got.State, got.CloseReason, trail[0])
	}
	if _, err := e.Orders.CancelOrder(ctx, o.ID, "buyer", ""); orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("second cancel: %v, want %s", err, orderly.EILLEGAL)
	}
}

// TestDefaultPaymentTimeoutCap: the configured default time to pay has the cap of the
// per-order value (MaxPaymentTimeout), so no order waits longer than 7 days.
func TestDefaultPaymentTimeoutCap(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	if _, err := order.NewService(order.Config{Store: e.Store, DefaultPaymentTimeout: order.MaxPaymentTimeout + time.Second}); err == nil {
		t.Error("a default time to pay over 7 days was accepted")
	}
	if _, err := order.NewService(order.Config{Store: e.Store, DefaultPaymentTimeout: order.MaxPaymentTimeout}); err != nil {
		t.Errorf("a default time to pay of exactly 7 days: %v", err)
	}
}

// TestCouponExpiry checks issue 6 §6: a coupon read after its expires_at says expired (it
// said available), from the very instant of expires_at on the database clock, and cannot
// be frozen; one frozen before its expiry stays frozen with its order.
func TestCouponExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "A", 5)
	expires := enginetest.Start.Add(time.Minute)
	c, err := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u1", AmountOff: 100, Currency: "USD", ExpiresAt: &expires})
	if err != nil {
		t.Fatal(err)
	}
	held, err := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u1", AmountOff: 100, Currency: "USD", ExpiresAt: &expires})
	if err != nil {
		t.Fatal(err)
	}
	p := params("A", 1)
	p.CouponID = held.ID
	if _, _, err := e.Orders.CreateOrder(ctx, p); err != nil {
		t.Fatal(err)
	}
	state := func(id string) string {
		t.Helper()
		got, err := e.Orders.Coupon(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	e.Clock.Set(expires.Add(-time.Millisecond))
	if got := state(c.ID); got != orderly.CouponAvailable {
		t.Errorf("1 ms before expires_at: %s, want available", got)
	}
	e.Clock.Set(expires)
	if got := state(c.ID); got != orderly.CouponExpired {
		t.Errorf("at expires_at: %s, want expired", got)
	}
	if got := state(held.ID); got != orderly.CouponFrozen {
		t.Errorf("coupon frozen before expiry: %s, want frozen", got)
	}
	p = params("A", 1)
	p.CouponID = c.ID
	if _, _, err := e.Orders.CreateOrder(ctx, p); orderly.ErrorCode(err) != orderly.ECOUPONUNAVAIL {
		t.Errorf("freezing an expired coupon: %v, want %s", err, orderly.ECOUPONUNAVAIL)
	}
	if got := e.StockOf(t, "A"); got.Available != 4 || got.Held != 1 {
		t.Errorf("stock after the refused order: %+v, want 4 available, 1 held", got)
	}
}
