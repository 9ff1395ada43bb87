package orderly

import (
	"context"
	"time"
)

// PaymentMethodCard pays a trip with a card pre-authorisation (a hold at the payment
// gateway), the only payment method of trips so far.
const PaymentMethodCard = "card"

// Trip is a ride-hailing trip: an order of flow ride_hailing (its ID, State and audit trail
// are the order's) with the money of its card hold (package ride, docs/flows/ride-hailing.md).
// Amounts are int64 minor units of Currency; times are UTC.
//
// At request a hold of HoldAmount (Estimate plus the margin) is placed at the gateway as
// hold HoldID until HoldExpiresAt (the gateway's clock). At the trip's end the fare is
// collected once, by the payment saga PaymentSagaID: Captured (≤ HoldAmount: never more)
// and Released (HoldAmount − Captured) from the hold, and ExtraCharged = Fare − HoldAmount
// as a second payment when the fare is more than the hold. Captured + Released equals
// HoldAmount once the hold is resolved. CollectionDue is the part of the fare that could
// not be charged (the hold had expired): the trip stays trip_ended, flagged for
// collection. Settlement credits DriverPayout to the driver's role account and PlatformFee to the
// platform's; a refund (RefundSagaID) reverses both and gives Refunded back to the card.
type Trip struct {
	ID              string    `json:"id"`
	RiderID         string    `json:"rider_id"`
	DriverID        string    `json:"driver_id,omitempty"`
	State           State     `json:"state"`
	CloseReason     string    `json:"close_reason,omitempty"`
	PaymentMethod   string    `json:"payment_method"`
	Currency        string    `json:"currency"`
	Estimate        int64     `json:"estimate"`
	HoldID          string    `json:"hold_id"`
	HoldAmount      int64     `json:"hold_amount"`
	HoldExpiresAt   time.Time `json:"hold_expires_at"`
	Fare            int64     `json:"fare"`
	CancellationFee int64     `json:"cancellation_fee"`
	Captured        int64     `json:"captured"`
	Released        int64     `json:"released"`
	ExtraCharged    int64     `json:"extra_charged"`
	CollectionDue   int64     `json:"collection_due"`
	DriverPayout    int64     `json:"driver_payout"`
	PlatformFee     int64     `json:"platform_fee"`
	Refunded        int64     `json:"refunded"`
	PaymentSagaID   string    `json:"payment_saga_id,omitempty"`
	RefundSagaID    string    `json:"refund_saga_id,omitempty"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	Version         int64     `json:"version"`
	Metadata        Metadata  `json:"metadata,omitempty"` // the trip's order's: set at create, changed by PATCH
}

// CreateTripParams is the input of TripService.CreateTrip: RiderID asks for a trip whose
// fare is estimated at Estimate minor units of Currency, paid by PaymentMethod ("" or
// "card").
type CreateTripParams struct {
	RiderID       string   `json:"rider_id"`
	Currency      string   `json:"currency"`
	Estimate      int64    `json:"estimate"`
	PaymentMethod string   `json:"payment_method,omitempty"`
	Metadata      Metadata `json:"metadata,omitempty"` // Metadata's bounds, else EINVALID
	Actor         string   `json:"-"`
	TraceID       string   `json:"-"`
}

// TripService runs ride-hailing trips (package ride). Every event is a transition of the
// trip's order through the ride_hailing flow; an event the trip's state does not take is
// EILLEGAL (409). Errors: EINVALID (bad input, 422), ENOTFOUND (404), EILLEGAL,
// ECONFLICT (the trip changed concurrently; retry), EUNAVAILABLE (the gateway did not
// answer the hold; nothing was created, retry).
type TripService interface {
	// CreateTrip places the hold and creates the trip in state requested.
	CreateTrip(ctx context.Context, p *CreateTripParams) (*Trip, error)
	// Trip returns a trip.
	Trip(ctx context.Context, id string) (*Trip, error)
	// AssignDriver moves a requested trip to driver_assigned.
	AssignDriver(ctx context.Context, id, driverID string) (*Trip, error)
	// StartTrip moves a driver_assigned trip to in_trip.
	StartTrip(ctx context.Context, id string) (*Trip, error)
	// EndTrip moves an in_trip trip to trip_ended with its fare (> 0) and runs the payment
	// saga; it returns the trip as the saga left it (paid and settled, or trip_ended with
	// CollectionDue, or trip_ended while the saga retries).
	EndTrip(ctx context.Context, id string, fare int64) (*Trip, error)
	// CancelTrip closes a requested, driver_assigned or in_trip trip and releases its hold,
	// less the cancellation fee after assignment.
	CancelTrip(ctx context.Context, id string) (*Trip, error)
	// RefundTrip refunds a settled trip in full: the settlement is reversed, the card
	// refunded.
	RefundTrip(ctx context.Context, id string) (*Trip, error)
}
