package groupbuy

import (
	"github.com/orderlyhq/orderly"
)

// FlowName is the name of the group-buy order flow.
const FlowName = "group_buy"

// States of member orders besides the standard ones.
const (
	// StateGroupSucceeded: paid, and the group reached min_members before its deadline;
	// the order may ship.
	StateGroupSucceeded orderly.State = "group_succeeded"
	// StateGroupFailed: paid, and the group's deadline passed first; a full refund is
	// requested in the same transaction (the order moves on to refunding).
	StateGroupFailed orderly.State = "group_failed"
)

// Events of member orders besides the standard ones.
const (
	EventGroupSucceed orderly.Event = "group_succeed" // the member's group succeeded
	EventGroupFail    orderly.Event = "group_fail"    // the member's group failed at its deadline
	EventLeave        orderly.Event = "leave"         // a paid member left a forming group
)

// CloseReasonGroupFailed closes an unpaid member order whose group failed.
const CloseReasonGroupFailed orderly.CloseReason = "group_failed"

// Event topics of member orders besides the standard ones (key: order id; payload
// orderly.OrderEvent).
const (
	TopicOrderGroupSucceeded = "order.group_succeeded"
	TopicOrderGroupFailed    = "order.group_failed"
)

// Effects of the group-buy flow, implemented by Effects.
const (
	// EffectLockGroup locks the groups of the candidate orders before the order rows (the
	// lock order of docs/flows/group-buy.md).
	EffectLockGroup = orderly.EffectLock + "group"
	// EffectMemberPaid counts the payment in the group and, when it brings the paid members
	// to min_members before the deadline (database clock), moves the group to succeeded and
	// every paid member to group_succeeded; after a success it moves the order there too.
	EffectMemberPaid = "group_member_paid"
	// EffectSeatFree gives up the member's seat (a member order closed unpaid, or a member
	// who left).
	EffectSeatFree = "group_seat_free"
)

// closeEffects are the effects of closing an unpaid member order while its group takes
// members (payment timeout, buyer cancel): publish, free the seat, release (stock last, as
// orderly.CloseEffects).
var closeEffects = []string{orderly.EffectPublish + orderly.TopicOrderClosed, orderly.EffectCancelPayment, EffectSeatFree,
	orderly.EffectReleaseReservations, orderly.EffectReleaseCoupon}

// Flow is the group-buy order flow (docs/flows/group-buy.md):
//
//	pending_payment --pay--> paid                  (commit, use coupon, count the payment in the group)
//	pending_payment --timeout|cancel--> closed     (release stock and coupon, free the seat)
//	pending_payment --group_fail--> closed         (close reason group_failed; release)
//	paid --group_succeed--> group_succeeded --ship--> shipped --complete--> completed
//	paid --group_fail--> group_failed --refund--> refunding --refund_complete--> refunded
//	paid --leave--> refunding                      (a paid member leaves a forming group)
//	group_succeeded|shipped|completed: refunds as in the standard flow
//
// Nothing ships before the group succeeded: paid has no ship transition, and no refund
// either (a paid member of a forming group leaves instead).
var Flow = &orderly.Flow{
	Name:      FlowName,
	Initial:   orderly.StatePendingPayment,
	Managed:   true, // member orders are made with their group's rows (Service)
	CreatedBy: "POST /v1/groups, POST /v1/groups/{id}/join",
	Transitions: []orderly.FlowTransition{
		// The deal's stock row, which every join and payment of the deal needs, is taken
		// last: the payment is counted (and the group's success applied) before the
		// reservations are committed.
		{From: orderly.StatePendingPayment, Event: orderly.EventPay, To: orderly.StatePaid, Effects: []string{
			EffectLockGroup, orderly.EffectPublish + orderly.TopicOrderPaid, EffectMemberPaid,
			orderly.EffectCommitReservations, orderly.EffectUseCoupon}},
		{From: orderly.StatePendingPayment, Event: orderly.EventTimeout, To: orderly.StateClosed, Effects: closeEffects},
		{From: orderly.StatePendingPayment, Event: orderly.EventCancel, To: orderly.StateClosed, Effects: closeEffects},
		{From: orderly.StatePendingPayment, Event: EventGroupFail, To: orderly.StateClosed, Effects: []string{
			orderly.EffectPublish + orderly.TopicOrderClosed, orderly.EffectCancelPayment, orderly.EffectReleaseReservations,
			orderly.EffectReleaseCoupon}},
		{From: orderly.StatePaid, Event: EventGroupSucceed, To: StateGroupSucceeded, Effects: []string{
			orderly.EffectPublish + TopicOrderGroupSucceeded}},
		{From: orderly.StatePaid, Event: EventGroupFail, To: StateGroupFailed, Effects: []string{
			orderly.EffectPublish + TopicOrderGroupFailed, orderly.EffectRefundPayment}},
		{From: orderly.StatePaid, Event: EventLeave, To: orderly.StateRefunding, Effects: []string{
			EffectSeatFree, orderly.EffectRefundPayment}},
		{From: StateGroupFailed, Event: orderly.EventRefund, To: orderly.StateRefunding},
		{From: StateGroupSucceeded, Event: orderly.EventShip, To: orderly.StateShipped},
		{From: orderly.StateShipped, Event: orderly.EventComplete, To: orderly.StateCompleted},
		{From: StateGroupSucceeded, Event: orderly.EventRefund, To: orderly.StateRefunding},
		{From: orderly.StateShipped, Event: orderly.EventRefund, To: orderly.StateRefunding},
		{From: orderly.StateCompleted, Event: orderly.EventRefund, To: orderly.StateRefunding},
		{From: orderly.StateRefunding, Event: orderly.EventRefundComplete, To: orderly.StateRefunded},
		{From: StateGroupSucceeded, Event: orderly.EventPartialRefund, To: StateGroupSucceeded},
		{From: orderly.StateShipped, Event: orderly.EventPartialRefund, To: orderly.StateShipped},
		{From: orderly.StateCompleted, Event: orderly.EventPartialRefund, To: orderly.StateCompleted},
		{From: orderly.StateRefunding, Event: orderly.EventPartialRefund, To: orderly.StateRefunding},
	},
	Timed: []orderly.TimedState{
		{State: orderly.StatePendingPayment, Deadline: orderly.DeadlinePayment, Event: orderly.EventTimeout, CloseReason: orderly.CloseReasonPaymentTimeout},
	},
}
