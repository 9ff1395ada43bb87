package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/orderlyhq/orderly"
)

// dealResponse is the JSON of an orderly.Deal.
type dealResponse struct {
	ID                          string `json:"id"`
	SKU                         string `json:"sku"`
	GroupPrice                  int64  `json:"group_price"`
	Currency                    string `json:"currency"`
	MinMembers                  int64  `json:"min_members"`
	MaxMembers                  int64  `json:"max_members"`
	GroupTimeLimitSeconds       int64  `json:"group_time_limit_seconds"`
	MemberPaymentTimeoutSeconds int64  `json:"member_payment_timeout_seconds"`
	CreatedAt                   Time   `json:"created_at"`
}

func newDealResponse(d *orderly.Deal) *dealResponse {
	return &dealResponse{ID: d.ID, SKU: d.SKU, GroupPrice: d.GroupPrice, Currency: d.Currency, MinMembers: d.MinMembers,
		MaxMembers: d.MaxMembers, GroupTimeLimitSeconds: d.GroupTimeLimitSeconds,
		MemberPaymentTimeoutSeconds: d.MemberPaymentTimeoutSeconds, CreatedAt: Time(d.CreatedAt)}
}

// memberResponse is the JSON of an orderly.GroupMember.
type memberResponse struct {
	UserID     string            `json:"user_id"`
	OrderID    string            `json:"order_id"`
	OrderState orderly.State     `json:"order_state"`
	PayStatus  orderly.PayStatus `json:"pay_status"`
	JoinedAt   Time              `json:"joined_at"`
	LeftAt     *Time             `json:"left_at,omitempty"`
}

// groupResponse is the JSON of an orderly.Group.
type groupResponse struct {
	ID           string             `json:"id"`
	DealID       string             `json:"deal_id"`
	State        orderly.GroupState `json:"state"`
	LeaderUserID string             `json:"leader_user_id"`
	MinMembers   int64              `json:"min_members"`
	MaxMembers   int64              `json:"max_members"`
	DeadlineAt   Time               `json:"deadline_at"`
	CreatedAt    Time               `json:"created_at"`
	SucceededAt  *Time              `json:"succeeded_at,omitempty"`
	FailedAt     *Time              `json:"failed_at,omitempty"`
	PaidMembers  int64              `json:"paid_members"`
	SeatsTaken   int64              `json:"seats_taken"`
	Members      []*memberResponse  `json:"members"`
	Metadata     orderly.Metadata   `json:"metadata"`
}

func newGroupResponse(g *orderly.Group) *groupResponse {
	members := make([]*memberResponse, len(g.Members))
	for i, m := range g.Members {
		members[i] = &memberResponse{UserID: m.UserID, OrderID: m.OrderID, OrderState: m.OrderState, PayStatus: m.PayStatus,
			JoinedAt: Time(m.JoinedAt), LeftAt: timePtr(m.LeftAt)}
	}
	return &groupResponse{ID: g.ID, DealID: g.DealID, State: g.State, LeaderUserID: g.LeaderUserID, MinMembers: g.MinMembers,
		MaxMembers: g.MaxMembers, DeadlineAt: Time(g.DeadlineAt), CreatedAt: Time(g.CreatedAt), SucceededAt: timePtr(g.SucceededAt),
		FailedAt: timePtr(g.FailedAt), PaidMembers: g.PaidMembers, SeatsTaken: g.SeatsTaken, Members: members,
		Metadata: metadataOut(g.Metadata)}
}

// groupOrderResponse is the answer of opening or joining a group: the group and the
// member order.
type groupOrderResponse struct {
	Group *groupResponse `json:"group"`
	Order *orderResponse `json:"order"`
}

// openGroupRequest is the body of POST /v1/groups.
type openGroupRequest struct {
	DealID        string           `json:"deal_id"`
	UserID        string           `json:"user_id"`
	Quantity      *int64           `json:"quantity,omitempty"` // absent means 1; 0 is refused
	CouponID      string           `json:"coupon_id,omitempty"`
	Metadata      orderly.Metadata `json:"metadata,omitempty"`       // the member order's
	GroupMetadata orderly.Metadata `json:"group_metadata,omitempty"` // the group's
}

// joinGroupRequest is the body of POST /v1/groups/{id}/join.
type joinGroupRequest struct {
	UserID   string           `json:"user_id"`
	Quantity *int64           `json:"quantity,omitempty"` // absent means 1; 0 is refused
	CouponID string           `json:"coupon_id,omitempty"`
	Metadata orderly.Metadata `json:"metadata,omitempty"` // the member order's
}

// memberQuantity returns the quantity of an open or join request: 0 (the service's "1")
// when absent. Errors: EINVALID for an explicit quantity below 1 (the OpenAPI document's
// minimum), which the service would otherwise read as absent.
func memberQuantity(q *int64) (int64, error) {
	switch {
	case q == nil:
		return 0, nil
	case *q < 1:
		return 0, orderly.Errorf(orderly.EINVALID, "quantity must be at least 1 (absent means 1), got %d", *q)
	}
	return *q, nil
}

// leaveGroupRequest is the body of POST /v1/groups/{id}/leave.
type leaveGroupRequest struct {
	UserID string `json:"user_id"`
}

// createDeal handles POST /v1/deals: body orderly.CreateDealParams; 201 with the deal.
func (s *Server) createDeal(w http.ResponseWriter, r *http.Request) {
	var params orderly.CreateDealParams
	if !s.decode(w, r, &params, bodyRequired) {
		return
	}
	d, err := s.groups.CreateDeal(r.Context(), &params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/deals/"+url.PathEscape(d.ID))
	s.writeJSON(w, r, http.StatusCreated, newDealResponse(d))
}

// getDeal handles GET /v1/deals/{id}.
func (s *Server) getDeal(w http.ResponseWriter, r *http.Request) {
	d, err := s.groups.Deal(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newDealResponse(d))
}

// openGroup handles POST /v1/groups: 201 with the group and the leader's member order;
// 200 on an idempotent replay (Idempotency-Key).
func (s *Server) openGroup(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(IdempotencyKeyHeader)
	if err := validateIdempotencyKey(key); err != nil {
		s.writeError(w, r, err)
		return
	}
	var req openGroupRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	quantity, err := memberQuantity(req.Quantity)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.admitMember(w, r, s.groups.OpenGroup, &orderly.JoinGroupParams{DealID: req.DealID, UserID: req.UserID,
		Quantity: quantity, CouponID: req.CouponID, Metadata: req.Metadata, GroupMetadata: req.GroupMetadata, IdempotencyKey: key})
}

// joinGroup handles POST /v1/groups/{id}/join: 201 with the group and the new member
// order; 200 on an idempotent replay.
func (s *Server) joinGroup(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(IdempotencyKeyHeader)
	if err := validateIdempotencyKey(key); err != nil {
		s.writeError(w, r, err)
		return
	}
	var req joinGroupRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	quantity, err := memberQuantity(req.Quantity)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.admitMember(w, r, s.groups.JoinGroup, &orderly.JoinGroupParams{GroupID: pathParam(r, "id"), UserID: req.UserID,
		Quantity: quantity, CouponID: req.CouponID, Metadata: req.Metadata, IdempotencyKey: key})
}

// admitMember runs an open or a join and writes its answer.
func (s *Server) admitMember(w http.ResponseWriter, r *http.Request,
	fn func(context.Context, *orderly.JoinGroupParams) (*orderly.Group, *orderly.Order, bool, error), p *orderly.JoinGroupParams) {
	p.Actor, p.TraceID = actorBuyer, TraceIDFromContext(r.Context())
	g, o, created, err := fn(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := replayed(w, !created)
	if created {
		w.Header().Set("Location", "/v1/groups/"+url.PathEscape(g.ID))
	}
	s.writeJSON(w, r, status, &groupOrderResponse{Group: newGroupResponse(g), Order: newOrderResponse(o)})
}

// leaveGroup handles POST /v1/groups/{id}/leave: 200 with the group.
func (s *Server) leaveGroup(w http.ResponseWriter, r *http.Request) {
	var req leaveGroupRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	g, err := s.groups.LeaveGroup(r.Context(), pathParam(r, "id"), req.UserID, actorBuyer, TraceIDFromContext(r.Context()))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newGroupResponse(g))
}

// getGroup handles GET /v1/groups/{id}.
func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) {
	g, err := s.groups.Group(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newGroupResponse(g))
}

// noGroups answers the group-buy routes of a server built without a GroupService.
type noGroups struct{}

var errNoGroups = orderly.Errorf(orderly.ENOTFOUND, "group-buy is not enabled on this server")

func (noGroups) CreateDeal(context.Context, *orderly.CreateDealParams) (*orderly.Deal, error) {
	return nil, errNoGroups
}
func (noGroups) Deal(context.Context, string) (*orderly.Deal, error) { return nil, errNoGroups }
func (noGroups) OpenGroup(context.Context, *orderly.JoinGroupParams) (*orderly.Group, *orderly.Order, bool, error) {
	return nil, nil, false, errNoGroups
}
func (noGroups) JoinGroup(context.Context, *orderly.JoinGroupParams) (*orderly.Group, *orderly.Order, bool, error) {
	return nil, nil, false, errNoGroups
}
func (noGroups) LeaveGroup(context.Context, string, string, string, string) (*orderly.Group, error) {
	return nil, errNoGroups
}
func (noGroups) Group(context.Context, string) (*orderly.Group, error) { return nil, errNoGroups }
