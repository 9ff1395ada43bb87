package httpapi

import (
	"context"
	"net/http"
	"strings"
	"unicode"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// OrderSearcher returns one page of orders matching a filter, by id, and the id to start
// the next page after ("" on the last page); admin.Service implements it.
type OrderSearcher interface {
	SearchOrders(ctx context.Context, p store.OrderSearchParams) ([]*orderly.Order, string, error)
}

// ordersPage is the body of GET /v1/orders.
type ordersPage struct {
	Orders []*orderResponse `json:"orders"`
	// NextAfter is the id of this page's last order when there is a next page: pass it as
	// ?after= (keyset pagination); absent on the last page.
	NextAfter string `json:"next_after,omitempty"`
}

// checkAfter returns EINVALID unless after is the id of one of user's orders, as every
// next_after is: any other key would answer an empty or a wrong page with 200.
func (s *Server) checkAfter(ctx context.Context, user, after string) error {
	o, err := s.orders.Order(ctx, after)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND || (err == nil && o.UserID != user) {
		return invalidf("after must be the next_after of the previous page of this user_id's orders")
	}
	return err
}

// listOrders handles GET /v1/orders?user_id=&state=&flow=&limit=&after=: a buyer's
// orders, oldest first (by id: ids are time-ordered UUIDv7), optionally of one state and
// one flow; limit per page (default 100, at most 1000); after = the next_after of the
// previous page (422 for any other key). Keyset pagination (WHERE id > after, never OFFSET): a page never shifts
// when orders are created or change state. 422 invalid-input without user_id or with a
// bad limit; 404 route-not-found when the server has no order search (Config.OrderSearch,
// Config.Admin).
func (s *Server) listOrders(w http.ResponseWriter, r *http.Request) {
	if s.search == nil {
		s.writeProblem(w, r, CodeRouteNotFound, "the order list is not configured")
		return
	}
	q := r.URL.Query()
	p := store.OrderSearchParams{UserID: q.Get("user_id"), State: orderly.State(q.Get("state")), Flow: q.Get("flow"), AfterID: q.Get("after")}
	var err error
	switch {
	case p.UserID == "":
		err = invalidf("user_id is required: the list is one buyer's orders")
	case len(p.AfterID) > 128 || strings.ContainsFunc(p.AfterID, unicode.IsControl):
		err = invalidf("after must be the next_after of the previous page")
	default:
		p.Limit, err = queryLimit(q)
	}
	if err == nil && p.AfterID != "" {
		err = s.checkAfter(r.Context(), p.UserID, p.AfterID)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	os, next, err := s.search.SearchOrders(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &ordersPage{Orders: make([]*orderResponse, len(os)), NextAfter: next}
	for i, o := range os {
		resp.Orders[i] = newOrderResponse(o)
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}
