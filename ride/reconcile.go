package ride

import (
	"context"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
)

// KindTripHoldUnaccounted is the reconciliation finding of a trip that ended (paid,
// closed, or trip_ended with its payment saga over) whose card hold is not accounted:
// captured + released ≠ held (docs/operations/reconcile.md). A trip that captured nothing and
// released nothing (its hold expired, was voided or its capture refunded, before the
// release was recorded) is repaired by recording the whole hold released; any other
// mismatch is an operator task.
const KindTripHoldUnaccounted reconcile.Kind = "trip_hold_unaccounted"

// ReconcileChecks returns the trips' reconciliation checks, for reconcile.Config.Checks.
// They have no per-order form: a trip's figures are not in the order's snapshot.
func ReconcileChecks() []reconcile.Check {
	return []reconcile.Check{{Kind: KindTripHoldUnaccounted, Scan: scanHoldsUnaccounted, Repair: repairHoldUnaccounted}}
}

// holdUnaccounted reports whether trip t has ended with its hold (its payment saga, read in tx,
// over) and does not account for it.
func holdUnaccounted(ctx context.Context, tx store.Tx, t *orderly.Trip) (bool, error) {
	if t.Captured+t.Released == t.HoldAmount {
		return false, nil
	}
	switch t.State {
	case StatePaid, StateSettled, StateRefunding, StateRefunded:
		return true, nil
	case orderly.StateClosed, StateTripEnded:
	default:
		return false, nil // the hold is still pending
	}
	if t.PaymentSagaID == "" {
		return t.State == orderly.StateClosed, nil // closed at the hold's expiry
	}
	s, err := tx.SagaGet(ctx, t.PaymentSagaID)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return s.State != string(saga.StateRunning) && s.State != string(saga.StateCompensating), nil
}

func unaccountedDetail(t *orderly.Trip) string {
	return fmt.Sprintf("trip %s (%s %s) held %d %s: captured %d + released %d ≠ held", t.ID, t.State, t.CloseReason,
		t.HoldAmount, t.Currency, t.Captured, t.Released)
}

func scanHoldsUnaccounted(ctx context.Context, r *reconcile.Reconciler, _ time.Time, emit func(*reconcile.Finding)) (int64, error) {
	return reconcile.Pages(ctx, r, "", func(tx store.Tx, after string, limit int) (int, string, error) {
		ts, err := tx.TripList(ctx, &store.ListParams{AfterID: after, Limit: limit})
		if err != nil {
			return 0, after, err
		}
		for _, t := range ts {
			bad, err := holdUnaccounted(ctx, tx, t)
			if err != nil {
				return 0, after, err
			}
			if bad {
				emit(&reconcile.Finding{Kind: KindTripHoldUnaccounted, OrderID: t.ID, Target: t.HoldID, Detail: unaccountedDetail(t)})
			}
			after = t.ID
		}
		return len(ts), after, nil
	})
}

// repairHoldUnaccounted records the whole hold released on a trip that ended capturing
// nothing and releasing nothing: the hold went back to the card (expired, voided, or its
// capture refunded by the saga's compensation). A trip repaired meanwhile changes nothing.
func repairHoldUnaccounted(ctx context.Context, r *reconcile.Reconciler, f *reconcile.Finding, by reconcile.Actor) (bool, error) {
	return r.RepairInTx(ctx, by, f, f.OrderID, func(tx store.Tx, now time.Time) (bool, any, error) {
		t, err := tx.TripGet(ctx, f.OrderID)
		if err != nil {
			return false, nil, err
		}
		bad, err := holdUnaccounted(ctx, tx, t)
		if err != nil || !bad || t.Captured != 0 || t.Released != 0 || t.ExtraCharged != 0 ||
			t.State != orderly.StateClosed && t.State != StateTripEnded {
			return false, nil, err // accounted meanwhile, or an operator task
		}
		releaseRest(t)
		t.UpdatedAt = now
		if ok, err := tx.TripUpdate(ctx, t); err != nil || !ok {
			return false, nil, err
		}
		return true, map[string]any{"trip_id": t.ID, "hold_id": t.HoldID, "released": t.Released}, nil
	})
}
