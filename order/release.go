package order

import (
	"context"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

// ReleaseHandlers returns the outbox handlers that undo what a closed order held: its
// reservations (reservation.release) and its frozen coupon (coupon.release). Both are
// guarded updates, so a message delivered twice releases once (I3).
func ReleaseHandlers() map[string]outbox.Handler {
	return map[string]outbox.Handler{
		orderly.TopicReservationRelease: {Apply: releaseReservations},
		orderly.TopicCouponRelease:      {Apply: releaseCoupon},
	}
}

func releaseReservations(ctx context.Context, tx store.Tx, m *orderly.Message) error {
	var ref orderly.OrderRef
	if err := outbox.Decode(m, &ref); err != nil {
		return err
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	_, err = tx.ReservationsRelease(ctx, ref.OrderID, now)
	return err
}

func releaseCoupon(ctx context.Context, tx store.Tx, m *orderly.Message) error {
	var ref orderly.CouponRef
	if err := outbox.Decode(m, &ref); err != nil {
		return err
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	_, err = tx.CouponRelease(ctx, ref.CouponID, ref.OrderID, now)
	return err
}
