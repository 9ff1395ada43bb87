package httpapi

import (
	"net/http"
	"net/url"

	"github.com/orderlyhq/orderly"
)

// stockRequest is the body of PUT /v1/inventory/{sku}.
type stockRequest struct {
	Available *int64 `json:"available"`
}

// setStock handles PUT /v1/inventory/{sku}: body {"available": n} with n >= 0 sets the
// SKU's available units (creating it); held and sold are kept. 200 with the stock.
func (s *Server) setStock(w http.ResponseWriter, r *http.Request) {
	var req stockRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	switch {
	case req.Available == nil:
		s.writeError(w, r, invalidf("available: is required"))
		return
	case *req.Available < 0:
		s.writeError(w, r, invalidf("available: must not be negative"))
		return
	}
	st, err := s.catalog.SetStock(r.Context(), pathParam(r, "sku"), *req.Available)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, st)
}

// getStock handles GET /v1/inventory/{sku}: {"sku","available","held","sold"}.
func (s *Server) getStock(w http.ResponseWriter, r *http.Request) {
	st, err := s.catalog.Stock(r.Context(), pathParam(r, "sku"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, st)
}

// couponRequest is the body of POST /v1/coupons: orderly.CreateCouponParams with the
// optional expiry as a string, so that a malformed time is reported with its field name.
type couponRequest struct {
	UserID    string  `json:"user_id"`
	AmountOff int64   `json:"amount_off"`
	Currency  string  `json:"currency"`
	ExpiresAt *string `json:"expires_at,omitempty"`
}

// createCoupon handles POST /v1/coupons: 201 with the coupon.
func (s *Server) createCoupon(w http.ResponseWriter, r *http.Request) {
	var req couponRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	params := &orderly.CreateCouponParams{UserID: req.UserID, AmountOff: req.AmountOff, Currency: req.Currency}
	if req.ExpiresAt != nil {
		t, err := parseTime("expires_at", *req.ExpiresAt)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		params.ExpiresAt = &t
	}
	c, err := s.catalog.CreateCoupon(r.Context(), params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/coupons/"+url.PathEscape(c.ID))
	s.writeJSON(w, r, http.StatusCreated, newCouponResponse(c))
}

// getCoupon handles GET /v1/coupons/{id}.
func (s *Server) getCoupon(w http.ResponseWriter, r *http.Request) {
	c, err := s.catalog.Coupon(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newCouponResponse(c))
}
