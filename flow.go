package orderly

import (
	"fmt"
	"slices"
)

// Event triggers a transition of an order's state.
type Event string

// Events of the built-in flows.
const (
	EventPay            Event = "pay"             // a payment succeeded
	EventTimeout        Event = "timeout"         // close_at passed unpaid
	EventCancel         Event = "cancel"          // the buyer cancelled before paying
	EventShip           Event = "ship"            // the merchant shipped
	EventComplete       Event = "complete"        // the buyer received the goods
	EventRefund         Event = "refund"          // a refund that returns the rest of the captured amount was requested
	EventRefundComplete Event = "refund_complete" // the gateway confirmed the last refund: everything captured went back
	// EventPartialRefund records a confirmed partial refund (pay_status → partially_refunded)
	// without a change of state.
	EventPartialRefund Event = "partial_refund"
)

// FlowTransition is one row of a flow's table: in state From, Event moves the order to To.
type FlowTransition struct {
	From  State
	Event Event
	To    State
}

// Flow is a table-driven state machine. An order's state may change only along a row of its
// flow's table; everything else is an illegal transition. New kinds of orders (group-buy,
// ride-hailing) are new tables, not new code paths.
type Flow struct {
	Name        string
	Initial     State
	Transitions []FlowTransition
}

// Next returns the state that event moves an order in state from to. It returns an *Error
// with code EILLEGAL when the flow has no such transition (including from a terminal state).
func (f *Flow) Next(from State, event Event) (State, error) {
	for _, t := range f.Transitions {
		if t.From == from && t.Event == event {
			return t.To, nil
		}
	}
	return "", Errorf(EILLEGAL, "flow %s has no transition from %s on %s", f.Name, from, event)
}

// States returns every state that appears in the flow's table, initial state first.
func (f *Flow) States() []State {
	states := []State{f.Initial}
	for _, t := range f.Transitions {
		for _, s := range []State{t.From, t.To} {
			if !slices.Contains(states, s) {
				states = append(states, s)
			}
		}
	}
	return states
}

// Terminal reports whether no transition leaves state s.
func (f *Flow) Terminal(s State) bool {
	for _, t := range f.Transitions {
		if t.From == s {
			return false
		}
	}
	return true
}

// FlowStandard is the name of the standard e-commerce flow, the default.
const FlowStandard = "standard"

// StandardFlow is the standard e-commerce flow:
//
//	pending_payment --pay--> paid --ship--> shipped --complete--> completed
//	pending_payment --timeout|cancel--> closed
//	paid|shipped|completed --refund--> refunding --refund_complete--> refunded
//	paid|shipped|completed|refunding --partial_refund--> (same state)
//
// Refunds (see orderly.Refund): a refund that brings the refunded total to the captured
// amount (a full refund, or the partial one that completes it) fires refund when it is
// requested; the order becomes refunded when the gateway has confirmed every refund of it.
// A confirmed refund that leaves money captured fires partial_refund: the state stays,
// pay_status becomes partially_refunded. So completed is terminal only for shipping: a
// return after completion still refunds it.
var StandardFlow = &Flow{
	Name:    FlowStandard,
	Initial: StatePendingPayment,
	Transitions: []FlowTransition{
		{StatePendingPayment, EventPay, StatePaid},
		{StatePendingPayment, EventTimeout, StateClosed},
		{StatePendingPayment, EventCancel, StateClosed},
		{StatePaid, EventShip, StateShipped},
		{StateShipped, EventComplete, StateCompleted},
		{StatePaid, EventRefund, StateRefunding},
		{StateShipped, EventRefund, StateRefunding},
		{StateCompleted, EventRefund, StateRefunding},
		{StateRefunding, EventRefundComplete, StateRefunded},
		{StatePaid, EventPartialRefund, StatePaid},
		{StateShipped, EventPartialRefund, StateShipped},
		{StateCompleted, EventPartialRefund, StateCompleted},
		{StateRefunding, EventPartialRefund, StateRefunding},
	},
}

// Flows is a registry of flows by name.
type Flows map[string]*Flow

// DefaultFlows returns the registry of built-in flows.
func DefaultFlows() Flows {
	return Flows{FlowStandard: StandardFlow}
}

// Get returns the named flow, or an *Error with code EINVALID if there is none.
func (fs Flows) Get(name string) (*Flow, error) {
	if f, ok := fs[name]; ok {
		return f, nil
	}
	return nil, Errorf(EINVALID, "unknown flow %q", name)
}

// String implements fmt.Stringer.
func (t FlowTransition) String() string { return fmt.Sprintf("%s --%s--> %s", t.From, t.Event, t.To) }
