package order

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// Effect is a named effect of transitions (orderly.FlowTransition.Effects). It runs in the
// transition's own transaction tx, once per batch, on the orders that changed; it must be
// set-based and guarded (a repeat changes nothing), and it writes to the outbox whatever
// leaves the database. An error rolls the transition back.
type Effect func(ctx context.Context, tx store.Tx, b *EffectBatch) error

// EffectBatch is what an effect is applied to: the orders that one transition changed (for
// a lock effect, orderly.EffectLock: the orders it may change).
type EffectBatch struct {
	// Machine is the machine that applies the transition: an effect that moves other orders
	// (a group's success moves its paid members) does it through Machine.Transition.
	Machine    *Machine
	Flow       *orderly.Flow
	Transition orderly.FlowTransition // the row of the flow's table that applied
	IDs        []string               // the orders that changed, at least one
	// Coupons maps an order id to the coupon it froze; orders without one are absent.
	Coupons map[string]string
	// Params are the transition's parameters: Now (database clock), CloseReason, Actor,
	// Cause, TraceID.
	Params *store.OrdersTransitionParams
	// traceParents maps an order id to its transition span's traceparent when the
	// transition continues the orders' own traces (see OrderContext).
	traceParents map[string]string
}

// Machine applies transitions: the one function through which an order's state changes
// (I6), for every flow. It holds the flow registry and the effects registry, built once at
// the composition root (package engine) and shared by every service. See docs/concepts/orders-and-flows.md.
type Machine struct {
	flows   orderly.Flows
	effects map[string]Effect
	metrics *telemetry.Metrics // nil: transitions are not counted
}

// WithMetrics makes m count its transitions in orderly_order_transitions_total{flow,from,to}
// and returns m. Call it before m is shared (the composition root does).
func (m *Machine) WithMetrics(mt *telemetry.Metrics) *Machine {
	m.metrics = mt
	return m
}

// NewMachine returns a Machine over flows with the built-in effects (Effects) and extra,
// the effects of other packages (a flow's own package registers its effects here). It
// returns an error when an effect is registered twice or a flow names an effect that is not
// registered: a flow that cannot run is refused at start, not at its first transition.
func NewMachine(flows orderly.Flows, extra ...map[string]Effect) (*Machine, error) {
	m := &Machine{flows: flows, effects: Effects()}
	for _, e := range extra {
		for name, fn := range e {
			if _, dup := m.effects[name]; dup || strings.HasPrefix(name, orderly.EffectPublish) {
				return nil, fmt.Errorf("order: effect %q is registered twice or uses the reserved prefix %q", name, orderly.EffectPublish)
			}
			m.effects[name] = fn
		}
	}
	for _, name := range flows.Names() {
		f := flows[name]
		if err := f.Validate(); err != nil {
			return nil, err
		}
		for _, t := range f.Transitions {
			for _, e := range t.Effects {
				if _, ok := m.effects[e]; !ok && !strings.HasPrefix(e, orderly.EffectPublish) {
					return nil, fmt.Errorf("order: flow %s: %s names effect %q, which no package registered (have %s)",
						f.Name, t, e, strings.Join(slices.Sorted(maps.Keys(m.effects)), ", "))
				}
			}
		}
	}
	return m, nil
}

// DefaultMachine returns a Machine over orderly.DefaultFlows with the built-in effects.
func DefaultMachine() *Machine {
	m, err := NewMachine(orderly.DefaultFlows())
	if err != nil {
		panic(err) // the built-in flows name only built-in effects; a test covers it
	}
	return m
}

// Flows returns the flow registry.
func (m *Machine) Flows() orderly.Flows { return m.flows }

// Flow returns the named flow; EINVALID when there is none.
func (m *Machine) Flow(name string) (*orderly.Flow, error) { return m.flows.Get(name) }

// Transition is the only way an order changes state (I6). It asks the flow's table for the
// row that p.Event takes from p.From (EILLEGAL if none), applies the guarded update and the
// audit rows through tx.OrdersTransition (wake_at follows the new state: its deadline when
// the state is timed, none otherwise), then runs the row's effects in order on the orders
// that changed, in tx. coupons maps order ids to the coupon each froze (nil when none did).
// It returns the ids that changed; ids missing from the result were changed concurrently
// and must be left alone.
//
// Tracing: the audit rows carry p.TraceID, or else the trace id of ctx's span; the
// transition runs in an "order.transition" span (see startTransitionSpans), whose trace the
// outbox messages of its effects carry.
func (m *Machine) Transition(ctx context.Context, tx store.Tx, flow *orderly.Flow, p *store.OrdersTransitionParams, coupons map[string]string) ([]string, error) {
	p.TraceID = cmp.Or(p.TraceID, telemetry.TraceID(ctx))
	row, err := flow.Transition(p.From, p.Event)
	if err != nil {
		return nil, err
	}
	p.To = row.To
	_, p.Timed = flow.TimedIn(row.To)
	// Lock effects first, on the candidates, before the guarded update locks the orders.
	for _, name := range row.Effects {
		if !strings.HasPrefix(name, orderly.EffectLock) || len(p.IDs) == 0 {
			continue
		}
		fn := m.effects[name]
		if fn == nil {
			return nil, fmt.Errorf("effect %q is not registered", name) // NewMachine refuses such flows
		}
		b := &EffectBatch{Machine: m, Flow: flow, Transition: *row, IDs: p.IDs, Coupons: coupons, Params: p}
		if err := fn(ctx, tx, b); err != nil {
			return nil, fmt.Errorf("%s of %s (%d orders): %w", name, row, len(p.IDs), err)
		}
	}
	changed, err := tx.OrdersTransition(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("transition %s on %s: %w", p.From, p.Event, err)
	}
	if len(changed) == 0 {
		return changed, nil
	}
	m.countTransition(tx, flow, p, len(changed))
	ctx, spans, err := startTransitionSpans(ctx, tx, flow, p, changed)
	defer func() { spans.end(err) }()
	if err != nil {
		return nil, err
	}
	b := &EffectBatch{Machine: m, Flow: flow, Transition: *row, IDs: changed, Coupons: coupons, Params: p,
		traceParents: spans.parents}
	for _, name := range row.Effects {
		if strings.HasPrefix(name, orderly.EffectLock) {
			continue // ran before the update
		} else if deferred, derr := deferEffect(ctx, name, b); deferred || derr != nil {
			err = derr // left to the caller's Deferred.Flush
		} else if topic, ok := strings.CutPrefix(name, orderly.EffectPublish); ok {
			err = publish(ctx, tx, topic, b)
		} else if fn := m.effects[name]; fn != nil {
			err = fn(ctx, tx, b)
		} else {
			err = fmt.Errorf("effect %q is not registered", name) // NewMachine refuses such flows
		}
		if err != nil {
			err = fmt.Errorf("%s of %s (%d orders): %w", name, row, len(changed), err)
			return nil, err
		}
	}
	return changed, nil
}

// Insert is the only way orders are written: it inserts params in tx (one statement for
// one order, a few multi-row ones for many) and, once tx commits, counts each order in
// orderly_orders_created_total{flow}, whatever path created it (an API create, a batch, a
// wallet checkout later compensated, a trip).
func (m *Machine) Insert(ctx context.Context, tx store.Tx, params ...*store.OrderInsertParams) error {
	var err error
	switch len(params) {
	case 0:
		return nil
	case 1:
		err = tx.OrderInsert(ctx, params[0])
	default:
		err = tx.OrdersInsertMany(ctx, params)
	}
	if err != nil || m.metrics == nil {
		return err
	}
	byFlow := map[string]int{}
	for _, p := range params {
		byFlow[cmp.Or(p.Order.Flow, orderly.FlowStandard)]++
	}
	created := m.metrics.OrdersCreated
	tx.AfterCommit(func() {
		for flow, n := range byFlow {
			created.WithLabelValues(flow).Add(float64(n))
		}
	})
	return nil
}

// countTransition counts n orders that p moved, once tx commits: a rolled-back or retried
// attempt counts nothing. A move to closed also counts in
// orderly_orders_closed_total{flow,reason,trigger}, whichever path closed them (the
// closer, the buyer, a saga's compensation, a group's failure, a trip's cancel); trigger
// is the transition's actor (timer, sweep, buyer, checkout, rider, …).
func (m *Machine) countTransition(tx store.Tx, flow *orderly.Flow, p *store.OrdersTransitionParams, n int) {
	if m.metrics == nil {
		return
	}
	moved := m.metrics.OrderTransitions.WithLabelValues(flow.Name, string(p.From), string(p.To))
	var closed prometheus.Counter
	if p.To == orderly.StateClosed {
		reason := cmp.Or(string(p.CloseReason), string(p.Event))
		closed = m.metrics.OrdersClosed.WithLabelValues(flow.Name, reason, cmp.Or(p.Actor, "unknown"))
	}
	tx.AfterCommit(func() {
		moved.Add(float64(n))
		if closed != nil {
			closed.Add(float64(n))
		}
	})
}

// Effects returns the built-in effects, implemented here because package order owns
// reservations and coupons (orderly.EffectReleaseReservations, …).
func Effects() map[string]Effect {
	return map[string]Effect{
		orderly.EffectReleaseReservations: func(ctx context.Context, tx store.Tx, b *EffectBatch) error {
			_, err := tx.ReservationsReleaseMany(ctx, b.IDs, b.Params.Now)
			return err
		},
		orderly.EffectCommitReservations: func(ctx context.Context, tx store.Tx, b *EffectBatch) error {
			_, err := tx.ReservationsCommitMany(ctx, b.IDs, b.Params.Now)
			return err
		},
		orderly.EffectReleaseCoupon: func(ctx context.Context, tx store.Tx, b *EffectBatch) error {
			refs := b.couponRefs()
			if len(refs) == 0 {
				return nil
			}
			_, err := tx.CouponsRelease(ctx, refs, b.Params.Now)
			return err
		},
		orderly.EffectRefundPayment: refundPayment,
		orderly.EffectCancelPayment: cancelPayments,
		orderly.EffectUseCoupon: func(ctx context.Context, tx store.Tx, b *EffectBatch) error {
			for _, r := range b.couponRefs() {
				ok, err := tx.CouponUse(ctx, r.CouponID, r.OrderID)
				if err != nil {
					return err
				} else if !ok {
					// The order froze it and only its own close or payment moves it; a coupon
					// not frozen by this order here is a broken invariant, not a race.
					return fmt.Errorf("coupon %s is not frozen by order %s", r.CouponID, r.OrderID)
				}
			}
			return nil
		},
	}
}

// couponRefs returns the (coupon, order) pairs of the changed orders that froze a coupon.
func (b *EffectBatch) couponRefs() []orderly.CouponRef {
	var refs []orderly.CouponRef
	for _, id := range b.IDs {
		if c := b.Coupons[id]; c != "" {
			refs = append(refs, orderly.CouponRef{CouponID: c, OrderID: id})
		}
	}
	return refs
}

// publish writes the event topic about each changed order to the outbox: an OrderEvent
// keyed by the order id with its next event sequence (reserved in tx).
func publish(ctx context.Context, tx store.Tx, topic string, b *EffectBatch) error {
	payloads := make([]orderly.Sequenced, len(b.IDs))
	for i, id := range b.IDs {
		payloads[i] = &orderly.OrderEvent{OrderID: id, State: b.Transition.To, Reason: string(b.Params.CloseReason), At: b.Params.Now,
			Metadata: b.Params.Metadata[id]}
	}
	msgs, err := outbox.NewEvents(ctx, tx, topic, b.IDs, payloads, b.Params.Now)
	if err != nil {
		return err
	}
	for i, id := range b.IDs {
		msgs[i].TraceParent = b.traceParent(id)
	}
	return tx.OutboxInsert(ctx, msgs)
}

// cancelPayments is orderly.EffectCancelPayment: a payment.cancel message (key: the payment
// id) for each changed order still paying, that is, closed with its attempt in flight.
func cancelPayments(ctx context.Context, tx store.Tx, b *EffectBatch) error {
	p := b.Params
	if p.SetPayStatus != "" && p.SetPayStatus != orderly.PayPaying ||
		p.PayStatusIn != nil && !slices.Contains(p.PayStatusIn, orderly.PayPaying) {
		return nil // no changed order can still be paying
	}
	inFlight, err := tx.OrdersPaymentsInFlight(ctx, b.IDs)
	if err != nil || len(inFlight) == 0 {
		return err
	}
	msgs := make([]*store.OutboxInsertParams, 0, len(inFlight))
	for _, orderID := range slices.Sorted(maps.Keys(inFlight)) {
		m, err := outbox.NewMessage(orderly.TopicPaymentCancel, inFlight[orderID],
			orderly.PaymentRef{PaymentID: inFlight[orderID], OrderID: orderID}, p.Now)
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	return tx.OutboxInsert(ctx, msgs)
}
