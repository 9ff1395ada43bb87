package storetest

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testTrips checks the trips of ride-hailing: round trip with the order's state and close
// reason, the version guard of TripUpdate (a stale version changes nothing), ENOTFOUND, the
// unique order id, and the CHECKs that keep a hold from being over-captured.
func testTrips(t *testing.T, open opener) {
	ctx, s := t.Context(), open(t)
	newTrip := func(t *testing.T) *orderly.Trip {
		t.Helper()
		o := insertOrder(t, s, &orderOpts{Items: []orderly.Item{}, UserID: "rider-1", Currency: "USD"})
		return &orderly.Trip{ID: o.ID, RiderID: "rider-1", State: orderly.StatePendingPayment, PaymentMethod: orderly.PaymentMethodCard,
			Currency: "USD", Estimate: 4000, HoldID: o.ID, HoldAmount: 5000, HoldExpiresAt: t0.Add(2 * time.Hour),
			CreatedAt: t0, UpdatedAt: t0, Version: 1}
	}
	get := func(id string) *orderly.Trip {
		return read(t, s, func(tx store.Tx) (*orderly.Trip, error) { return tx.TripGet(ctx, id) })
	}
	tr := newTrip(t)
	inTx(t, s, func(tx store.Tx) error { return tx.TripInsert(ctx, tr) })
	equal(t, "trip read back", get(tr.ID), tr)

	stale := *tr
	tr.DriverID, tr.Fare, tr.Captured, tr.Released, tr.PlatformFee, tr.DriverPayout = "driver-1", 3820, 3820, 1180, 764, 3056
	tr.PaymentSagaID, tr.UpdatedAt = tr.ID+":payment", t0.Add(time.Minute)
	equal(t, "update at the current version", write(t, s, func(tx store.Tx) (bool, error) { return tx.TripUpdate(ctx, tr) }), true)
	equal(t, "version after the update", tr.Version, int64(2))
	equal(t, "trip after the update", get(tr.ID), tr)
	stale.Fare = 9999
	equal(t, "update at a stale version", write(t, s, func(tx store.Tx) (bool, error) { return tx.TripUpdate(ctx, &stale) }), false)
	equal(t, "fare after the stale update", get(tr.ID).Fare, int64(3820))

	err := txErr(t, s, func(tx store.Tx) error { _, err := tx.TripGet(ctx, "no-such-trip"); return err })
	equal(t, "code of an unknown trip", orderly.ErrorCode(err), orderly.ENOTFOUND)
	err = txErr(t, s, func(tx store.Tx) error { return tx.TripInsert(ctx, tr) })
	equal(t, "code of a second trip of one order", orderly.ErrorCode(err), orderly.ECONFLICT)

	// Never over-captured: captured + released ≤ hold_amount is a CHECK.
	over := *get(tr.ID)
	over.Captured, over.Released = 5000, 1
	err = txErr(t, s, func(tx store.Tx) error { _, err := tx.TripUpdate(ctx, &over); return err })
	if err == nil {
		t.Fatal("a capture of 5000 with 1 released from a hold of 5000 was written")
	}
	bad := newTrip(t)
	bad.HoldAmount = bad.Estimate - 1
	if err := txErr(t, s, func(tx store.Tx) error { return tx.TripInsert(ctx, bad) }); err == nil {
		t.Fatal("a hold below the estimate was written")
	}
	equal(t, "trip after the refused writes", get(tr.ID), tr)

	list := read(t, s, func(tx store.Tx) ([]*orderly.Trip, error) { return tx.TripList(ctx, &store.ListParams{Limit: 10}) })
	equal(t, "trips listed", list, []*orderly.Trip{tr})
	list = read(t, s, func(tx store.Tx) ([]*orderly.Trip, error) {
		return tx.TripList(ctx, &store.ListParams{AfterID: tr.ID, Limit: 10})
	})
	equal(t, "trips after the last", len(list), 0)
}
