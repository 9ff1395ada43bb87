package ride

import "github.com/orderlyhq/orderly"

// FlowName is the name of the ride-hailing order flow.
const FlowName = "ride_hailing"

// States of trips (orders of flow ride_hailing). A cancelled trip, or one whose hold
// expired before a driver was assigned, is orderly.StateClosed with a close reason.
const (
	StateRequested      orderly.State = "requested"       // the hold is placed; waiting for a driver (timed: the hold's expiry)
	StateDriverAssigned orderly.State = "driver_assigned" // a driver accepted the trip
	StateInTrip         orderly.State = "in_trip"         // the rider is on board
	StateTripEnded      orderly.State = "trip_ended"      // the fare is known; the payment saga collects it
	StatePaid           orderly.State = "paid"            // the fare was captured (and charged beyond the hold)
	StateSettled        orderly.State = "settled"         // the driver and the platform were credited
	StateRefunding      orderly.State = "refunding"       // a full refund is under way (the refund saga)
	StateRefunded       orderly.State = "refunded"        // the settlement was reversed and the card refunded (terminal)
)

// Events of trips.
const (
	EventAssign         orderly.Event = "assign"      // a driver accepted
	EventStart          orderly.Event = "start"       // the trip began
	EventEnd            orderly.Event = "end"         // the trip ended with its fare
	EventSettle         orderly.Event = "settle"      // the driver and platform were credited
	EventRefundFail     orderly.Event = "refund_fail" // the refund saga was compensated: the trip stays settled
	EventRefund                       = orderly.EventRefund
	EventRefundComplete               = orderly.EventRefundComplete
)

// Close reasons of trips.
const (
	CloseReasonRiderCancelled orderly.CloseReason = "rider_cancelled" // the rider cancelled (fee after assignment)
	CloseReasonHoldExpired    orderly.CloseReason = "hold_expired"    // no driver before the hold's expiry
)

// Event topics of trips (key: trip id; payload orderly.OrderEvent).
const (
	TopicTripEnded    = "trip.ended"
	TopicTripSettled  = "trip.settled"
	TopicTripRefunded = "trip.refunded"
)

var closeEffects = []string{orderly.EffectPublish + orderly.TopicOrderClosed}

// EffectReleaseHold records, on the trips a transition closed without a capture (the
// hold's expiry), that the whole hold went back to the card: released = held − captured.
// Without it an expired trip showed captured 0 and released 0 against its hold.
const EffectReleaseHold = "ride_release_hold"

// Flow is the ride-hailing flow (docs/flows/ride-hailing.md):
//
//	requested --assign--> driver_assigned --start--> in_trip --end--> trip_ended
//	trip_ended --pay--> paid --settle--> settled          (the payment saga)
//	requested|driver_assigned|in_trip --cancel--> closed  (rider_cancelled; the hold is released, less the fee after assignment)
//	requested --timeout--> closed                         (hold_expired: at the hold's expiry, database clock; the hold released)
//	settled --refund--> refunding --refund_complete--> refunded
//	refunding --refund_fail--> settled                    (the refund saga was compensated)
//
// The money moves outside the transitions, in sagas (saga.go): a trip's order carries no
// items and an amount of 0, and its pay_status stays unpaid; its money is the trip's
// (orderly.Trip).
var Flow = &orderly.Flow{
	Name:      FlowName,
	Initial:   StateRequested,
	Managed:   true, // trips are created with their hold (Service.CreateTrip)
	CreatedBy: "POST /v1/trips",
	ServedBy:  "/v1/trips/{id}",
	Transitions: []orderly.FlowTransition{
		{From: StateRequested, Event: EventAssign, To: StateDriverAssigned},
		{From: StateRequested, Event: orderly.EventCancel, To: orderly.StateClosed, Effects: closeEffects},
		{From: StateRequested, Event: orderly.EventTimeout, To: orderly.StateClosed,
			Effects: []string{EffectReleaseHold, orderly.EffectPublish + orderly.TopicOrderClosed}},
		{From: StateDriverAssigned, Event: EventStart, To: StateInTrip},
		{From: StateDriverAssigned, Event: orderly.EventCancel, To: orderly.StateClosed, Effects: closeEffects},
		{From: StateInTrip, Event: EventEnd, To: StateTripEnded, Effects: []string{orderly.EffectPublish + TopicTripEnded}},
		{From: StateInTrip, Event: orderly.EventCancel, To: orderly.StateClosed, Effects: closeEffects},
		{From: StateTripEnded, Event: orderly.EventPay, To: StatePaid},
		{From: StatePaid, Event: EventSettle, To: StateSettled, Effects: []string{orderly.EffectPublish + TopicTripSettled}},
		{From: StateSettled, Event: EventRefund, To: StateRefunding},
		{From: StateRefunding, Event: EventRefundComplete, To: StateRefunded, Effects: []string{orderly.EffectPublish + TopicTripRefunded}},
		{From: StateRefunding, Event: EventRefundFail, To: StateSettled},
	},
	Timed: []orderly.TimedState{
		{State: StateRequested, Deadline: orderly.DeadlinePayment, Event: orderly.EventTimeout, CloseReason: CloseReasonHoldExpired},
	},
}
