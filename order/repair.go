package order

import (
	"context"
	"fmt"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Reapply runs again the local effects of the transition that brought an order into its
// current state, for a repair (package reconcile): a closed order whose reservations still
// read held or whose coupon still reads frozen gets the release effects of its flow's close
// transition, in tx, exactly as the close would have run them. It never changes the
// order's state and never writes events (publish: effects are skipped, the order's events
// were written with its transition). The effects are guarded (docs/concepts/orders-and-flows.md), so a
// repeat, or a repair of an order that needs none, changes nothing.
//
// The row is the flow's transition that the order's audit trail shows last moving it into
// o.State (for a closed order: timeout, cancel, or its flow's own close); EILLEGAL when the
// trail or the flow has none. p carries Now, Actor, Cause and TraceID; Reapply fills in the
// rest.
func (m *Machine) Reapply(ctx context.Context, tx store.Tx, o *orderly.Order, p *store.OrdersTransitionParams) error {
	flow, err := m.Flow(o.Flow)
	if err != nil {
		return err
	}
	trail, err := tx.TransitionList(ctx, o.ID)
	if err != nil {
		return err
	}
	var event orderly.Event
	for _, tr := range trail {
		if tr.To == o.State && tr.From != tr.To {
			event = tr.Event
		}
	}
	var row *orderly.FlowTransition
	for i := range flow.Transitions {
		if t := &flow.Transitions[i]; t.To == o.State && t.Event == event && event != "" {
			row = t
			break
		}
	}
	if row == nil {
		return orderly.Errorf(orderly.EILLEGAL, "order %s: flow %s has no transition into %s on %q (from its audit trail)", o.ID, flow.Name, o.State, event)
	}
	p.IDs, p.From, p.To, p.Event = []string{o.ID}, row.From, row.To, row.Event
	var coupons map[string]string
	if o.CouponID != "" {
		coupons = map[string]string{o.ID: o.CouponID}
	}
	b := &EffectBatch{Machine: m, Flow: flow, Transition: *row, IDs: p.IDs, Coupons: coupons, Params: p}
	for _, name := range row.Effects {
		if strings.HasPrefix(name, orderly.EffectLock) || strings.HasPrefix(name, orderly.EffectPublish) {
			continue
		}
		fn := m.effects[name]
		if fn == nil {
			return fmt.Errorf("effect %q is not registered", name) // NewMachine refuses such flows
		}
		if err := fn(ctx, tx, b); err != nil {
			return fmt.Errorf("reapply %s of %s on order %s: %w", name, row, o.ID, err)
		}
	}
	return nil
}
