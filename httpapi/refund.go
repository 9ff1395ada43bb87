package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/orderlyhq/orderly"
)

// refundResponse is the JSON of an orderly.Refund.
type refundResponse struct {
	ID             string               `json:"id"`
	OrderID        string               `json:"order_id"`
	PaymentID      string               `json:"payment_id"`
	Amount         int64                `json:"amount"`
	Currency       string               `json:"currency"`
	Items          []orderly.RefundItem `json:"items"`
	Restock        bool                 `json:"restock"`
	Reason         string               `json:"reason,omitempty"`
	State          orderly.RefundState  `json:"state"`
	FailReason     string               `json:"fail_reason,omitempty"`
	CreatedAt      Time                 `json:"created_at"`
	CompletedAt    *Time                `json:"completed_at,omitempty"`
	ProviderRef    string               `json:"provider_ref,omitempty"`
	ProviderStatus string               `json:"provider_status,omitempty"`
	Metadata       orderly.Metadata     `json:"metadata"`
}

func newRefundResponse(f *orderly.Refund) *refundResponse {
	items := f.Items
	if items == nil {
		items = []orderly.RefundItem{}
	}
	return &refundResponse{
		ID:          f.ID,
		OrderID:     f.OrderID,
		PaymentID:   f.PaymentID,
		Amount:      f.Amount,
		Currency:    f.Currency,
		Items:       items,
		Restock:     f.Restock,
		Reason:      f.Reason,
		State:       f.State,
		FailReason:  f.FailReason,
		CreatedAt:   Time(f.CreatedAt),
		CompletedAt: timePtr(f.CompletedAt),
		ProviderRef: f.ProviderRef, ProviderStatus: f.ProviderStatus,
		Metadata: metadataOut(f.Metadata),
	}
}

// refundsResponse is the body of GET /v1/orders/{id}/refunds.
type refundsResponse struct {
	Refunds []*refundResponse `json:"refunds"`
}

// createRefund handles POST /v1/orders/{id}/refunds: the merchant refunds a paid, shipped
// or completed order, in full or in part. Body orderly.CreateRefundParams ({"amount",
// "items"?, "restock"?, "reason"?}), optional Idempotency-Key header (per order). 201 with
// the refund (state requested; the gateway confirms through the outbox), 200 with the first
// refund for a replay of the key. 409 refund-exceeds-captured, refund-exceeds-items,
// illegal-transition; 422 invalid-input, idempotency-key-reused.
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(IdempotencyKeyHeader)
	if err := validateIdempotencyKey(key); err != nil {
		s.writeError(w, r, err)
		return
	}
	var params orderly.CreateRefundParams
	if !s.decode(w, r, &params, bodyRequired) {
		return
	}
	params.OrderID = pathParam(r, "id")
	params.IdempotencyKey = key
	params.Actor = actorMerchant
	params.TraceID = TraceIDFromContext(r.Context())
	f, created, err := s.refunds.CreateRefund(r.Context(), &params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := replayed(w, !created)
	if created {
		w.Header().Set("Location", "/v1/orders/"+url.PathEscape(f.OrderID)+"/refunds")
	}
	s.writeJSON(w, r, status, newRefundResponse(f))
}

// listRefunds handles GET /v1/orders/{id}/refunds: {"refunds": [...]}, oldest first.
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	fs, err := s.refunds.OrderRefunds(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &refundsResponse{Refunds: make([]*refundResponse, 0, len(fs))}
	for _, f := range fs {
		resp.Refunds = append(resp.Refunds, newRefundResponse(f))
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// noRefunds answers refund routes of a Server built without a RefundService.
type noRefunds struct{}

func (noRefunds) CreateRefund(context.Context, *orderly.CreateRefundParams) (*orderly.Refund, bool, error) {
	return nil, false, errNoRefunds
}

func (noRefunds) OrderRefunds(context.Context, string) ([]*orderly.Refund, error) {
	return nil, errNoRefunds
}

func (noRefunds) Refund(context.Context, string) (*orderly.Refund, error) {
	return nil, errNoRefunds
}

var errNoRefunds = errors.New("httpapi: Config.Refunds is not set")
