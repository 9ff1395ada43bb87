package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/orderlyhq/orderly"
)

// metadataPatchRequest is the body of the PATCH routes of orders, trips, payments, refunds
// and groups: {"metadata": {key: "value" sets, key: null removes}}, a JSON merge patch
// (RFC 7396) of the object's metadata.
type metadataPatchRequest struct {
	Metadata orderly.MetadataPatch `json:"metadata"`
}

// patchMetadata handles PATCH of an object of kind of: the metadata patched under the
// object's lock, then 200 with the object as get reads it. get is also asked first, so
// that a route answers 404 for an id of another kind (PATCH /v1/trips/{id of an order}).
// Errors: 404 not-found, 422 invalid-input (the patch, or the result beyond the bounds:
// nothing changed).
func (s *Server) patchMetadata(of orderly.MetadataOf, get func(ctx context.Context, id string) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, id := r.Context(), pathParam(r, "id")
		if _, err := get(ctx, id); err != nil {
			s.writeError(w, r, err)
			return
		}
		var req metadataPatchRequest
		if !s.decode(w, r, &req, bodyRequired) {
			return
		}
		if req.Metadata == nil {
			s.writeError(w, r, invalidf("metadata: required, an object whose string members set keys and null members remove them"))
			return
		}
		if _, err := s.metadata.UpdateMetadata(ctx, of, id, req.Metadata); err != nil {
			s.writeError(w, r, err)
			return
		}
		v, err := get(ctx, id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, r, http.StatusOK, v)
	}
}

// metadataOut is m as answered: {} for none, so that clients always find an object.
func metadataOut(m orderly.Metadata) orderly.Metadata {
	if m == nil {
		return orderly.Metadata{}
	}
	return m
}

// The objects with metadata, each as its GET route answers it.

func (s *Server) orderByID(ctx context.Context, id string) (any, error) {
	o, err := s.orders.Order(ctx, id)
	if err != nil {
		return nil, err
	}
	return newOrderResponse(o), nil
}

func (s *Server) tripByID(ctx context.Context, id string) (any, error) {
	t, err := s.trips.Trip(ctx, id)
	if err != nil {
		return nil, err
	}
	return newTripResponse(t), nil
}

func (s *Server) paymentByID(ctx context.Context, id string) (any, error) {
	p, err := s.payments.Payment(ctx, id)
	if err != nil {
		return nil, err
	}
	return newPaymentResponse(p), nil
}

func (s *Server) refundByID(ctx context.Context, id string) (any, error) {
	f, err := s.refunds.Refund(ctx, id)
	if err != nil {
		return nil, err
	}
	return newRefundResponse(f), nil
}

func (s *Server) groupByID(ctx context.Context, id string) (any, error) {
	g, err := s.groups.Group(ctx, id)
	if err != nil {
		return nil, err
	}
	return newGroupResponse(g), nil
}

// getRefund handles GET /v1/refunds/{id}.
func (s *Server) getRefund(w http.ResponseWriter, r *http.Request) {
	v, err := s.refundByID(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, v)
}

// noMetadata answers the PATCH routes of a Server built without a MetadataService.
type noMetadata struct{}

func (noMetadata) UpdateMetadata(context.Context, orderly.MetadataOf, string, orderly.MetadataPatch) (orderly.Metadata, error) {
	return nil, errNoMetadata
}

var errNoMetadata = errors.New("httpapi: Config.Metadata is not set")
