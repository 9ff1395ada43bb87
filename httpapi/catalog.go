package httpapi

import (
	"cmp"
	"net/http"
	"net/url"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
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

// adjustRequest is the body of POST /v1/inventory/{sku}/adjustments.
type adjustRequest struct {
	Delta *int64 `json:"delta"`
}

// adjustStock handles POST /v1/inventory/{sku}/adjustments: body {"delta": n}, n ≠ 0, adds n
// units to the SKU's available units (a negative n removes them: a stock count, a loss, a
// delivery); held and sold are kept. 200 with the stock; 404 for an unknown SKU; 409
// out-of-stock when fewer units are available than -n; 422 for a missing or zero delta.
// Send it with an Idempotency-Key: a delta sent twice would count twice.
func (s *Server) adjustStock(w http.ResponseWriter, r *http.Request) {
	var req adjustRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	if req.Delta == nil {
		s.writeError(w, r, invalidf("delta: is required"))
		return
	}
	st, err := s.catalog.AdjustStock(r.Context(), pathParam(r, "sku"), *req.Delta)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, st)
}

// stockPage is the body of GET /v1/inventory.
type stockPage struct {
	Stock []*orderly.Stock `json:"stock"`
	// NextAfter is this page's last SKU when there is a next page: pass it as ?after=;
	// absent on the last page.
	NextAfter string `json:"next_after,omitempty"`
}

// listStock handles GET /v1/inventory?after=&limit=: every SKU's stock, by SKU; limit per
// page (default 100, at most 1000); after = the next_after of the previous page (keyset
// pagination: a SKU added meanwhile never shifts a page). 422 for a bad limit or after.
func (s *Server) listStock(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after := q.Get("after")
	limit, err := queryLimit(q)
	if err == nil && after != "" && !order.ValidID(after) {
		err = invalidf("after must be the next_after of the previous page")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next, err := s.catalog.ListStock(r.Context(), after, cmp.Or(limit, 100))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if list == nil {
		list = []*orderly.Stock{}
	}
	s.writeJSON(w, r, http.StatusOK, &stockPage{Stock: list, NextAfter: next})
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
