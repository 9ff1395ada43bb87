package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testOrders checks the orders table: insert and reads, the guarded transition with its
// audit trail, pay status changes, the due-order claim, wake-ups and listing.
func testOrders(t *testing.T, open opener) {
	t.Run("InsertGet", func(t *testing.T) { testOrderInsertGet(t, open) })
	t.Run("GetMissing", func(t *testing.T) {
		ctx, s := setup(t, open)
		err := s.Read(ctx, func(tx store.Tx) error {
			_, err := tx.OrderGet(ctx, "missing")
			return err
		})
		wantCode(t, "OrderGet(missing)", err, orderly.ENOTFOUND)
	})
	t.Run("InsertDuplicateID", func(t *testing.T) {
		ctx, s := setup(t, open)
		first := insertOrder(t, s, &orderOpts{ID: "o1"})
		err := txErr(t, s, func(tx store.Tx) error {
			return tx.OrderInsert(ctx, &store.OrderInsertParams{Order: newOrder(&orderOpts{ID: "o1", UserID: "user-2"})})
		})
		wantCode(t, "second insert of o1", err, orderly.ECONFLICT)
		equal(t, "o1 after the duplicate insert", getOrder(t, s, "o1"), first)
	})
	t.Run("IdempotencyKey", func(t *testing.T) { testOrderIdempotencyKey(t, open) })
	t.Run("Transition", func(t *testing.T) { testOrdersTransition(t, open) })
	t.Run("TransitionRepeat", func(t *testing.T) {
		ctx, s := setup(t, open)
		now := t0.Add(time.Hour)
		before := insertOrder(t, s, &orderOpts{ID: "o1"})
		p := &store.OrdersTransitionParams{IDs: []string{"o1"}, From: orderly.StatePendingPayment,
			To: orderly.StateClosed, Event: orderly.EventTimeout, PayStatusIn: []orderly.PayStatus{orderly.PayUnpaid},
			CloseAtBy: &now, Now: now, CloseReason: orderly.CloseReasonPaymentTimeout, Actor: "sweep"}
		first := write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersTransition(ctx, p) })
		p.Now = now.Add(time.Second)
		second := write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersTransition(ctx, p) })
		equal(t, "first transition", first, []string{"o1"})
		equal(t, "repeated transition", len(second), 0)
		want := *before
		want.State, want.Version, want.ClosedAt, want.CloseReason = orderly.StateClosed, 2, &now, orderly.CloseReasonPaymentTimeout
		equal(t, "o1", getOrder(t, s, "o1"), &want)
		equal(t, "audit rows", len(trail(t, s, "o1")), 1)
	})
	t.Run("TransitionLifecycle", func(t *testing.T) { testOrderLifecycle(t, open) })
	t.Run("CloseWithoutReasonRejected", func(t *testing.T) {
		ctx, s := setup(t, open)
		before := insertOrder(t, s, &orderOpts{ID: "o1"})
		err := txErr(t, s, func(tx store.Tx) error {
			ids, err := tx.OrdersTransition(ctx, &store.OrdersTransitionParams{IDs: []string{"o1"},
				From: orderly.StatePendingPayment, To: orderly.StateClosed, Event: orderly.EventCancel, Now: t0, Actor: "buyer"})
			if err == nil {
				t.Errorf("closing without a close reason changed %v, want a CHECK violation", ids)
			}
			return err
		})
		if err == nil {
			t.Errorf("closing without a close reason committed")
		}
		equal(t, "o1", getOrder(t, s, "o1"), before)
		equal(t, "audit rows", len(trail(t, s, "o1")), 0)
	})
	t.Run("SetPayStatus", func(t *testing.T) { testOrderSetPayStatus(t, open) })
	t.Run("TransitionInsert", func(t *testing.T) {
		ctx, s := setup(t, open)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		created := &orderly.Transition{OrderID: "o1", To: orderly.StatePendingPayment, Event: orderly.EventCreate,
			PayStatusTo: orderly.PayUnpaid, Actor: "buyer", At: t0, TraceID: "trace-0"}
		inTx(t, s, func(tx store.Tx) error { return tx.TransitionInsert(ctx, created) })
		p := &store.OrdersTransitionParams{IDs: []string{"o1"}, From: orderly.StatePendingPayment, To: orderly.StateClosed,
			Event: orderly.EventCancel, SetPayStatus: orderly.PayFailed, Now: t0.Add(time.Second),
			CloseReason: orderly.CloseReasonBuyerCancelled, Actor: "buyer"}
		write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersTransition(ctx, p) })
		got := trail(t, s, "o1")
		want := []*orderly.Transition{created, {OrderID: "o1", From: orderly.StatePendingPayment, To: orderly.StateClosed,
			Event: orderly.EventCancel, PayStatusFrom: orderly.PayUnpaid, PayStatusTo: orderly.PayFailed, Actor: "buyer", At: p.Now}}
		for i := range min(len(got), len(want)) {
			want[i].ID = got[i].ID
		}
		equal(t, "audit trail: the creation row first", got, want)
		if len(got) == 2 && got[1].ID <= got[0].ID {
			t.Errorf("audit row ids %d, %d: want increasing", got[0].ID, got[1].ID)
		}
		// Pay statuses are CHECKed like states.
		err := txErr(t, s, func(tx store.Tx) error {
			return tx.TransitionInsert(ctx, &orderly.Transition{OrderID: "o1", From: orderly.StateClosed, To: orderly.StateClosed,
				Event: orderly.EventPaymentRefunded, PayStatusFrom: orderly.PayFailed, PayStatusTo: "given_back", Actor: "gateway", At: t0})
		})
		if err == nil {
			t.Error("an audit row with pay_status_to given_back was written, want a CHECK violation")
		}
		equal(t, "audit rows after the refused insert", len(trail(t, s, "o1")), 2)
	})
	t.Run("Due", func(t *testing.T) { testOrdersDue(t, open) })
	t.Run("NextWakeAt", func(t *testing.T) { testOrderNextWakeAt(t, open) })
	t.Run("OverdueCount", func(t *testing.T) { testOrdersOverdueCount(t, open) })
	t.Run("List", func(t *testing.T) { testOrderList(t, open) })
	t.Run("Lock", func(t *testing.T) { testOrdersLock(t, open) })
	t.Run("PaymentsInFlight", func(t *testing.T) { testOrdersPaymentsInFlight(t, open) })
	t.Run("ListsInAnyOrderDoNotDeadlock", func(t *testing.T) { testListOrder(t, open) })
}

// utcMS is what the store must return for a time: UTC, truncated to the millisecond.
func utcMS(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }

func testOrderInsertGet(t *testing.T, open opener) {
	t.Parallel()
	zone := time.FixedZone("UTC+2", 2*60*60)
	// Times in another zone with sub-millisecond parts: stored and returned as UTC ms.
	created := time.Date(2030, 1, 2, 5, 4, 5, 678_901_234, zone)
	expires := created.Add(30 * time.Minute).Add(999_999 * time.Nanosecond)
	closeAt := expires.Add(grace)
	paidAt := created.Add(time.Minute + 123_456*time.Nanosecond)
	closedAt := closeAt.Add(7*time.Millisecond + 999*time.Microsecond)
	full := func() *orderly.Order {
		return &orderly.Order{ID: "o-full", UserID: "user-42", Flow: orderly.FlowStandard,
			State: orderly.StatePendingPayment, PayStatus: orderly.PayPaying,
			Items: []orderly.Item{
				{SKU: "sku-a", Quantity: 2, UnitPrice: 1250},
				{SKU: "sku-\"quoted\" ü", Quantity: 1, UnitPrice: 0},
				{SKU: "sku-c", Quantity: 1_000_000, UnitPrice: 9_000_000_000},
			},
			Amount: 2*1250 + 1_000_000*9_000_000_000 - 500, Currency: "JPY", CouponID: "coupon-7", CurrentPaymentID: "pay-9",
			CreatedAt: created, ExpiresAt: expires, CloseAt: closeAt, Version: 1}
	}
	cases := []struct {
		name  string
		order func() *orderly.Order
	}{
		{"EveryField", full},
		{"NoOptionalFields", func() *orderly.Order {
			o := full()
			o.PayStatus, o.CouponID, o.CurrentPaymentID = orderly.PayUnpaid, "", ""
			o.Items = o.Items[:1]
			return o
		}},
		{"NoItems", func() *orderly.Order {
			o := full()
			o.Items, o.Amount = []orderly.Item{}, 0
			return o
		}},
		{"Paid", func() *orderly.Order {
			o := full()
			o.State, o.PayStatus, o.PaidAt, o.Version = orderly.StatePaid, orderly.PayPaid, &paidAt, 3
			return o
		}},
		{"Closed", func() *orderly.Order {
			o := full()
			o.State, o.PayStatus, o.ClosedAt, o.CloseReason = orderly.StateClosed, orderly.PayFailed, &closedAt, orderly.CloseReasonBuyerCancelled
			return o
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			in := c.order()
			inTx(t, s, func(tx store.Tx) error {
				return tx.OrderInsert(ctx, &store.OrderInsertParams{Order: in, IdempotencyKey: "key-1", RequestHash: "hash-1"})
			})
			want := c.order()
			want.CreatedAt, want.ExpiresAt, want.CloseAt = utcMS(want.CreatedAt), utcMS(want.ExpiresAt), utcMS(want.CloseAt)
			if want.ClosedAt != nil {
				want.ClosedAt = ptr(utcMS(*want.ClosedAt))
			}
			if want.PaidAt != nil {
				want.PaidAt = ptr(utcMS(*want.PaidAt))
			}
			got := getOrder(t, s, in.ID)
			equal(t, "OrderGet", got, want)
			for name, tm := range map[string]*time.Time{"created_at": &got.CreatedAt, "expires_at": &got.ExpiresAt,
				"close_at": &got.CloseAt, "closed_at": got.ClosedAt, "paid_at": got.PaidAt} {
				if tm != nil && tm.Location() != time.UTC {
					t.Errorf("%s location %v, want UTC", name, tm.Location())
				}
			}
			byKey, hash := read2(t, s, func(tx store.Tx) (*orderly.Order, string, error) {
				return tx.OrderGetByIdempotencyKey(ctx, in.UserID, "key-1")
			})
			equal(t, "OrderGetByIdempotencyKey", byKey, want)
			equal(t, "request hash", hash, "hash-1")
			list := read(t, s, func(tx store.Tx) ([]*orderly.Order, error) {
				return tx.OrderList(ctx, &store.ListParams{Limit: 10})
			})
			equal(t, "OrderList", list, []*orderly.Order{want})
		})
	}
}

// read2 is read for functions with two results.
func read2[A, B any](t *testing.T, s store.Store, fn func(tx store.Tx) (A, B, error)) (A, B) {
	t.Helper()
	var (
		a A
		b B
	)
	err := s.Read(t.Context(), func(tx store.Tx) error {
		var err error
		a, b, err = fn(tx)
		return err
	})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return a, b
}

func testOrderIdempotencyKey(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	o1 := insertOrder(t, s, &orderOpts{ID: "o1", UserID: "user-1", IdempotencyKey: "k1", RequestHash: "h1"})
	o2 := insertOrder(t, s, &orderOpts{ID: "o2", UserID: "user-2", IdempotencyKey: "k1", RequestHash: "h2"})
	insertOrder(t, s, &orderOpts{ID: "o3", UserID: "user-1"}) // orders without a key never conflict
	insertOrder(t, s, &orderOpts{ID: "o4", UserID: "user-1"})
	o5 := insertOrder(t, s, &orderOpts{ID: "o5", UserID: "user-1", IdempotencyKey: "k-nohash"})

	for _, c := range []struct {
		user, key string
		want      *orderly.Order
		wantHash  string
	}{
		{"user-1", "k1", o1, "h1"},
		{"user-2", "k1", o2, "h2"},
		{"user-1", "k-nohash", o5, ""},
	} {
		got, hash := read2(t, s, func(tx store.Tx) (*orderly.Order, string, error) {
			return tx.OrderGetByIdempotencyKey(ctx, c.user, c.key)
		})
		equal(t, "order of "+c.user+"/"+c.key, got, c.want)
		equal(t, "hash of "+c.user+"/"+c.key, hash, c.wantHash)
	}
	for _, c := range []struct{ user, key string }{{"user-1", "k2"}, {"user-3", "k1"}, {"user-1", ""}} {
		err := s.Read(ctx, func(tx store.Tx) error {
			_, _, err := tx.OrderGetByIdempotencyKey(ctx, c.user, c.key)
			return err
		})
		wantCode(t, "OrderGetByIdempotencyKey("+c.user+", "+c.key+")", err, orderly.ENOTFOUND)
	}

	err := txErr(t, s, func(tx store.Tx) error {
		return tx.OrderInsert(ctx, &store.OrderInsertParams{Order: newOrder(&orderOpts{ID: "o6", UserID: "user-1"}),
			IdempotencyKey: "k1", RequestHash: "h3"})
	})
	wantCode(t, "second order of user-1 with key k1", err, orderly.ECONFLICT)
	err = s.Read(ctx, func(tx store.Tx) error { _, err := tx.OrderGet(ctx, "o6"); return err })
	wantCode(t, "o6 after the conflict", err, orderly.ENOTFOUND)
}

func testOrdersTransition(t *testing.T, open opener) {
	t.Parallel()
	now := t0.Add(time.Hour)
	due := now.Add(-time.Minute)
	timeout := func(ids ...string) store.OrdersTransitionParams {
		return store.OrdersTransitionParams{IDs: ids, From: orderly.StatePendingPayment, To: orderly.StateClosed,
			Event: orderly.EventTimeout, PayStatusIn: []orderly.PayStatus{orderly.PayUnpaid, orderly.PayFailed},
			CloseAtBy: &now, Now: now, CloseReason: orderly.CloseReasonPaymentTimeout,
			Cause: string(orderly.CloseReasonPaymentTimeout), Actor: "sweep", TraceID: "trace-timeout"}
	}
	cases := []struct {
		name   string
		orders []*orderOpts
		params store.OrdersTransitionParams
		want   []string
	}{
		{
			name:   "TimeoutClosesDueUnpaidAndFailed",
			orders: []*orderOpts{{ID: "a", CloseAt: due}, {ID: "b", CloseAt: due, PayStatus: orderly.PayFailed}},
			params: timeout("a", "b"),
			want:   []string{"a", "b"},
		},
		{
			name:   "CloseAtEqualToCloseAtByIsDue",
			orders: []*orderOpts{{ID: "a", CloseAt: now}},
			params: timeout("a"),
			want:   []string{"a"},
		},
		{
			name:   "CloseAtAfterCloseAtByIsNotDue",
			orders: []*orderOpts{{ID: "a", CloseAt: now.Add(time.Millisecond)}},
			params: timeout("a"),
		},
		{
			name:   "PayStatusNotInPayStatusIn",
			orders: []*orderOpts{{ID: "a", CloseAt: due, PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-1"}},
			params: timeout("a"),
		},
		{
			name:   "FromMismatch",
			orders: []*orderOpts{paidOpts("a", due)},
			params: timeout("a"),
		},
		{
			name:   "ClosedIsNotClosedAgain",
			orders: []*orderOpts{closedOpts("a", due)},
			params: timeout("a"),
		},
		{
			name: "MixedBatchChangesOnlyMatching",
			orders: []*orderOpts{
				{ID: "a", CloseAt: due},
				{ID: "b", CloseAt: due, PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-1"},
				{ID: "c", CloseAt: now.Add(time.Second)},
				paidOpts("d", due),
				{ID: "e", CloseAt: due, PayStatus: orderly.PayFailed},
			},
			params: timeout("e", "d", "c", "b", "a", "missing"),
			want:   []string{"a", "e"},
		},
		{
			name:   "PaySetsPayStatusAndPaidAt",
			orders: []*orderOpts{{ID: "a", PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-1"}},
			params: store.OrdersTransitionParams{IDs: []string{"a"}, From: orderly.StatePendingPayment,
				To: orderly.StatePaid, Event: orderly.EventPay, PayStatusIn: []orderly.PayStatus{orderly.PayPaying},
				Now: now, SetPayStatus: orderly.PayPaid, SetPaidAt: true, Cause: "pay-1", Actor: "payment", TraceID: "trace-pay"},
			want: []string{"a"},
		},
		{
			name: "ZeroGuardsAreNotApplied",
			orders: []*orderOpts{
				{ID: "a"},
				{ID: "b", PayStatus: orderly.PayPaying, CloseAt: now.Add(time.Hour)},
			},
			params: store.OrdersTransitionParams{IDs: []string{"a", "b"}, From: orderly.StatePendingPayment,
				To: orderly.StateClosed, Event: orderly.EventCancel, Now: now,
				CloseReason: orderly.CloseReasonBuyerCancelled, Actor: "buyer"},
			want: []string{"a", "b"},
		},
		{
			name:   "ShipKeepsPaidAt",
			orders: []*orderOpts{paidOpts("a", due)},
			params: store.OrdersTransitionParams{IDs: []string{"a"}, From: orderly.StatePaid, To: orderly.StateShipped,
				Event: orderly.EventShip, Now: now, Actor: "admin"},
			want: []string{"a"},
		},
		{
			name:   "NoIDs",
			orders: []*orderOpts{{ID: "a", CloseAt: due}},
			params: timeout(),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			before := map[string]*orderly.Order{}
			for _, o := range c.orders {
				before[o.ID] = insertOrder(t, s, o)
			}
			p := c.params
			got := write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersTransition(ctx, &p) })
			slices.Sort(got)
			equal(t, "changed ids", got, c.want)

			for id, b := range before {
				want := *b
				var wantTrail []*orderly.Transition
				if slices.Contains(c.want, id) {
					want.State, want.Version = p.To, b.Version+1
					if p.SetPayStatus != "" {
						want.PayStatus = p.SetPayStatus
					}
					if p.CloseReason != "" {
						want.CloseReason, want.ClosedAt = p.CloseReason, &p.Now
					}
					if p.SetPaidAt {
						want.PaidAt = &p.Now
					}
					wantTrail = []*orderly.Transition{{OrderID: id, From: p.From, To: p.To, Event: p.Event,
						PayStatusFrom: b.PayStatus, PayStatusTo: want.PayStatus,
						Cause: p.Cause, Actor: p.Actor, At: p.Now, TraceID: p.TraceID}}
				}
				equal(t, "order "+id, getOrder(t, s, id), &want)
				equalTrail(t, s, id, wantTrail)
			}
		})
	}
}

func testOrderLifecycle(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	before := insertOrder(t, s, &orderOpts{ID: "o1", PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-1"})
	insertOrder(t, s, &orderOpts{ID: "other"})
	steps := []store.OrdersTransitionParams{
		{From: orderly.StatePendingPayment, To: orderly.StatePaid, Event: orderly.EventPay, Now: t0.Add(time.Minute),
			SetPayStatus: orderly.PayPaid, SetPaidAt: true, Cause: "pay-1", Actor: "payment", TraceID: "trace-1"},
		{From: orderly.StatePaid, To: orderly.StateShipped, Event: orderly.EventShip, Now: t0.Add(time.Hour),
			Actor: "admin", TraceID: "trace-2"},
		{From: orderly.StateShipped, To: orderly.StateCompleted, Event: orderly.EventComplete, Now: t0.Add(48 * time.Hour),
			Actor: "buyer"},
	}
	var wantTrail []*orderly.Transition
	pay := before.PayStatus
	for i, p := range steps {
		p.IDs = []string{"o1"}
		got := write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersTransition(ctx, &p) })
		equal(t, "changed by step "+string(p.Event), got, []string{"o1"})
		o := getOrder(t, s, "o1")
		if o.Version != int64(i+2) {
			t.Errorf("version after %s = %d, want %d", p.Event, o.Version, i+2)
		}
		wantTrail = append(wantTrail, &orderly.Transition{OrderID: "o1", From: p.From, To: p.To, Event: p.Event,
			PayStatusFrom: pay, PayStatusTo: o.PayStatus, Cause: p.Cause, Actor: p.Actor, At: p.Now, TraceID: p.TraceID})
		pay = o.PayStatus
	}
	want := *before
	want.State, want.PayStatus, want.PaidAt, want.Version = orderly.StateCompleted, orderly.PayPaid, ptr(t0.Add(time.Minute)), 4
	equal(t, "o1 completed", getOrder(t, s, "o1"), &want)

	got := trail(t, s, "o1")
	for i, tr := range got {
		if i > 0 && tr.ID <= got[i-1].ID {
			t.Errorf("audit row ids not increasing: %d after %d", tr.ID, got[i-1].ID)
		}
		if i < len(wantTrail) {
			wantTrail[i].ID = tr.ID
		}
	}
	equal(t, "audit trail, oldest first", got, wantTrail)
	equal(t, "audit trail of an unchanged order", len(trail(t, s, "other")), 0)
	equal(t, "audit trail of a missing order", len(trail(t, s, "missing")), 0)
}

func testOrderSetPayStatus(t *testing.T, open opener) {
	t.Parallel()
	pending, anyUnpaid := orderly.StatePendingPayment, []orderly.PayStatus{orderly.PayUnpaid, orderly.PayFailed}
	cases := []struct {
		name   string
		order  *orderOpts // nil: no order
		params store.OrderSetPayStatusParams
		want   bool
	}{
		{
			name:   "StartAttempt",
			order:  &orderOpts{},
			params: store.OrderSetPayStatusParams{State: pending, From: anyUnpaid, To: orderly.PayPaying, SetPaymentID: "pay-1"},
			want:   true,
		},
		{
			name:   "RetryAfterFailureReplacesPaymentID",
			order:  &orderOpts{PayStatus: orderly.PayFailed, CurrentPaymentID: "pay-1"},
			params: store.OrderSetPayStatusParams{State: pending, From: anyUnpaid, To: orderly.PayPaying, SetPaymentID: "pay-2"},
			want:   true,
		},
		{
			name:   "StateMismatch",
			order:  closedOpts("", t0.Add(time.Hour)),
			params: store.OrderSetPayStatusParams{State: pending, From: anyUnpaid, To: orderly.PayPaying, SetPaymentID: "pay-1"},
		},
		{
			name:   "FromMismatch",
			order:  &orderOpts{PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-1"},
			params: store.OrderSetPayStatusParams{State: pending, From: anyUnpaid, To: orderly.PayPaying, SetPaymentID: "pay-2"},
		},
		{
			name:  "IfPaymentIDMatches",
			order: &orderOpts{PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-2"},
			params: store.OrderSetPayStatusParams{State: pending, From: []orderly.PayStatus{orderly.PayPaying},
				To: orderly.PayFailed, IfPaymentID: "pay-2"},
			want: true,
		},
		{
			name:  "StaleAttempt",
			order: &orderOpts{PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-2"},
			params: store.OrderSetPayStatusParams{State: pending, From: []orderly.PayStatus{orderly.PayPaying},
				To: orderly.PayFailed, IfPaymentID: "pay-1"},
		},
		{
			name:  "IfPaymentIDWithoutCurrentPayment",
			order: &orderOpts{},
			params: store.OrderSetPayStatusParams{State: pending, From: anyUnpaid,
				To: orderly.PayFailed, IfPaymentID: "pay-1"},
		},
		{
			// IfCurrentPayment: a first attempt replaces no attempt.
			name:  "IfCurrentPaymentNone",
			order: &orderOpts{},
			params: store.OrderSetPayStatusParams{State: pending, From: anyUnpaid, To: orderly.PayPaying,
				SetPaymentID: "pay-1", IfCurrentPayment: true},
			want: true,
		},
		{
			// A first attempt that lost the race: another is current already.
			name:  "IfCurrentPaymentNoneButStarted",
			order: &orderOpts{PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-1"},
			params: store.OrderSetPayStatusParams{State: pending, From: []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying},
				To: orderly.PayPaying, SetPaymentID: "pay-2", IfCurrentPayment: true},
		},
		{
			name:  "IfCurrentPaymentReplacesTheOneRead",
			order: &orderOpts{PayStatus: orderly.PayFailed, CurrentPaymentID: "pay-1"},
			params: store.OrderSetPayStatusParams{State: pending, From: anyUnpaid, To: orderly.PayPaying,
				SetPaymentID: "pay-2", IfPaymentID: "pay-1", IfCurrentPayment: true},
			want: true,
		},
		{
			name:   "MissingOrder",
			params: store.OrderSetPayStatusParams{State: pending, From: anyUnpaid, To: orderly.PayPaying},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			p := c.params
			p.ID = "missing"
			var before *orderly.Order
			if c.order != nil {
				before = insertOrder(t, s, c.order)
				p.ID = before.ID
			}
			p.Event, p.Cause, p.Actor, p.TraceID, p.Now = orderly.EventPaymentStarted, "payment pay-1", "buyer", "trace-1", t0.Add(time.Minute)
			got := write(t, s, func(tx store.Tx) (bool, error) { return tx.OrderSetPayStatus(ctx, &p) })
			if got != c.want {
				t.Errorf("OrderSetPayStatus = %v, want %v", got, c.want)
			}
			if before == nil {
				return
			}
			want := *before
			var wantTrail []*orderly.Transition
			if c.want {
				want.PayStatus, want.Version = p.To, before.Version+1
				if p.SetPaymentID != "" {
					want.CurrentPaymentID = p.SetPaymentID
				}
				wantTrail = []*orderly.Transition{{OrderID: p.ID, From: before.State, To: before.State, Event: p.Event,
					PayStatusFrom: before.PayStatus, PayStatusTo: p.To, Cause: p.Cause, Actor: p.Actor, At: p.Now, TraceID: p.TraceID}}
			}
			equal(t, "order after OrderSetPayStatus", getOrder(t, s, p.ID), &want)
			gotTrail := trail(t, s, p.ID)
			for i := range min(len(gotTrail), len(wantTrail)) {
				wantTrail[i].ID = gotTrail[i].ID
			}
			equal(t, "audit trail after OrderSetPayStatus", gotTrail, wantTrail)
		})
	}
}

// testOrdersLock: OrdersLock returns the ids found in id order, whatever the orders'
// state; on dialects with row locks a locked order is skipped by another transaction's
// claim (OrdersDue, SKIP LOCKED), on SQLite the one writer makes the claim wait instead.
func testOrdersLock(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	now := t0.Add(time.Hour)
	insertOrder(t, s, &orderOpts{ID: "lock-b", CloseAt: now.Add(-time.Minute)})
	insertOrder(t, s, &orderOpts{ID: "lock-a", CloseAt: now.Add(-2 * time.Minute)})
	insertOrder(t, s, closedOpts("lock-c", now.Add(-time.Minute)))
	lock := func(tx store.Tx) ([]string, error) {
		return tx.OrdersLock(ctx, []string{"lock-c", "lock-b", "no-such-order", "lock-a"})
	}
	if s.Dialect() == "sqlite" {
		equal(t, "locked", write(t, s, lock), []string{"lock-a", "lock-b", "lock-c"})
		equal(t, "locked of none", write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersLock(ctx, nil) }), []string(nil))
		return
	}
	holding, release := make(chan []string), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.InTx(ctx, func(tx store.Tx) error {
			ids, err := lock(tx)
			if err != nil {
				return err
			}
			holding <- ids
			<-release
			return nil
		})
	}()
	locked := <-holding
	var due []*store.DueOrder
	err := s.InTx(ctx, func(tx store.Tx) (err error) {
		due, err = tx.OrdersDue(ctx, &store.OrdersDueParams{Now: now, Limit: 10})
		return err
	})
	close(release)
	if err != nil || <-done != nil {
		t.Fatalf("claim: %v", err)
	}
	equal(t, "locked", locked, []string{"lock-a", "lock-b", "lock-c"})
	if len(due) != 0 {
		t.Fatalf("claimed %+v while lock-a and lock-b were locked", due)
	}
}

func testOrdersDue(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	now := t0.Add(time.Hour)
	insertOrder(t, s, &orderOpts{ID: "late", CloseAt: now.Add(-2 * time.Minute), CouponID: "coupon-1"})
	insertOrder(t, s, &orderOpts{ID: "paying", CloseAt: now.Add(-time.Minute), PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-1"})
	insertOrder(t, s, &orderOpts{ID: "boundary", CloseAt: now})
	insertOrder(t, s, &orderOpts{ID: "future", CloseAt: now.Add(time.Millisecond)})
	paid := paidOpts("paid", now)
	paid.CloseAt = now.Add(-3 * time.Minute)
	insertOrder(t, s, paid)
	insertOrder(t, s, closedOpts("closed", now.Add(-time.Minute))) // close_at now−2m
	due := func(now time.Time, limit int) []*store.DueOrder {
		t.Helper()
		return write(t, s, func(tx store.Tx) ([]*store.DueOrder, error) {
			return tx.OrdersDue(ctx, &store.OrdersDueParams{Now: now, Limit: limit})
		})
	}
	late := &store.DueOrder{ID: "late", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment, PayStatus: orderly.PayUnpaid, CouponID: "coupon-1",
		CloseAt: now.Add(-2 * time.Minute), WakeAt: now.Add(-2 * time.Minute)}
	paying := &store.DueOrder{ID: "paying", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment, PayStatus: orderly.PayPaying,
		CurrentPaymentID: "pay-1", CloseAt: now.Add(-time.Minute), WakeAt: now.Add(-time.Minute)}
	boundary := &store.DueOrder{ID: "boundary", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment, PayStatus: orderly.PayUnpaid, CloseAt: now, WakeAt: now}
	future := &store.DueOrder{ID: "future", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment, PayStatus: orderly.PayUnpaid,
		CloseAt: now.Add(time.Millisecond), WakeAt: now.Add(time.Millisecond)}

	equal(t, "due at now, oldest wake_at first", due(now, 10), []*store.DueOrder{late, paying, boundary})
	equal(t, "due at now, limit 2", due(now, 2), []*store.DueOrder{late, paying})
	equal(t, "due long before", len(due(now.Add(-time.Hour), 10)), 0)

	// Backing off "late" (and trying to move a closed order) changes wake_at, not close_at.
	inTx(t, s, func(tx store.Tx) error {
		return tx.OrdersSetWakeAt(ctx, []string{"late", "closed", "missing"}, now.Add(10*time.Minute))
	})
	late.WakeAt = now.Add(10 * time.Minute)
	equal(t, "due at now after backing off late", due(now, 10), []*store.DueOrder{paying, boundary})
	equal(t, "due after late's new wake_at", due(now.Add(10*time.Minute), 10),
		[]*store.DueOrder{paying, boundary, future, late})

	// Moving a wake_at earlier makes the order due before its close_at.
	inTx(t, s, func(tx store.Tx) error { return tx.OrdersSetWakeAt(ctx, []string{"future"}, now.Add(-time.Hour)) })
	future.WakeAt = now.Add(-time.Hour)
	equal(t, "due at now after waking future early", due(now, 10), []*store.DueOrder{future, paying, boundary})

	// Claims restricted to ids (from a delay queue) and the open orders by id and by page.
	byIDs := write(t, s, func(tx store.Tx) ([]*store.DueOrder, error) {
		return tx.OrdersDue(ctx, &store.OrdersDueParams{Now: now, Limit: 10, IDs: []string{"boundary", "late", "paid", "missing"}})
	})
	equal(t, "due among ids (late backed off, paid not open)", byIDs, []*store.DueOrder{boundary})
	openOrders := read(t, s, func(tx store.Tx) ([]*store.DueOrder, error) {
		return tx.OrdersOpen(ctx, &store.OrdersOpenParams{IDs: []string{"late", "paid", "closed", "missing"}})
	})
	equal(t, "open among ids", openOrders, []*store.DueOrder{late})
	page1 := read(t, s, func(tx store.Tx) ([]*store.DueOrder, error) {
		return tx.OrdersOpen(ctx, &store.OrdersOpenParams{Limit: 2})
	})
	page2 := read(t, s, func(tx store.Tx) ([]*store.DueOrder, error) {
		return tx.OrdersOpen(ctx, &store.OrdersOpenParams{AfterID: page1[len(page1)-1].ID, Limit: 10})
	})
	equal(t, "open orders, keyset pages", append(page1, page2...), []*store.DueOrder{boundary, future, late, paying})
	inTx(t, s, func(tx store.Tx) error { return tx.OrdersSetWakeAt(ctx, nil, now) })
	future.WakeAt = now.Add(-time.Hour)

	// A closed order is never due, whatever its wake_at.
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.OrdersTransition(ctx, &store.OrdersTransitionParams{IDs: []string{"paying"},
			From: orderly.StatePendingPayment, To: orderly.StateClosed, Event: orderly.EventTimeout, Now: now,
			CloseReason: orderly.CloseReasonPaymentTimeout, Actor: "sweep"})
		return err
	})
	equal(t, "due after closing paying", due(now, 10), []*store.DueOrder{future, boundary})
}

func testOrderNextWakeAt(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	next := func() (time.Time, bool) {
		t.Helper()
		var (
			at time.Time
			ok bool
		)
		err := s.Read(ctx, func(tx store.Tx) error {
			var err error
			at, ok, err = tx.OrderNextWakeAt(ctx)
			return err
		})
		if err != nil {
			t.Fatalf("OrderNextWakeAt: %v", err)
		}
		return at, ok
	}
	check := func(what string, wantAt time.Time, wantOK bool) {
		t.Helper()
		at, ok := next()
		if ok != wantOK || (ok && !at.Equal(wantAt)) || (ok && at.Location() != time.UTC) {
			t.Errorf("%s: OrderNextWakeAt = %v, %v; want %v, %v", what, at, ok, wantAt, wantOK)
		}
	}
	check("empty store", time.Time{}, false)
	insertOrder(t, s, paidOpts("paid", t0))
	insertOrder(t, s, closedOpts("closed", t0))
	check("no open orders", time.Time{}, false)

	a := insertOrder(t, s, &orderOpts{ID: "a", CloseAt: t0.Add(2 * time.Minute)})
	b := insertOrder(t, s, &orderOpts{ID: "b", CloseAt: t0.Add(time.Minute)})
	check("two open orders", b.CloseAt, true)
	inTx(t, s, func(tx store.Tx) error { return tx.OrdersSetWakeAt(ctx, []string{"b"}, t0.Add(time.Hour)) })
	check("after backing off b", a.CloseAt, true)
	inTx(t, s, func(tx store.Tx) error { return tx.OrdersSetWakeAt(ctx, []string{"b"}, t0.Add(-time.Hour)) })
	check("after waking b early", t0.Add(-time.Hour), true)
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.OrdersTransition(ctx, &store.OrdersTransitionParams{IDs: []string{"a", "b"},
			From: orderly.StatePendingPayment, To: orderly.StateClosed, Event: orderly.EventCancel, Now: t0,
			CloseReason: orderly.CloseReasonBuyerCancelled, Actor: "buyer"})
		return err
	})
	check("after closing every open order", time.Time{}, false)

	// wake_at follows the flow's timed states (orderly.Flow.Timed): an order created in a
	// state without a deadline waits on nothing, and a transition into a timed state sets
	// its deadline (close_at) again, out of one clears it.
	insertOrder(t, s, &orderOpts{ID: "c", CloseAt: t0.Add(3 * time.Minute), NoDeadline: true})
	check("an order created in a state without deadline", time.Time{}, false)
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.OrdersTransition(ctx, &store.OrdersTransitionParams{IDs: []string{"c"},
			From: orderly.StatePendingPayment, To: "waiting", Event: "wait", Now: t0, Timed: true, Actor: "test"})
		return err
	})
	check("after a transition into a timed state", t0.Add(3*time.Minute), true)
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.OrdersTransition(ctx, &store.OrdersTransitionParams{IDs: []string{"c"},
			From: "waiting", To: "done", Event: "finish", Now: t0, Actor: "test"})
		return err
	})
	check("after a transition out of it", time.Time{}, false)
}

func testOrdersOverdueCount(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	now := t0.Add(time.Hour)
	insertOrder(t, s, &orderOpts{ID: "a", CloseAt: now.Add(-2 * time.Second)})
	insertOrder(t, s, &orderOpts{ID: "b", CloseAt: now.Add(-time.Second), PayStatus: orderly.PayPaying})
	insertOrder(t, s, &orderOpts{ID: "c", CloseAt: now})
	p := paidOpts("paid", now)
	p.CloseAt = now.Add(-time.Hour)
	insertOrder(t, s, p)
	insertOrder(t, s, closedOpts("closed", now.Add(-time.Minute)))
	// An order whose inspection is scheduled later (wake_at pushed back) is not overdue.
	inTx(t, s, func(tx store.Tx) error { return tx.OrdersSetWakeAt(ctx, []string{"a"}, now.Add(time.Hour)) })
	for _, c := range []struct {
		before time.Time
		want   int64
	}{
		{now.Add(-time.Hour), 0},
		{now.Add(-time.Second), 0},
		{now, 1},
		{now.Add(time.Millisecond), 2},
		{now.Add(time.Hour + time.Millisecond), 3},
	} {
		got := read(t, s, func(tx store.Tx) (int64, error) { return tx.OrdersOverdueCount(ctx, c.before) })
		if got != c.want {
			t.Errorf("OrdersOverdueCount(%v) = %d, want %d", c.before, got, c.want)
		}
	}
}

func testOrderList(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	orders := map[string]*orderly.Order{}
	for _, id := range []string{"o03", "o01", "o05", "o02", "o04"} {
		orders[id] = insertOrder(t, s, &orderOpts{ID: id})
	}
	orders["o06"] = insertOrder(t, s, closedOpts("o06", t0.Add(time.Hour))) // every state is listed
	page := func(after string, limit int) []*orderly.Order {
		t.Helper()
		return read(t, s, func(tx store.Tx) ([]*orderly.Order, error) {
			return tx.OrderList(ctx, &store.ListParams{AfterID: after, Limit: limit})
		})
	}
	var all []string
	after := ""
	for range 10 {
		p := page(after, 2)
		if len(p) == 0 {
			break
		}
		if len(p) > 2 {
			t.Fatalf("page after %q has %d orders, limit 2", after, len(p))
		}
		for _, o := range p {
			equal(t, "listed "+o.ID, o, orders[o.ID])
			all = append(all, o.ID)
		}
		after = p[len(p)-1].ID
	}
	equal(t, "ids over every page", all, []string{"o01", "o02", "o03", "o04", "o05", "o06"})
	equal(t, "page after o02, limit 3", ids(page("o02", 3)), []string{"o03", "o04", "o05"})
	equal(t, "page after the last", len(page("o06", 10)), 0)
}

// ids returns the ids of orders.
func ids(orders []*orderly.Order) []string {
	out := make([]string, len(orders))
	for i, o := range orders {
		out[i] = o.ID
	}
	return out
}

// testListOrder: statements that change the rows of an id list take them in id order,
// whatever the order of the list: transactions setting wake_at on the same orders, half of
// them listing them backwards, never deadlock (on MySQL such a statement is a join driven
// by the list, which took the rows in the list's order: two relays marking overlapping
// outbox messages deadlocked so).
func testListOrder(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	const workers, rounds, n = 6, 15, 12
	ids := make([]string, n)
	for i := range ids {
		ids[i] = nextID("list")
		insertOrder(t, s, &orderOpts{ID: ids[i]})
	}
	backward := slices.Clone(ids)
	slices.Reverse(backward)
	before := abortCount(s)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		list := ids
		if w%2 == 1 {
			list = backward
		}
		wg.Go(func() {
			<-start
			for r := range rounds {
				if err := s.InTx(ctx, func(tx store.Tx) error {
					return tx.OrdersSetWakeAt(ctx, list, t0.Add(time.Duration(w*rounds+r)*time.Millisecond))
				}); err != nil {
					t.Errorf("worker %d, round %d: %v", w, r, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if d := abortCount(s) - before; d != 0 {
		t.Errorf("the database aborted %d transactions for a deadlock, want none", d)
	}
}

// testOrdersPaymentsInFlight: the current attempts of the paying orders among the ids,
// except those whose payment.cancel is already pending (a repeat writes no second one).
func testOrdersPaymentsInFlight(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	closed := t0.Add(time.Hour)
	paying := func(id string) {
		o := closedOpts(id, closed)
		o.PayStatus, o.CurrentPaymentID = orderly.PayPaying, "pay-"+id
		insertOrder(t, s, o)
	}
	paying("fl-a")
	paying("fl-b")
	paying("fl-queued")
	insertMessage(t, s, orderly.TopicPaymentCancel, "pay-fl-queued", closed)
	insertOrder(t, s, closedOpts("fl-unpaid", closed))
	got := read(t, s, func(tx store.Tx) (map[string]string, error) {
		return tx.OrdersPaymentsInFlight(ctx, []string{"fl-b", "fl-queued", "fl-unpaid", "fl-a", "no-such-order"})
	})
	equal(t, "payments in flight", got, map[string]string{"fl-a": "pay-fl-a", "fl-b": "pay-fl-b"})
	none := read(t, s, func(tx store.Tx) (map[string]string, error) { return tx.OrdersPaymentsInFlight(ctx, nil) })
	equal(t, "payments in flight of none", len(none), 0)
}
