package orderly

import (
	"context"
	"time"
)

// GroupState is the state of a group-buy group: forming until its paid members reach the
// deal's minimum (succeeded) or its deadline passes first (failed). See docs/flows/group-buy.md.
type GroupState string

// Group states.
const (
	GroupForming   GroupState = "forming"   // taking members; its deadline is a timed state
	GroupSucceeded GroupState = "succeeded" // min_members paid before the deadline (terminal)
	GroupFailed    GroupState = "failed"    // the deadline passed while forming (terminal)
)

// Deal is a group-buy offer: one SKU at GroupPrice (minor units of Currency) per unit, for
// groups of MinMembers to MaxMembers members that form within GroupTimeLimitSeconds of
// their opening. A member has MemberPaymentTimeoutSeconds to pay, capped by the group's
// deadline.
type Deal struct {
	ID                          string    `json:"id"`
	SKU                         string    `json:"sku"`
	GroupPrice                  int64     `json:"group_price"`
	Currency                    string    `json:"currency"`
	MinMembers                  int64     `json:"min_members"`
	MaxMembers                  int64     `json:"max_members"`
	GroupTimeLimitSeconds       int64     `json:"group_time_limit_seconds"`
	MemberPaymentTimeoutSeconds int64     `json:"member_payment_timeout_seconds"`
	CreatedAt                   time.Time `json:"created_at"`
}

// Group is one group of a deal. DeadlineAt is when it fails if still forming (database
// clock). PaidMembers counts the members whose payment was applied while the group took
// them (a paid member who left is no longer counted); SeatsTaken counts the members that
// hold a seat: not left and whose order was not closed unpaid.
type Group struct {
	ID           string         `json:"id"`
	DealID       string         `json:"deal_id"`
	State        GroupState     `json:"state"`
	LeaderUserID string         `json:"leader_user_id"`
	MinMembers   int64          `json:"min_members"`
	MaxMembers   int64          `json:"max_members"`
	DeadlineAt   time.Time      `json:"deadline_at"`
	CreatedAt    time.Time      `json:"created_at"`
	SucceededAt  *time.Time     `json:"succeeded_at,omitempty"`
	FailedAt     *time.Time     `json:"failed_at,omitempty"`
	PaidMembers  int64          `json:"paid_members"`
	SeatsTaken   int64          `json:"seats_taken"`
	Version      int64          `json:"version"`
	Members      []*GroupMember `json:"members"`
	// Metadata is the merchant's own data (set at open, changed by PATCH).
	Metadata Metadata `json:"metadata,omitempty"`
}

// GroupMember is a member of a group: a user and the member order (flow group_buy) that
// holds the seat. LeftAt is when the seat was given up: the member left, or the member
// order was closed unpaid (payment timeout, buyer cancel) while the group was forming.
type GroupMember struct {
	GroupID    string     `json:"group_id"`
	UserID     string     `json:"user_id"`
	OrderID    string     `json:"order_id"`
	OrderState State      `json:"order_state"`
	PayStatus  PayStatus  `json:"pay_status"`
	JoinedAt   time.Time  `json:"joined_at"`
	LeftAt     *time.Time `json:"left_at,omitempty"`
}

// CreateDealParams is the input of GroupService.CreateDeal.
type CreateDealParams struct {
	SKU                   string `json:"sku"`
	GroupPrice            int64  `json:"group_price"`
	Currency              string `json:"currency"`
	MinMembers            int64  `json:"min_members"`
	MaxMembers            int64  `json:"max_members"`
	GroupTimeLimitSeconds int64  `json:"group_time_limit_seconds"`
	// MemberPaymentTimeoutSeconds is a member's time to pay; 0 means the group time limit.
	MemberPaymentTimeoutSeconds int64 `json:"member_payment_timeout_seconds,omitempty"`
}

// JoinGroupParams is the input of GroupService.OpenGroup (DealID) and JoinGroup (GroupID).
type JoinGroupParams struct {
	DealID   string `json:"deal_id,omitempty"`
	GroupID  string `json:"-"`
	UserID   string `json:"user_id"`
	Quantity int64  `json:"quantity,omitempty"` // units of the deal's SKU; 0 means 1
	CouponID string `json:"coupon_id,omitempty"`
	// Metadata is the member order's own data; GroupMetadata the group's, at open only
	// (EINVALID on a join). Metadata's bounds apply to each.
	Metadata      Metadata `json:"metadata,omitempty"`
	GroupMetadata Metadata `json:"group_metadata,omitempty"`
	// IdempotencyKey, when set, makes the call idempotent per user, as for orders.
	IdempotencyKey string `json:"-"`
	Actor          string `json:"-"`
	TraceID        string `json:"-"`
}

// GroupService runs group-buy deals and groups (docs/flows/group-buy.md).
type GroupService interface {
	// CreateDeal validates and stores a deal. Errors: EINVALID.
	CreateDeal(ctx context.Context, params *CreateDealParams) (*Deal, error)
	// Deal returns one deal. Errors: ENOTFOUND.
	Deal(ctx context.Context, id string) (*Deal, error)
	// OpenGroup opens a group of params.DealID with the leader's member order, in one
	// transaction. created=false on an idempotent replay. Errors: EINVALID, ENOTFOUND (no
	// such deal), EOUTOFSTOCK, ECOUPONUNAVAIL, EIDEMPOTENCY.
	OpenGroup(ctx context.Context, params *JoinGroupParams) (group *Group, order *Order, created bool, err error)
	// JoinGroup adds a member order to group params.GroupID, with the group row locked.
	// Errors: EINVALID, ENOTFOUND, EGROUPFULL, EGROUPNOTFORMING, EGROUPEXPIRED (the deadline
	// passed on the database clock, even before the failure ran), EALREADYMEMBER,
	// EOUTOFSTOCK, ECOUPONUNAVAIL, EIDEMPOTENCY.
	JoinGroup(ctx context.Context, params *JoinGroupParams) (group *Group, order *Order, created bool, err error)
	// LeaveGroup gives up userID's seat in a forming group: an unpaid member order is
	// cancelled (buyer_cancelled), a paid one refunded in full. Errors: EINVALID (userID not
	// a valid id, e.g. empty), ENOTFOUND (no such group or not a member), EGROUPNOTFORMING, EGROUPEXPIRED, ECONFLICT.
	LeaveGroup(ctx context.Context, groupID, userID, actor, traceID string) (*Group, error)
	// Group returns a group with its members. Errors: ENOTFOUND.
	Group(ctx context.Context, id string) (*Group, error)
}
