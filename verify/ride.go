package verify

import (
	"context"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

func init() {
	RegisterFlowChecks(flowRideHailing, func() FlowChecks { return &rideChecks{orders: map[string]bool{}} })
}

// Names of the ride_hailing flow (docs/flows/ride-hailing.md; package ride).
const (
	flowRideHailing         = "ride_hailing"
	rideCancelled           = "rider_cancelled"
	rideExtraSuffix         = "/extra" // the second payment of a fare above the hold: <hold id>/extra
	stateRideTripEnded      = orderly.State("trip_ended")
	stateRideSettled        = orderly.State("settled")
	stateRideRefunding      = orderly.State("refunding")
	stateRideRefunded       = orderly.State("refunded")
	stateRideRequested      = orderly.State("requested")
	stateRideDriverAssigned = orderly.State("driver_assigned")
	stateRideInTrip         = orderly.State("in_trip")
	rideViolation           = "R"
	rideSagaRunning         = "running"
	rideSagaCompensating    = "compensating"
)

// rideChecks checks every trip's money against the ride package's rules, and against the
// gateway's holds when Options.Holds reads them:
//
//   - a hold is never over-captured, and once resolved held = captured + released; every
//     trip that ended (paid, closed, or trip_ended with its payment saga over) resolved it:
//     what it did not capture it released (an expired, voided or refunded hold);
//   - a paid trip (paid, settled, refunding, refunded) captured min(fare, hold) and charged
//     the rest as a second payment (extra only when the whole hold was captured), its
//     driver payout + platform fee = what was collected, nothing is due for collection;
//   - a refunded trip refunded what was collected, no other trip refunded anything;
//   - a trip not yet paid (requested … trip_ended) captured nothing and released nothing
//     but, once its saga is over, the whole hold; one cancelled by the rider captured
//     exactly its cancellation fee (or nothing, when its capture failed: the fee is due for
//     collection) and paid out no more; one closed otherwise captured nothing;
//   - at the gateway: the hold's amount is the trip's, its books show no fault (no double
//     capture), it is no longer pending once the trip is closed or paid, and
//     what it kept (captured − refunded) is what the trip says it kept; likewise the second
//     payment.
type rideChecks struct {
	trips  []*orderly.Trip
	holds  map[string]*orderly.Hold
	faults []string        // of the gateway's books
	orders map[string]bool // orders of the flow seen
	busy   map[string]bool // sagas still running or compensating, by id
}

func (r *rideChecks) Load(ctx context.Context, tx store.Tx, opts *Options) error {
	for after := ""; ; {
		page, err := tx.TripList(ctx, &store.ListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return err
		}
		r.trips = append(r.trips, page...)
		if len(page) < pageSize {
			break
		}
		after = page[len(page)-1].ID
	}
	r.busy = map[string]bool{}
	for _, state := range []string{rideSagaRunning, rideSagaCompensating} {
		for after := ""; ; {
			page, err := tx.SagaList(ctx, state, &store.ListParams{AfterID: after, Limit: pageSize})
			if err != nil {
				return err
			}
			for _, s := range page {
				r.busy[s.ID] = true
			}
			if len(page) < pageSize {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	if opts.Holds == nil {
		return nil
	}
	var err error
	r.holds, r.faults, err = opts.Holds(ctx, tx)
	return err
}

func (r *rideChecks) Order(_ *Violations, o *orderly.Order, _ []*orderly.Payment, _ []*orderly.Refund) {
	r.orders[o.ID] = true
}

func (r *rideChecks) Finish(v *Violations) {
	for _, f := range r.faults {
		v.Add(rideViolation, "%s", f)
	}
	for _, t := range r.trips {
		if !r.orders[t.ID] {
			v.Add(rideViolation, "trip %s has no order of flow %s", t.ID, flowRideHailing)
			continue
		}
		delete(r.orders, t.ID)
		r.checkTrip(v, t)
	}
	for _, id := range sortedKeys(r.orders) {
		v.Add(rideViolation, "order %s of flow %s has no trip", id, flowRideHailing)
	}
}

// paidTrip reports whether a trip in state s collected its fare.
func paidTrip(s orderly.State) bool {
	return s == orderly.StatePaid || s == stateRideSettled || s == stateRideRefunding || s == stateRideRefunded
}

func (r *rideChecks) checkTrip(v *Violations, t *orderly.Trip) {
	bad := func(format string, args ...any) {
		v.Add(rideViolation, "trip %s (%s): "+format, append([]any{t.ID, t.State}, args...)...)
	}
	collected := t.Captured + t.ExtraCharged
	resolved := t.Captured+t.Released == t.HoldAmount
	// A trip that ended, its payment saga over, accounts for its whole hold.
	over := !r.busy[t.PaymentSagaID]
	ended := paidTrip(t.State) || over && (t.State == orderly.StateClosed || t.State == stateRideTripEnded && t.PaymentSagaID != "")
	switch {
	case t.Captured > t.HoldAmount:
		bad("captured %d from a hold of %d", t.Captured, t.HoldAmount)
	case !resolved && (ended || t.Captured+t.Released != 0):
		bad("held %d ≠ captured %d + released %d", t.HoldAmount, t.Captured, t.Released)
	}
	if t.DriverPayout+t.PlatformFee != collected {
		bad("driver payout %d + platform fee %d ≠ collected %d (captured %d + extra %d)", t.DriverPayout, t.PlatformFee,
			collected, t.Captured, t.ExtraCharged)
	}
	if want := map[bool]int64{true: collected, false: 0}[t.State == stateRideRefunded]; t.Refunded != want {
		bad("refunded %d, want %d", t.Refunded, want)
	}
	switch {
	case paidTrip(t.State):
		if !resolved || collected != t.Fare || t.Captured != min(t.Fare, t.HoldAmount) {
			bad("fare %d on a hold of %d: captured %d, released %d, extra %d", t.Fare, t.HoldAmount, t.Captured, t.Released, t.ExtraCharged)
		}
		if t.CollectionDue != 0 {
			bad("paid, yet %d due for collection", t.CollectionDue)
		}
	case t.State == stateRideRequested, t.State == stateRideDriverAssigned, t.State == stateRideInTrip, t.State == stateRideTripEnded:
		// trip_ended, its saga over, released its whole hold (the fare is due for collection).
		if released := map[bool]int64{true: t.HoldAmount}[t.State == stateRideTripEnded && resolved]; t.Captured != 0 ||
			t.Released != 0 && t.Released != released || t.ExtraCharged != 0 {
			bad("not paid, yet captured %d, released %d, extra %d", t.Captured, t.Released, t.ExtraCharged)
		}
	case t.State == orderly.StateClosed && t.CloseReason == rideCancelled:
		failed := t.Captured == 0 && t.CollectionDue == t.CancellationFee // the fee's capture failed
		if resolved && t.Captured != t.CancellationFee && !failed || t.ExtraCharged != 0 {
			bad("cancelled with a fee of %d: captured %d, extra %d", t.CancellationFee, t.Captured, t.ExtraCharged)
		}
	case t.State == orderly.StateClosed:
		if t.Captured != 0 || t.ExtraCharged != 0 {
			bad("closed (%s), yet captured %d, extra %d", t.CloseReason, t.Captured, t.ExtraCharged)
		}
	}
	r.checkGatewayHold(v, bad, t, t.HoldID, t.HoldAmount, t.Captured)
	if h, ok := r.holds[t.HoldID+rideExtraSuffix]; ok || t.ExtraCharged > 0 {
		amount := t.ExtraCharged
		if ok {
			amount = h.Amount
		}
		r.checkGatewayHold(v, bad, t, t.HoldID+rideExtraSuffix, amount, t.ExtraCharged)
	}
}

// checkGatewayHold compares one hold of the gateway with the trip, when Options.Holds read
// any hold at all: amount, state, and what the gateway kept against kept (what the trip
// says it captured there) less refunds.
func (r *rideChecks) checkGatewayHold(v *Violations, bad func(string, ...any), t *orderly.Trip, id string, amount, kept int64) {
	if len(r.holds) == 0 {
		return // another gateway: its holds are not in this database
	}
	h, ok := r.holds[id]
	if !ok {
		bad("the gateway has no hold %s", id)
		return
	}
	if h.Amount != amount {
		bad("gateway hold %s of %d, the trip says %d", id, h.Amount, amount)
	}
	// A pending hold past its expiry is expired (the gateway's clock decides on the next call).
	if h.State == orderly.HoldPending && (t.State == orderly.StateClosed || paidTrip(t.State)) && v.Now().Before(h.ExpiresAt) {
		bad("gateway hold %s still pending", id)
	}
	if t.State == stateRideRefunded {
		kept = 0
	}
	atRest := t.State == orderly.StateClosed || t.State == stateRideTripEnded || (paidTrip(t.State) && t.State != stateRideRefunding)
	if net := h.Captured - h.Refunded; net != kept && atRest {
		bad("gateway hold %s kept %d (captured %d, refunded %d), the trip says %d", id, net, h.Captured, h.Refunded, kept)
	}
}
