package ride

import (
	"context"
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

// Effects returns the effects that Flow names and package ride implements; give them to
// order.NewMachine at the composition root.
func Effects() map[string]order.Effect {
	return map[string]order.Effect{EffectReleaseHold: releaseHolds}
}

// releaseHolds is EffectReleaseHold, in the transition's transaction: each trip's hold is
// accounted as released but for what it captured.
func releaseHolds(ctx context.Context, tx store.Tx, b *order.EffectBatch) error {
	for _, id := range b.IDs {
		t, err := tx.TripGet(ctx, id)
		if err != nil {
			return fmt.Errorf("trip of order %s: %w", id, err)
		}
		if !releaseRest(t) {
			continue
		}
		t.UpdatedAt = b.Params.Now
		if ok, err := tx.TripUpdate(ctx, t); err != nil {
			return err
		} else if !ok {
			return orderly.Errorf(orderly.ECONFLICT, "trip %s changed concurrently; retry", t.ID)
		}
	}
	return nil
}

// releaseRest accounts what t's hold did not capture as released, and reports whether that
// changed t: a hold that expired, was voided, or whose capture was refunded went back to
// the card whole, but for what the trip says it captured.
func releaseRest(t *orderly.Trip) bool {
	if t.Captured+t.Released == t.HoldAmount || t.Captured > t.HoldAmount {
		return false
	}
	t.Released = t.HoldAmount - t.Captured
	return true
}
