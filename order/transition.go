package order

import (
	"context"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

// Transition is the only way an order changes state (I6). It asks the flow's table for the
// state that p.Event leads to from p.From (EILLEGAL if none), then applies the guarded
// update and the audit rows through tx.OrdersTransition. It returns the ids that changed;
// ids missing from the result were changed concurrently and must be left alone.
func Transition(ctx context.Context, tx store.Tx, flow *orderly.Flow, p *store.OrdersTransitionParams) ([]string, error) {
	to, err := flow.Next(p.From, p.Event)
	if err != nil {
		return nil, err
	}
	p.To = to
	changed, err := tx.OrdersTransition(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("transition %s on %s: %w", p.From, p.Event, err)
	}
	return changed, nil
}

// Closed is an order that was just closed, with what its close must release.
type Closed struct {
	ID       string
	CouponID string // "" when the order froze no coupon
}

// CloseMessages returns the outbox messages that a close writes in its own transaction tx:
// release the reservations, release the coupon (when there is one) and the order.closed
// event (README.md "How it works"), all keyed by the order id, in that order, the event with the
// order's next event sequence (reserved in tx).
func CloseMessages(ctx context.Context, tx store.Tx, closed []Closed, reason orderly.CloseReason, now time.Time) ([]*store.OutboxInsertParams, error) {
	ids := make([]string, len(closed))
	payloads := make([]orderly.Sequenced, len(closed))
	for i, c := range closed {
		ids[i] = c.ID
		payloads[i] = &orderly.OrderEvent{OrderID: c.ID, State: orderly.StateClosed, Reason: string(reason), At: now}
	}
	events, err := outbox.NewEvents(ctx, tx, orderly.TopicOrderClosed, ids, payloads, now)
	if err != nil {
		return nil, err
	}
	msgs := make([]*store.OutboxInsertParams, 0, 3*len(closed))
	for i, c := range closed {
		m, err := outbox.NewMessage(orderly.TopicReservationRelease, c.ID, orderly.OrderRef{OrderID: c.ID}, now)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
		if c.CouponID != "" {
			m, err := outbox.NewMessage(orderly.TopicCouponRelease, c.ID, orderly.CouponRef{CouponID: c.CouponID, OrderID: c.ID}, now)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		}
		msgs = append(msgs, events[i])
	}
	return msgs, nil
}
