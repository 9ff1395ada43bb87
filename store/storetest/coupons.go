package storetest

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testCoupons checks coupons: round trips, and that freeze, release and use are guarded so
// that a coupon is frozen by at most one order and released or used only by it (I3).
func testCoupons(t *testing.T, open opener) {
	t.Run("InsertGetList", func(t *testing.T) {
		ctx, s := setup(t, open)
		zone := time.FixedZone("UTC-5", -5*60*60)
		in := &orderly.Coupon{ID: "c2", UserID: "user-9", AmountOff: 1234, Currency: "USD",
			State: orderly.CouponFrozen, OrderID: "o1", ExpiresAt: ptr(time.Date(2030, 3, 4, 5, 6, 7, 890_123_456, zone)),
			CreatedAt: time.Date(2030, 1, 2, 3, 4, 5, 6_999_999, zone)}
		inTx(t, s, func(tx store.Tx) error { return tx.CouponInsert(ctx, in) })
		want2 := *in
		want2.ExpiresAt, want2.CreatedAt = ptr(utcMS(*in.ExpiresAt)), utcMS(in.CreatedAt)
		got := getCoupon(t, s, "c2")
		equal(t, "CouponGet(c2)", got, &want2)
		if got.CreatedAt.Location() != time.UTC || got.ExpiresAt.Location() != time.UTC {
			t.Errorf("coupon times not UTC: %v, %v", got.CreatedAt, got.ExpiresAt)
		}
		want1 := insertCoupon(t, s, &couponOpts{ID: "c1"})
		want3 := insertCoupon(t, s, &couponOpts{ID: "c3", State: orderly.CouponUsed, OrderID: "o2"})
		equal(t, "CouponGet(c1)", getCoupon(t, s, "c1"), want1)
		equal(t, "CouponList, by id", read(t, s, func(tx store.Tx) ([]*orderly.Coupon, error) { return tx.CouponList(ctx) }),
			[]*orderly.Coupon{want1, &want2, want3})

		err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.CouponGet(ctx, "missing"); return err })
		wantCode(t, "CouponGet(missing)", err, orderly.ENOTFOUND)
		err = txErr(t, s, func(tx store.Tx) error {
			return tx.CouponInsert(ctx, &orderly.Coupon{ID: "c1", UserID: "user-2", AmountOff: 1, Currency: "EUR",
				State: orderly.CouponAvailable, CreatedAt: t0})
		})
		wantCode(t, "second insert of c1", err, orderly.ECONFLICT)
		equal(t, "c1 after the duplicate insert", getCoupon(t, s, "c1"), want1)
	})
	t.Run("Freeze", func(t *testing.T) { testCouponFreeze(t, open) })
	t.Run("Release", func(t *testing.T) { testCouponRelease(t, open) })
	t.Run("Use", func(t *testing.T) { testCouponUse(t, open) })
	t.Run("ExactlyOnce", func(t *testing.T) {
		ctx, s := setup(t, open)
		c := insertCoupon(t, s, &couponOpts{})
		freeze := func(orderID string) bool {
			return write(t, s, func(tx store.Tx) (bool, error) {
				return tx.CouponFreeze(ctx, &store.CouponFreezeParams{ID: c.ID, UserID: c.UserID, OrderID: orderID,
					Currency: c.Currency, Now: t0})
			})
		}
		release := func(orderID string) bool {
			return write(t, s, func(tx store.Tx) (bool, error) { return tx.CouponRelease(ctx, c.ID, orderID, t0) })
		}
		use := func(orderID string) bool {
			return write(t, s, func(tx store.Tx) (bool, error) { return tx.CouponUse(ctx, c.ID, orderID) })
		}
		for i, step := range []struct {
			name string
			do   func(string) bool
			arg  string
			want bool
		}{
			{"freeze", freeze, "o1", true},
			{"freeze", freeze, "o2", false},
			{"release", release, "o1", true},
			{"release", release, "o1", false},
			{"freeze", freeze, "o2", true},
			{"release", release, "o1", false},
			{"use", use, "o1", false},
			{"use", use, "o2", true},
			{"use", use, "o2", false},
			{"release", release, "o2", false},
			{"freeze", freeze, "o3", false},
		} {
			if got := step.do(step.arg); got != step.want {
				t.Errorf("step %d: %s by %s = %v, want %v", i, step.name, step.arg, got, step.want)
			}
		}
		want := *c
		want.State, want.OrderID = orderly.CouponUsed, "o2"
		equal(t, "coupon at the end", getCoupon(t, s, c.ID), &want)
	})
}

func testCouponFreeze(t *testing.T, open opener) {
	t.Parallel()
	now := t0.Add(time.Hour)
	cases := []struct {
		name   string
		coupon *couponOpts // nil: no coupon
		params store.CouponFreezeParams
		want   bool
	}{
		{"NoExpiry", &couponOpts{}, store.CouponFreezeParams{}, true},
		{"ExpiresAfterNow", &couponOpts{ExpiresAt: ptr(now.Add(time.Millisecond))}, store.CouponFreezeParams{}, true},
		{"ExpiresAtNow", &couponOpts{ExpiresAt: &now}, store.CouponFreezeParams{}, false},
		{"Expired", &couponOpts{ExpiresAt: ptr(now.Add(-time.Hour))}, store.CouponFreezeParams{}, false},
		{"OtherUser", &couponOpts{}, store.CouponFreezeParams{UserID: "user-2"}, false},
		{"OtherCurrency", &couponOpts{}, store.CouponFreezeParams{Currency: "USD"}, false},
		{"FrozenByAnotherOrder", &couponOpts{State: orderly.CouponFrozen, OrderID: "o2"}, store.CouponFreezeParams{}, false},
		{"FrozenBySameOrder", &couponOpts{State: orderly.CouponFrozen, OrderID: "o1"}, store.CouponFreezeParams{}, false},
		{"Used", &couponOpts{State: orderly.CouponUsed, OrderID: "o2"}, store.CouponFreezeParams{}, false},
		{"ExpiredState", &couponOpts{State: orderly.CouponExpired}, store.CouponFreezeParams{}, false},
		{"Missing", nil, store.CouponFreezeParams{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			p := c.params
			p.ID, p.OrderID, p.Now = "coupon", "o1", now
			if p.UserID == "" {
				p.UserID = "user-1"
			}
			if p.Currency == "" {
				p.Currency = "EUR"
			}
			var before *orderly.Coupon
			if c.coupon != nil {
				c.coupon.ID = p.ID
				before = insertCoupon(t, s, c.coupon)
			}
			got := write(t, s, func(tx store.Tx) (bool, error) { return tx.CouponFreeze(ctx, &p) })
			if got != c.want {
				t.Errorf("CouponFreeze = %v, want %v", got, c.want)
			}
			if before == nil {
				return
			}
			want := *before
			if c.want {
				want.State, want.OrderID = orderly.CouponFrozen, p.OrderID
			}
			equal(t, "coupon after CouponFreeze", getCoupon(t, s, p.ID), &want)
		})
	}
}

func testCouponRelease(t *testing.T, open opener) {
	t.Parallel()
	now := t0.Add(time.Hour)
	frozen := func(expiresAt *time.Time) *couponOpts {
		return &couponOpts{State: orderly.CouponFrozen, OrderID: "o1", ExpiresAt: expiresAt}
	}
	cases := []struct {
		name      string
		coupon    *couponOpts // nil: no coupon
		orderID   string
		want      bool
		wantState string
	}{
		{"ByFreezingOrder", frozen(nil), "o1", true, orderly.CouponAvailable},
		{"BeforeExpiry", frozen(ptr(now.Add(time.Millisecond))), "o1", true, orderly.CouponAvailable},
		{"AtExpiry", frozen(&now), "o1", true, orderly.CouponExpired},
		{"AfterExpiry", frozen(ptr(now.Add(-time.Hour))), "o1", true, orderly.CouponExpired},
		{"ByAnotherOrder", frozen(nil), "o2", false, ""},
		{"ExpiredByAnotherOrder", frozen(ptr(now.Add(-time.Hour))), "o2", false, ""},
		{"NotFrozen", &couponOpts{}, "o1", false, ""},
		{"Used", &couponOpts{State: orderly.CouponUsed, OrderID: "o1"}, "o1", false, ""},
		{"Missing", nil, "o1", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			var before *orderly.Coupon
			if c.coupon != nil {
				c.coupon.ID = "coupon"
				before = insertCoupon(t, s, c.coupon)
			}
			got := write(t, s, func(tx store.Tx) (bool, error) { return tx.CouponRelease(ctx, "coupon", c.orderID, now) })
			if got != c.want {
				t.Errorf("CouponRelease = %v, want %v", got, c.want)
			}
			if before == nil {
				return
			}
			want := *before
			if c.want {
				want.State, want.OrderID = c.wantState, ""
			}
			equal(t, "coupon after CouponRelease", getCoupon(t, s, "coupon"), &want)
		})
	}
}

func testCouponUse(t *testing.T, open opener) {
	t.Parallel()
	cases := []struct {
		name    string
		coupon  *couponOpts // nil: no coupon
		orderID string
		want    bool
	}{
		{"ByFreezingOrder", &couponOpts{State: orderly.CouponFrozen, OrderID: "o1"}, "o1", true},
		{"ByAnotherOrder", &couponOpts{State: orderly.CouponFrozen, OrderID: "o1"}, "o2", false},
		{"Available", &couponOpts{}, "o1", false},
		{"AlreadyUsed", &couponOpts{State: orderly.CouponUsed, OrderID: "o1"}, "o1", false},
		{"Expired", &couponOpts{State: orderly.CouponExpired}, "o1", false},
		{"Missing", nil, "o1", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			var before *orderly.Coupon
			if c.coupon != nil {
				c.coupon.ID = "coupon"
				before = insertCoupon(t, s, c.coupon)
			}
			got := write(t, s, func(tx store.Tx) (bool, error) { return tx.CouponUse(ctx, "coupon", c.orderID) })
			if got != c.want {
				t.Errorf("CouponUse = %v, want %v", got, c.want)
			}
			if before == nil {
				return
			}
			want := *before
			if c.want {
				want.State = orderly.CouponUsed
			}
			equal(t, "coupon after CouponUse", getCoupon(t, s, "coupon"), &want)
		})
	}
}
