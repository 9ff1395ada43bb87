package httpapi

import (
	"net/http"
	"net/url"
	"slices"

	"github.com/orderlyhq/orderly"
)

// IdempotencyKeyHeader is the request header of POST /v1/orders that makes it idempotent.
const IdempotencyKeyHeader = "Idempotency-Key"

// maxIdempotencyKeyLen limits the Idempotency-Key header, in bytes.
const maxIdempotencyKeyLen = 255

// merchantEvents are the events that POST /v1/orders/{id}/events accepts.
var merchantEvents = []orderly.Event{orderly.EventShip, orderly.EventComplete, orderly.EventRefund}

// createOrder handles POST /v1/orders: body orderly.CreateOrderParams, optional
// Idempotency-Key header. 201 with the order when this call created it, 200 with the
// order when an earlier call with the same key did (a replay).
func (s *Server) createOrder(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(IdempotencyKeyHeader)
	if err := validateIdempotencyKey(key); err != nil {
		s.writeError(w, r, err)
		return
	}
	var params orderly.CreateOrderParams
	if !s.decode(w, r, &params, bodyRequired) {
		return
	}
	params.IdempotencyKey = key
	params.Actor = actorBuyer
	params.TraceID = TraceIDFromContext(r.Context())

	o, created, err := s.orders.CreateOrder(r.Context(), &params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := replayed(w, !created)
	if created {
		w.Header().Set("Location", "/v1/orders/"+url.PathEscape(o.ID))
	}
	s.writeJSON(w, r, status, newOrderResponse(o))
}

// validateIdempotencyKey accepts an empty key or up to 255 bytes of printable ASCII.
func validateIdempotencyKey(key string) error {
	if len(key) > maxIdempotencyKeyLen {
		return invalidf("%s header: must be at most %d bytes", IdempotencyKeyHeader, maxIdempotencyKeyLen)
	}
	for i := range len(key) {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return invalidf("%s header: must be printable ASCII", IdempotencyKeyHeader)
		}
	}
	return nil
}

// getOrder handles GET /v1/orders/{id}.
func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	o, err := s.orders.Order(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newOrderResponse(o))
}

// getOrderHistory handles GET /v1/orders/{id}/history: {"transitions": [...]}, oldest first.
func (s *Server) getOrderHistory(w http.ResponseWriter, r *http.Request) {
	ts, err := s.orders.OrderHistory(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &historyResponse{Transitions: make([]*transitionResponse, 0, len(ts))}
	for _, t := range ts {
		resp.Transitions = append(resp.Transitions, newTransitionResponse(t))
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// cancelOrder handles POST /v1/orders/{id}/cancel: the buyer cancels an unpaid order. A
// body, if any, is ignored.
func (s *Server) cancelOrder(w http.ResponseWriter, r *http.Request) {
	o, err := s.orders.CancelOrder(r.Context(), pathParam(r, "id"), actorBuyer, TraceIDFromContext(r.Context()))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newOrderResponse(o))
}

// orderEventRequest is the body of POST /v1/orders/{id}/events.
type orderEventRequest struct {
	Event orderly.Event `json:"event"`
}

// applyOrderEvent handles POST /v1/orders/{id}/events: the merchant ships, completes or
// refunds an order. Body {"event": "ship" | "complete" | "refund"}.
func (s *Server) applyOrderEvent(w http.ResponseWriter, r *http.Request) {
	var req orderEventRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	if !slices.Contains(merchantEvents, req.Event) {
		s.writeError(w, r, invalidf("event: must be one of ship, complete, refund"))
		return
	}
	o, err := s.orders.ApplyEvent(r.Context(), pathParam(r, "id"), req.Event, actorMerchant, TraceIDFromContext(r.Context()))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newOrderResponse(o))
}
