package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
)

// tripResponse is the JSON of an orderly.Trip (amounts in minor units of currency).
type tripResponse struct {
	ID              string           `json:"id"`
	RiderID         string           `json:"rider_id"`
	DriverID        string           `json:"driver_id,omitempty"`
	State           orderly.State    `json:"state"`
	CloseReason     string           `json:"close_reason,omitempty"`
	PaymentMethod   string           `json:"payment_method"`
	Currency        string           `json:"currency"`
	Estimate        int64            `json:"estimate"`
	HoldID          string           `json:"hold_id"`
	HoldAmount      int64            `json:"hold_amount"`
	HoldExpiresAt   Time             `json:"hold_expires_at"`
	Fare            int64            `json:"fare"`
	CancellationFee int64            `json:"cancellation_fee"`
	Captured        int64            `json:"captured"`
	Released        int64            `json:"released"`
	ExtraCharged    int64            `json:"extra_charged"`
	CollectionDue   int64            `json:"collection_due"`
	DriverPayout    int64            `json:"driver_payout"`
	PlatformFee     int64            `json:"platform_fee"`
	Refunded        int64            `json:"refunded"`
	PaymentSagaID   string           `json:"payment_saga_id,omitempty"`
	RefundSagaID    string           `json:"refund_saga_id,omitempty"`
	CreatedAt       Time             `json:"created_at"`
	UpdatedAt       Time             `json:"updated_at"`
	Version         int64            `json:"version"`
	Metadata        orderly.Metadata `json:"metadata"`
}

func newTripResponse(t *orderly.Trip) *tripResponse {
	return &tripResponse{ID: t.ID, RiderID: t.RiderID, DriverID: t.DriverID, State: t.State, CloseReason: t.CloseReason,
		PaymentMethod: t.PaymentMethod, Currency: t.Currency, Estimate: t.Estimate, HoldID: t.HoldID, HoldAmount: t.HoldAmount,
		HoldExpiresAt: Time(t.HoldExpiresAt), Fare: t.Fare, CancellationFee: t.CancellationFee, Captured: t.Captured,
		Released: t.Released, ExtraCharged: t.ExtraCharged, CollectionDue: t.CollectionDue, DriverPayout: t.DriverPayout,
		PlatformFee: t.PlatformFee, Refunded: t.Refunded, PaymentSagaID: t.PaymentSagaID, RefundSagaID: t.RefundSagaID,
		CreatedAt: Time(t.CreatedAt), UpdatedAt: Time(t.UpdatedAt), Version: t.Version,
		Metadata: metadataOut(t.Metadata)}
}

// assignDriverRequest is the body of POST /v1/trips/{id}/assign.
type assignDriverRequest struct {
	DriverID string `json:"driver_id"`
}

// endTripRequest is the body of POST /v1/trips/{id}/end.
type endTripRequest struct {
	Fare int64 `json:"fare"`
}

// tripRoutes registers the ride-hailing routes.
func (s *Server) tripRoutes(r chi.Router) {
	r.Post("/v1/trips", s.createTrip)
	r.Get("/v1/trips/{id}", s.getTrip)
	r.Post("/v1/trips/{id}/assign", s.assignDriver)
	r.Post("/v1/trips/{id}/start", s.tripEvent(s.trips.StartTrip))
	r.Post("/v1/trips/{id}/cancel", s.tripEvent(s.trips.CancelTrip))
	r.Post("/v1/trips/{id}/refund", s.tripEvent(s.trips.RefundTrip))
	r.Post("/v1/trips/{id}/end", s.endTrip)
	r.Patch("/v1/trips/{id}", s.tripOnly(s.patchMetadata(orderly.MetadataOfOrder, answered(s.trips.Trip, newTripResponse))))
}

// tripOnly answers 404 before next for an id that is no trip: a trip's metadata is its
// order's, so the order's PATCH alone would take the id of any order.
func (s *Server) tripOnly(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.trips.Trip(r.Context(), pathParam(r, "id")); err != nil {
			s.writeError(w, r, err)
			return
		}
		next(w, r)
	}
}

// createTrip handles POST /v1/trips: body orderly.CreateTripParams; 201 with the trip in
// state requested and its hold.
func (s *Server) createTrip(w http.ResponseWriter, r *http.Request) {
	var p orderly.CreateTripParams
	if !s.decode(w, r, &p, bodyRequired) {
		return
	}
	p.Actor, p.TraceID = "rider", TraceIDFromContext(r.Context())
	t, err := s.trips.CreateTrip(r.Context(), &p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/trips/"+url.PathEscape(t.ID))
	s.writeJSON(w, r, http.StatusCreated, newTripResponse(t))
}

// getTrip handles GET /v1/trips/{id}.
func (s *Server) getTrip(w http.ResponseWriter, r *http.Request) {
	s.writeTrip(w, r)(s.trips.Trip(r.Context(), pathParam(r, "id")))
}

// assignDriver handles POST /v1/trips/{id}/assign.
func (s *Server) assignDriver(w http.ResponseWriter, r *http.Request) {
	var req assignDriverRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	s.writeTrip(w, r)(s.trips.AssignDriver(r.Context(), pathParam(r, "id"), req.DriverID))
}

// endTrip handles POST /v1/trips/{id}/end: the fare, then the payment saga; 200 with the
// trip as the saga left it.
func (s *Server) endTrip(w http.ResponseWriter, r *http.Request) {
	var req endTripRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	s.writeTrip(w, r)(s.trips.EndTrip(r.Context(), pathParam(r, "id"), req.Fare))
}

// tripEvent handles an event without a body (start, cancel, refund).
func (s *Server) tripEvent(fn func(context.Context, string) (*orderly.Trip, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.writeTrip(w, r)(fn(r.Context(), pathParam(r, "id")))
	}
}

// writeTrip returns a function writing a trip (200) or the error.
func (s *Server) writeTrip(w http.ResponseWriter, r *http.Request) func(*orderly.Trip, error) {
	return func(t *orderly.Trip, err error) {
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, r, http.StatusOK, newTripResponse(t))
	}
}

// noTrips answers the trip routes of a server built without a TripService.
type noTrips struct{}

var errNoTrips = orderly.Errorf(orderly.ENOTFOUND, "ride-hailing is not enabled on this server")

func (noTrips) CreateTrip(context.Context, *orderly.CreateTripParams) (*orderly.Trip, error) {
	return nil, errNoTrips
}
func (noTrips) Trip(context.Context, string) (*orderly.Trip, error) { return nil, errNoTrips }
func (noTrips) AssignDriver(context.Context, string, string) (*orderly.Trip, error) {
	return nil, errNoTrips
}
func (noTrips) StartTrip(context.Context, string) (*orderly.Trip, error)      { return nil, errNoTrips }
func (noTrips) EndTrip(context.Context, string, int64) (*orderly.Trip, error) { return nil, errNoTrips }
func (noTrips) CancelTrip(context.Context, string) (*orderly.Trip, error)     { return nil, errNoTrips }
func (noTrips) RefundTrip(context.Context, string) (*orderly.Trip, error)     { return nil, errNoTrips }
