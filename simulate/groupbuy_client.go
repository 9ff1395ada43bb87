package simulate

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/orderlyhq/orderly"
)

// The group-buy HTTP contract (docs/flows/group-buy.md): deals, groups and their member
// orders, which are ordinary orders of flow group_buy.

// States and reasons of the group_buy flow that the standard flow does not have.
const (
	stateGroupSucceeded    orderly.State       = "group_succeeded"
	stateGroupFailed       orderly.State       = "group_failed"
	closeReasonGroupFailed orderly.CloseReason = "group_failed"
	flowGroupBuy                               = "group_buy"
)

// Group states.
const (
	groupForming   = "forming"
	groupSucceeded = "succeeded"
	groupFailed    = "failed"
)

// Problem codes of refused seats.
const (
	codeGroupFull       = "group-full"
	codeGroupNotForming = "group-not-forming"
	codeGroupExpired    = "group-expired"
	codeAlreadyMember   = "already-member"
)

// dealRequest is the body of POST /v1/deals.
type dealRequest struct {
	SKU                         string `json:"sku"`
	GroupPrice                  int64  `json:"group_price"`
	Currency                    string `json:"currency"`
	MinMembers                  int    `json:"min_members"`
	MaxMembers                  int    `json:"max_members"`
	GroupTimeLimitSeconds       int64  `json:"group_time_limit_seconds"`
	MemberPaymentTimeoutSeconds int64  `json:"member_payment_timeout_seconds,omitempty"`
}

// deal is a deal as the server shows it.
type deal struct {
	ID                          string    `json:"id"`
	SKU                         string    `json:"sku"`
	GroupPrice                  int64     `json:"group_price"`
	Currency                    string    `json:"currency"`
	MinMembers                  int       `json:"min_members"`
	MaxMembers                  int       `json:"max_members"`
	GroupTimeLimitSeconds       int64     `json:"group_time_limit_seconds"`
	MemberPaymentTimeoutSeconds int64     `json:"member_payment_timeout_seconds"`
	CreatedAt                   time.Time `json:"created_at"`
}

// group is a group as the server shows it.
type group struct {
	ID           string        `json:"id"`
	DealID       string        `json:"deal_id"`
	State        string        `json:"state"`
	LeaderUserID string        `json:"leader_user_id"`
	MinMembers   int           `json:"min_members"`
	MaxMembers   int           `json:"max_members"`
	DeadlineAt   time.Time     `json:"deadline_at"`
	CreatedAt    time.Time     `json:"created_at"`
	SucceededAt  *time.Time    `json:"succeeded_at,omitempty"`
	FailedAt     *time.Time    `json:"failed_at,omitempty"`
	PaidMembers  int           `json:"paid_members"`
	SeatsTaken   int           `json:"seats_taken"`
	Members      []groupMember `json:"members"`
}

// groupMember is one seat of a group.
type groupMember struct {
	UserID     string            `json:"user_id"`
	OrderID    string            `json:"order_id"`
	OrderState orderly.State     `json:"order_state"`
	PayStatus  orderly.PayStatus `json:"pay_status"`
	JoinedAt   time.Time         `json:"joined_at"`
	LeftAt     *time.Time        `json:"left_at,omitempty"`
}

// seat is the answer to opening or joining a group.
type seat struct {
	Group *group         `json:"group"`
	Order *orderly.Order `json:"order"`
}

// seatRequest is the body of POST /v1/groups and POST /v1/groups/{id}/join.
type seatRequest struct {
	DealID string `json:"deal_id,omitempty"`
	UserID string `json:"user_id"`
}

func (c *client) createDeal(ctx context.Context, req *dealRequest) (*deal, error) {
	var d deal
	err := c.do(ctx, http.MethodPost, "/v1/deals", req, nil, &d)
	if err == nil && d.ID == "" {
		err = &httpError{Method: http.MethodPost, Path: "/v1/deals", Status: http.StatusCreated, Err: fmt.Errorf("answer has no deal id")}
	}
	return &d, err
}

// takeSeat opens a group (groupID "") or joins one, with an Idempotency-Key.
func (c *client) takeSeat(ctx context.Context, groupID string, req *seatRequest, key string) (*seat, error) {
	path := "/v1/groups"
	if groupID != "" {
		path += "/" + url.PathEscape(groupID) + "/join"
	}
	var s seat
	_, err := c.send(ctx, http.MethodPost, path, req, http.Header{"Idempotency-Key": {key}}, &s)
	if err == nil && (s.Group == nil || s.Order == nil || s.Order.ID == "" || s.Group.ID == "") {
		err = &httpError{Method: http.MethodPost, Path: path, Status: http.StatusCreated, Err: fmt.Errorf("answer has no group or order")}
	}
	return &s, err
}

func (c *client) leaveGroup(ctx context.Context, groupID, userID string) (*group, error) {
	var g group
	return &g, c.do(ctx, http.MethodPost, "/v1/groups/"+url.PathEscape(groupID)+"/leave", map[string]string{"user_id": userID}, nil, &g)
}

func (c *client) group(ctx context.Context, id string) (*group, error) {
	var g group
	return &g, c.do(ctx, http.MethodGet, "/v1/groups/"+url.PathEscape(id), nil, nil, &g)
}

// orderEvent sends a merchant event (ship, complete) that moves an order to state to. A
// request sent again (an instance died after applying it but before answering) that is
// refused 409 illegal-transition while the order is in state to took effect on its first
// try: the order is answered as read then.
func (c *client) orderEvent(ctx context.Context, orderID string, event orderly.Event, to orderly.State) (*orderly.Order, error) {
	var o orderly.Order
	err := c.do(ctx, http.MethodPost, "/v1/orders/"+url.PathEscape(orderID)+"/events", map[string]orderly.Event{"event": event}, nil, &o)
	if !maybeAppliedBefore(err) {
		return &o, err
	}
	now, gerr := c.order(ctx, orderID)
	if gerr != nil || now.State != to {
		return &o, err
	}
	return now, nil
}
