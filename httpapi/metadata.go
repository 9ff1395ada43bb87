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
// object's lock, then 200 with the object as get reads it. An id of no such object is
// UpdateMetadata's ENOTFOUND. Errors: 404 not-found, 422 invalid-input (the patch, or the
// result beyond the bounds: nothing changed).
func (s *Server) patchMetadata(of orderly.MetadataOf, get func(ctx context.Context, id string) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, id := r.Context(), pathParam(r, "id")
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

// answered makes a getter of the PATCH routes: read returns the object, out its answer.
func answered[T any, R any](read func(ctx context.Context, id string) (T, error), out func(T) R) func(context.Context, string) (any, error) {
	return func(ctx context.Context, id string) (any, error) {
		v, err := read(ctx, id)
		if err != nil {
			return nil, err
		}
		return out(v), nil
	}
}

// getRefund handles GET /v1/refunds/{id}.
func (s *Server) getRefund(w http.ResponseWriter, r *http.Request) {
	v, err := s.refunds.Refund(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newRefundResponse(v))
}

// noMetadata answers the PATCH routes of a Server built without a MetadataService.
type noMetadata struct{}

func (noMetadata) UpdateMetadata(context.Context, orderly.MetadataOf, string, orderly.MetadataPatch) (orderly.Metadata, error) {
	return nil, errNoMetadata
}

var errNoMetadata = errors.New("httpapi: Config.Metadata is not set")
