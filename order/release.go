package order

import (
	"context"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

// ReleaseHandlers returns the outbox handlers that undo what a closed order held: its
// reservations (reservation.release) and its frozen coupon (coupon.release). Both are
// guarded, set-based updates, so a message delivered twice releases once (I3) and a
// batch of a thousand closes is released in a few statements.
func ReleaseHandlers() map[string]outbox.Handler {
	return map[string]outbox.Handler{
		orderly.TopicReservationRelease: {Apply: releaseReservations},
		orderly.TopicCouponRelease:      {Apply: releaseCoupons},
	}
}

func releaseReservations(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		var ref orderly.OrderRef
		if err := outbox.Decode(m, &ref); err != nil {
			return err
		}
		ids[i] = ref.OrderID
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	_, err = tx.ReservationsReleaseMany(ctx, ids, now)
	return err
}

func releaseCoupons(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
	refs := make([]orderly.CouponRef, len(msgs))
	for i, m := range msgs {
		if err := outbox.Decode(m, &refs[i]); err != nil {
			return err
		}
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	_, err = tx.CouponsRelease(ctx, refs, now)
	return err
}
