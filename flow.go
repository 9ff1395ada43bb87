package orderly

import (
	"fmt"
	"slices"
	"strings"
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

// FlowTransition is one row of a flow's table: in state From, Event moves the order to To
// and runs Effects.
type FlowTransition struct {
	From  State
	Event Event
	To    State
	// Effects names what the transition does besides changing the state, in order: effects
	// registered by the packages that own the resources (order.Effects: release_reservations,
	// commit_reservations, release_coupon, use_coupon; a flow's own package adds its own), and
	// "publish:<topic>" (EffectPublish) for an event about the order. Every effect runs in the
	// transition's own transaction, on the orders that changed: local resources are updated
	// there, and whatever leaves the database (events, gateway calls) is written to the
	// transactional outbox there. See docs/concepts/orders-and-flows.md.
	Effects []string
}

// EffectPublish is the prefix of the effect that publishes an event about the order:
// "publish:order.closed" writes an OrderEvent (order id, new state, close reason, time) to
// the outbox under topic order.closed, keyed by the order id, with the order's next event
// sequence.
const EffectPublish = "publish:"

// EffectLock is the prefix of an effect that runs before the transition's guarded update,
// on the candidate orders (not only those that will change): "lock:group" locks the
// group-buy group of the orders. A flow whose effects change a row shared by several
// orders (a group) locks it there, so that every transaction takes the shared row before
// the order rows and two of them can never wait for each other (docs/flows/group-buy.md).
// A lock effect must change nothing.
const EffectLock = "lock:"

// Deadline names the deadline of a timed state: which of an order's times decides when
// its timed event fires.
type Deadline string

// Deadlines of orders.
const (
	// DeadlinePayment is the order's close_at: its payment deadline (expires_at) plus the
	// grace period. Before it, the timed event never fires (I1).
	DeadlinePayment Deadline = "close_at"
)

// TimedState declares that an order waiting in State has a deadline: when Deadline passes
// (on the database clock), the closer fires Event on it through the flow's table, with
// CloseReason when the transition closes the order. While the order has an in-flight
// payment (pay_status paying) at the deadline, its payment is inspected first (docs/concepts/deadlines-and-closing.md).
type TimedState struct {
	State       State
	Deadline    Deadline
	Event       Event
	CloseReason CloseReason
}

// Flow is a table-driven state machine. An order's state may change only along a row of its
// flow's table; everything else is an illegal transition. New kinds of orders (group-buy,
// ride-hailing) are new tables, not new code paths: the closer, the transition function and
// the relay read Timed and Effects and have no flow-specific code (docs/concepts/orders-and-flows.md).
type Flow struct {
	Name        string
	Initial     State
	Transitions []FlowTransition
	// Timed lists the states that have a deadline; at most one entry per state.
	Timed []TimedState
	// Managed says that the flow's orders are created only by the flow's own package,
	// together with its own rows (group_buy member orders through package groupbuy),
	// never by OrderService.CreateOrder, which refuses them (EINVALID).
	Managed bool
	// CreatedBy names, for a Managed flow, where its orders are created ("POST /v1/trips"):
	// CreateOrder's refusal says it.
	CreatedBy string
	// ServedBy names, when set, the route that changes the flow's orders in place of the
	// order routes ("/v1/trips/{id}"): CancelOrder, ApplyEvent, CreateRefund and StartPayment
	// refuse its orders with EWRONGFLOW naming it (CheckOrderRoutes), for the flow's own
	// service keeps rows the order routes do not (a trip's hold and fare).
	ServedBy string
}

// CheckOrderRoutes returns nil when the order routes may change order id of flow f, else
// an EWRONGFLOW error naming the route that serves it (f.ServedBy, with id in place of {id}).
func (f *Flow) CheckOrderRoutes(id string) error {
	if f.ServedBy == "" {
		return nil
	}
	return Errorf(EWRONGFLOW, "order %s is of flow %s, which the order routes do not change; use %s",
		id, f.Name, strings.ReplaceAll(f.ServedBy, "{id}", id))
}

// Next returns the state that event moves an order in state from to. It returns an *Error
// with code EILLEGAL when the flow has no such transition (including from a terminal state).
func (f *Flow) Next(from State, event Event) (State, error) {
	t, err := f.Transition(from, event)
	if err != nil {
		return "", err
	}
	return t.To, nil
}

// Transition returns the row of the table that event takes from state from. It returns an
// *Error with code EILLEGAL when the flow has no such transition.
func (f *Flow) Transition(from State, event Event) (*FlowTransition, error) {
	for i := range f.Transitions {
		if t := &f.Transitions[i]; t.From == from && t.Event == event {
			return t, nil
		}
	}
	return nil, Errorf(EILLEGAL, "flow %s has no transition from %s on %s", f.Name, from, event)
}

// TimedIn returns the timed state entry of s; ok=false when s has no deadline.
func (f *Flow) TimedIn(s State) (ts TimedState, ok bool) {
	for _, t := range f.Timed {
		if t.State == s {
			return t, true
		}
	}
	return TimedState{}, false
}

// Validate checks the flow's shape: a name and an initial state, no two rows for one
// (state, event), every timed state in the table with a known deadline and a transition
// for its event, and no empty effect name. It returns an *Error with code EINVALID.
func (f *Flow) Validate() error {
	if f.Name == "" || f.Initial == "" {
		return Errorf(EINVALID, "flow %q: a flow needs a name and an initial state", f.Name)
	}
	seen := map[[2]string]bool{}
	for _, t := range f.Transitions {
		k := [2]string{string(t.From), string(t.Event)}
		if seen[k] {
			return Errorf(EINVALID, "flow %s: two transitions from %s on %s", f.Name, t.From, t.Event)
		}
		seen[k] = true
		for _, e := range t.Effects {
			if e == "" || e == EffectPublish || e == EffectLock {
				return Errorf(EINVALID, "flow %s: %s has an empty effect name", f.Name, t)
			}
		}
	}
	timed := map[State]bool{}
	for _, ts := range f.Timed {
		if timed[ts.State] {
			return Errorf(EINVALID, "flow %s: state %s is timed twice", f.Name, ts.State)
		}
		timed[ts.State] = true
		if ts.Deadline != DeadlinePayment {
			return Errorf(EINVALID, "flow %s: state %s has unknown deadline %q", f.Name, ts.State, ts.Deadline)
		}
		if _, err := f.Transition(ts.State, ts.Event); err != nil {
			return Errorf(EINVALID, "flow %s: timed state %s fires %s, which has no transition", f.Name, ts.State, ts.Event)
		}
	}
	return nil
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

// Effects of the built-in flows, implemented by package order (order.Effects).
const (
	EffectReleaseReservations = "release_reservations" // held reservations → released, units back to available
	EffectCommitReservations  = "commit_reservations"  // held reservations → committed, units held → sold
	EffectReleaseCoupon       = "release_coupon"       // the coupon the order froze → available (expired past its expiry)
	EffectUseCoupon           = "use_coupon"           // the coupon the order froze → used
	// EffectCancelPayment settles the payment attempt of an order closed while it was in
	// flight (pay_status still paying after the close: a close forced past the inspection
	// hold, a group's failure): a payment.cancel message asks the gateway after the commit,
	// cancels the attempt if it is pending, refunds it if it was captured (the order is
	// closed), marks it failed otherwise, and is retried while the gateway cannot tell.
	// A transition whose guard excludes paying orders, or that sets pay_status, writes
	// nothing and reads nothing.
	EffectCancelPayment = "cancel_payment"
	// EffectRefundPayment requests a full refund of what is left of the captured amount,
	// restocking every unit not refunded yet once the gateway confirms it (a refund row and
	// its refund.execute message),
	// then takes the flow's refund transition from the new state when there is one.
	EffectRefundPayment = "refund_payment"
)

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
		{StatePendingPayment, EventPay, StatePaid, PayEffects},
		{StatePendingPayment, EventTimeout, StateClosed, CloseEffects},
		{StatePendingPayment, EventCancel, StateClosed, CloseEffects},
		{StatePaid, EventShip, StateShipped, nil},
		{StateShipped, EventComplete, StateCompleted, nil},
		{StatePaid, EventRefund, StateRefunding, nil},
		{StateShipped, EventRefund, StateRefunding, nil},
		{StateCompleted, EventRefund, StateRefunding, nil},
		{StateRefunding, EventRefundComplete, StateRefunded, nil},
		{StatePaid, EventPartialRefund, StatePaid, nil},
		{StateShipped, EventPartialRefund, StateShipped, nil},
		{StateCompleted, EventPartialRefund, StateCompleted, nil},
		{StateRefunding, EventPartialRefund, StateRefunding, nil},
	},
	Timed: []TimedState{
		{StatePendingPayment, DeadlinePayment, EventTimeout, CloseReasonPaymentTimeout},
	},
}

// CloseEffects are the effects of closing an unpaid order (payment timeout, buyer cancel):
// order.closed is published, an attempt still in flight is cancelled at the gateway after
// the commit (EffectCancelPayment), and its reservations and coupon are released in the
// close's own transaction, so an order that reads closed never holds stock.
//
// Stock last: the stock rows of a SKU are the rows that every create, payment and close of
// it updates, and a transaction holds them from its update to its commit; so every flow
// touches them as late as it can, after its outbox writes, and only the coupons (rows of
// one user) after them, in every transaction (the one lock order: orders, then stock in
// SKU order, then coupons). Releasing first held a close batch's SKUs while it wrote its
// outbox rows, and the creates of those SKUs waited for it.
var CloseEffects = []string{EffectPublish + TopicOrderClosed, EffectCancelPayment, EffectReleaseReservations, EffectReleaseCoupon}

// PayEffects are the effects of applying a payment: order.paid published, reservations
// committed, coupon used (stock last, as CloseEffects).
var PayEffects = []string{EffectPublish + TopicOrderPaid, EffectCommitReservations, EffectUseCoupon}

// Flows is a registry of flows by name. Build it once at the composition root (NewFlows)
// and give the same registry to every service.
type Flows map[string]*Flow

// NewFlows returns a registry of flows, each validated (Flow.Validate); two flows of one
// name are an error (EINVALID).
func NewFlows(flows ...*Flow) (Flows, error) {
	fs := make(Flows, len(flows))
	for _, f := range flows {
		if err := f.Validate(); err != nil {
			return nil, err
		}
		if _, dup := fs[f.Name]; dup {
			return nil, Errorf(EINVALID, "flow %s is registered twice", f.Name)
		}
		fs[f.Name] = f
	}
	return fs, nil
}

// DefaultFlows returns the registry of built-in flows.
func DefaultFlows() Flows {
	return Flows{FlowStandard: StandardFlow}
}

// Names returns the registered flow names, sorted.
func (fs Flows) Names() []string {
	names := make([]string, 0, len(fs))
	for n := range fs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
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
